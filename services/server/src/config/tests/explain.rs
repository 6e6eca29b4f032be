//! Tests of `config explain`: every key, its layer, aligned output and redaction.

use super::super::*;
use super::{KEY, PASSWORD, env, file, load_ok, with_env};

fn dsn() -> String {
    format!("postgres://baton:{PASSWORD}@db.internal:5433/baton?sslmode=require")
}

fn row<'a>(loaded: &'a Loaded, key: &str) -> &'a ExplainRow {
    loaded
        .explain_rows()
        .iter()
        .find(|r| r.key == key)
        .unwrap_or_else(|| panic!("no row for {key}"))
}

#[test]
fn explain_of_defaults_lists_every_key_in_schema_order() {
    let text = load_ok(Sources::default()).explain();
    let expected = "\
KEY                                 VALUE           SOURCE
tier                                embedded        default
data_dir                            ./baton-data    default
replica_name                        baton           default
http.listen                         127.0.0.1:8080  default
http.body_limit_bytes               1048576         default
http.sse_buffer                     256             default
http.sse_keepalive_secs             15              default
http.sse_resync_ms                  2000            default
http.shutdown_grace_secs            30              default
http.header_limit_bytes             16384           default
http.allowed_hosts                  []              default
http.allowed_origins                []              default
http.key_rate_limit                 100             default
http.tenant_rate_limit              500             default
http.header_read_timeout_ms         10000           default
http.request_timeout_ms             30000           default
http.sse_streams_per_key            100             default
http.sse_streams_per_tenant         1000            default
database.url                        (unset)         default
database.app_pool                   16              default
database.control_pool               2               default
database.checkpoint_pool            2               default
database.max_connections            32              default
database.statement_timeout_ms       10000           default
database.acquire_timeout_ms         5000            default
database.migrate_on_start           true            default
bus.nats_url                        (unset)         default
bus.subject_prefix                  baton           default
bus.nats_user                       (unset)         default
bus.nats_password                   (unset)         default
bus.nats_token                      (unset)         default
bus.nats_nkey_seed                  (unset)         default
bus.nats_creds_file                 (unset)         default
bus.nats_tls_required               false           default
bus.nats_tls_ca_file                (unset)         default
bus.nats_tls_cert_file              (unset)         default
bus.nats_tls_key_file               (unset)         default
auth.required                       false           default
auth.argon2_memory_kib              19456           default
auth.argon2_iterations              2               default
auth.argon2_parallelism             1               default
auth.session_lifetime_secs          43200           default
auth.stream_ticket_lifetime_secs    60              default
auth.login_account_rate_limit       10              default
auth.login_address_rate_limit       30              default
log.format                          pretty          default
log.filter                          info            default
cluster.lease_ttl_ms                15000           default
cluster.renew_interval_ms           5000            default
cluster.adopt_interval_ms           2000            default
cluster.adopt_batch                 100             default
crypto.keys                         (unset)         default
crypto.keys_dir                     (unset)         default
crypto.active_key                   (unset)         default
egress.allow                        []              default
egress.deny                         []              default
egress.allow_loopback               (unset)         default
retention.interval_ms               60000           default
retention.batch                     100             default
retention.idempotency_window_hours  168             default
retention.webhook_deliveries_days   30              default
schedules.poll_interval_ms          5000            default
schedules.grace_ms                  60000           default
schedules.min_interval_ms           60000           default
schedules.batch                     100             default
schedules.max_per_tenant            100             default
webhooks.poll_interval_ms           2000            default
webhooks.batch                      32              default
webhooks.timeout_ms                 10000           default
webhooks.retry_base_ms              5000            default
webhooks.retry_max_ms               3600000         default
webhooks.retry_for_secs             86400           default
webhooks.disable_after_failures     100             default
workspaces.code_tools               true            default
workspaces.environments             (unset)         default
workspaces.max_file_bytes           33554432        default
workspaces.max_run_bytes            1073741824      default
workspaces.max_run_files            10000           default
workspaces.max_tenant_bytes         21474836480     default
";
    assert_eq!(text, expected);
}

#[test]
fn explain_covers_every_schema_key_exactly_once() {
    let loaded = load_ok(Sources::default());
    let keys: Vec<&str> = loaded
        .explain_rows()
        .iter()
        .map(|r| r.key.as_str())
        .collect();
    // Every key explain prints must be accepted by the loader: set each one from a file.
    let toml: String = loaded
        .explain_rows()
        .iter()
        .filter(|r| r.value != UNSET)
        .map(|r| {
            let value = match r.value.parse::<u64>() {
                Ok(_) => r.value.clone(),
                Err(_) if r.value == "true" || r.value == "false" => r.value.clone(),
                Err(_) => format!("{:?}", r.value),
            };
            match r.key.split_once('.') {
                Some((table, leaf)) => format!("{table}.{leaf} = {value}\n"),
                None => format!("{} = {value}\n", r.key),
            }
        })
        .collect();
    let (_dir, path) = file(&toml);
    let reloaded = load_ok(Sources {
        config_path: Some(path.clone()),
        ..Sources::default()
    });
    for r in reloaded.explain_rows() {
        if r.value != UNSET {
            assert_eq!(r.source, Layer::File(path.clone()), "{}", r.key);
        }
    }
    let mut unique = keys.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), keys.len());
    assert_eq!(keys.len(), 79);
}

#[test]
fn explain_names_the_layer_of_each_value() {
    let (_dir, path) = file("[database]\napp_pool = 10\n[log]\nfilter = \"debug\"\n");
    let loaded = load_ok(Sources {
        config_path: Some(path.clone()),
        env: env(&[("BATON_LOG__FILTER", "warn"), ("HOSTNAME", "pod-1")]),
        cli: CliOverrides {
            log_format: Some(LogFormat::Json),
            ..CliOverrides::default()
        },
    });
    assert_eq!(
        row(&loaded, "database.app_pool").source,
        Layer::File(path.clone())
    );
    assert_eq!(row(&loaded, "database.app_pool").value, "10");
    assert_eq!(
        row(&loaded, "log.filter").source,
        Layer::Env("BATON_LOG__FILTER".into())
    );
    assert_eq!(row(&loaded, "log.filter").value, "warn");
    assert_eq!(
        row(&loaded, "log.format").source,
        Layer::Cli("--log-format")
    );
    assert_eq!(
        row(&loaded, "replica_name").source,
        Layer::Env("HOSTNAME".into())
    );
    assert_eq!(row(&loaded, "tier").source, Layer::Default);

    let text = loaded.explain();
    let file_line = format!("file {}", path.display());
    assert!(
        text.lines()
            .any(|l| l.starts_with("database.app_pool") && l.ends_with(&file_line))
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("log.filter") && l.ends_with("env BATON_LOG__FILTER"))
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("log.format") && l.ends_with("cli --log-format"))
    );
}

#[test]
fn explain_redacts_a_dsn_given_via_env() {
    let loaded = load_ok(with_env(&[("BATON_DATABASE__URL", &dsn())]));
    let text = loaded.explain();
    assert!(!text.contains(PASSWORD), "{text}");
    assert!(text.contains("***"), "{text}");
    let url = row(&loaded, "database.url");
    assert_eq!(
        url.value,
        "postgres://baton:***@db.internal:5433/baton?sslmode=require"
    );
    assert_eq!(url.source, Layer::Env("BATON_DATABASE__URL".into()));
}

#[test]
fn explain_redacts_every_nats_secret_and_shows_the_rest() {
    let loaded = load_ok(with_env(&[
        ("BATON_BUS__NATS_PASSWORD", PASSWORD),
        ("BATON_BUS__NATS_TOKEN", PASSWORD),
        ("BATON_BUS__NATS_NKEY_SEED", PASSWORD),
        ("BATON_BUS__NATS_USER", "baton"),
        ("BATON_BUS__SUBJECT_PREFIX", "acme"),
    ]));
    let text = loaded.explain();
    assert!(!text.contains(PASSWORD), "{text}");
    for key in ["bus.nats_password", "bus.nats_token", "bus.nats_nkey_seed"] {
        assert_eq!(row(&loaded, key).value, "***", "{key}");
    }
    assert_eq!(row(&loaded, "bus.nats_user").value, "baton");
    assert_eq!(row(&loaded, "bus.subject_prefix").value, "acme");
}

#[test]
fn explain_redacts_a_dsn_given_via_file() {
    let (_dir, path) = file(&format!(
        "tier = \"team\"\n[database]\nurl = \"{}\"\n",
        dsn()
    ));
    let loaded = load_ok(Sources {
        config_path: Some(path.clone()),
        ..Sources::default()
    });
    let text = loaded.explain();
    assert!(!text.contains(PASSWORD), "{text}");
    assert!(
        text.contains("postgres://baton:***@db.internal:5433/baton"),
        "{text}"
    );
    assert_eq!(row(&loaded, "database.url").source, Layer::File(path));
}

#[test]
fn explain_redacts_a_dsn_and_nats_url_given_via_cli() {
    let loaded = load_ok(Sources {
        cli: CliOverrides {
            database_url: Some(dsn().into()),
            nats_url: Some(format!("nats://bus:{PASSWORD}@n1:4222, nats://n2:4222").into()),
            ..CliOverrides::default()
        },
        ..Sources::default()
    });
    let text = loaded.explain();
    assert!(!text.contains(PASSWORD), "{text}");
    assert_eq!(
        row(&loaded, "database.url").source,
        Layer::Cli("--database-url")
    );
    let nats = row(&loaded, "bus.nats_url");
    assert_eq!(nats.value, "nats://bus:***@n1:4222,nats://n2:4222");
    assert_eq!(nats.source, Layer::Cli("--nats-url"));
}

#[test]
fn explain_shows_key_ids_but_never_keys_from_file_or_env() {
    let (_dir, path) = file(&format!(
        "[crypto]\nactive_key = \"2025-01\"\nkeys_dir = \"/etc/baton/keyring\"\n\
         [crypto.keys]\n\"2025-01\" = \"{KEY}\"\n"
    ));
    let loaded = load_ok(Sources {
        config_path: Some(path.clone()),
        env: env(&[("BATON_CRYPTO__KEYS__OLD", KEY)]),
        ..Sources::default()
    });
    let text = loaded.explain();
    assert!(!text.contains(KEY), "{text}");
    let keys = row(&loaded, "crypto.keys");
    assert_eq!(keys.value, "2025-01=***,old=***");
    assert_eq!(row(&loaded, "crypto.active_key").value, "2025-01");
    assert_eq!(
        row(&loaded, "crypto.active_key").source,
        Layer::File(path.clone())
    );
    assert_eq!(row(&loaded, "crypto.keys_dir").value, "/etc/baton/keyring");
    assert!(!format!("{loaded:?}").contains(KEY));

    let from_env = load_ok(with_env(&[
        ("BATON_CRYPTO__KEYS__K1", KEY),
        ("BATON_CRYPTO__ACTIVE_KEY", "k1"),
    ]));
    let keys = row(&from_env, "crypto.keys");
    assert_eq!(keys.value, "k1=***");
    assert!(
        matches!(&keys.source, Layer::Env(name) if name.starts_with("BATON_CRYPTO__KEYS")),
        "{keys}"
    );
    assert!(!from_env.explain().contains(KEY));
}

#[test]
fn redaction_covers_tokens_query_passwords_and_non_urls() {
    assert_eq!(
        redact_nats_url(&format!("nats://{PASSWORD}@nats:4222")),
        "nats://***@nats:4222"
    );
    let redacted = redact_dsn(&format!(
        "postgres://db/baton?user=baton&password={PASSWORD}&sslmode=disable"
    ));
    assert!(!redacted.contains(PASSWORD), "{redacted}");
    assert!(redacted.contains("password=***") && redacted.contains("sslmode=disable"));
    assert_eq!(
        redact_dsn(&format!("host=db password={PASSWORD}")),
        REDACTED
    );
    assert_eq!(
        redact_dsn("sqlite://./data/baton.db?mode=rwc"),
        "sqlite://./data/baton.db?mode=rwc"
    );
    assert_eq!(
        redact_dsn("postgres://baton@db/baton"),
        "postgres://baton@db/baton"
    );
    let encoded = redact_dsn("postgres://u:p%40ss%3Aword@db/x");
    assert_eq!(encoded, "postgres://u:***@db/x");
}

#[test]
fn the_configuration_reference_documents_every_key_with_its_default() {
    let doc = include_str!("../../../../../docs/configuration.md");
    for r in load_ok(Sources::default()).explain_rows() {
        let row = format!("| `{}` |", r.key);
        assert!(
            doc.contains(&row),
            "docs/configuration.md lacks a row for {}",
            r.key
        );
        let line = doc
            .lines()
            .find(|l| l.starts_with(&row))
            .unwrap_or_default();
        if r.value != UNSET && r.key != "replica_name" {
            assert!(
                line.contains(&format!("`{}`", r.value)),
                "docs/configuration.md gives another default for {}: {line}",
                r.key
            );
        }
    }
}
