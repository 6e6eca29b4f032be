//! Tests of `validate()`: tier rules, the loopback rule, the pool budget and value ranges.

use std::path::PathBuf;
use std::time::Duration;

use secrecy::ExposeSecret;

use super::super::*;
use super::{KEY, file, load_ok, with_env};

const DSN: &str = "postgres://baton:pw@db:5432/baton";
const NATS: &str = "nats://nats:4222";

fn validate_env(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
    load_ok(with_env(pairs)).validate()
}

fn team(overrides: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut vars = vec![
        ("BATON_TIER", "team"),
        ("BATON_DATABASE__URL", DSN),
        ("BATON_BUS__NATS_URL", NATS),
        ("BATON_AUTH__REQUIRED", "true"),
        ("BATON_CRYPTO__KEYS__K1", KEY),
        ("BATON_CRYPTO__ACTIVE_KEY", "k1"),
    ];
    for (k, v) in overrides {
        vars.retain(|(name, _)| name != k);
        if !v.is_empty() {
            vars.push((k, v));
        }
    }
    super::env(&vars)
}

fn validate_team(overrides: &[(&str, &str)]) -> Result<Config, ConfigError> {
    load_ok(Sources {
        env: team(overrides),
        ..Sources::default()
    })
    .validate()
}

#[test]
fn embedded_default_uses_sqlite_under_data_dir_and_in_process_bus() {
    let config = validate_env(&[]).expect("defaults are valid");
    assert_eq!(config.tier, Tier::Embedded);
    match &config.storage {
        Storage::Sqlite {
            location, pools, ..
        } => {
            assert_eq!(
                location,
                &SqliteLocation::File(PathBuf::from("./baton-data/baton.db"))
            );
            assert_eq!(pools.app + pools.control + pools.checkpoint, 20);
        }
        other => panic!("expected SQLite, got {other:?}"),
    }
    assert!(matches!(config.bus, Bus::InProcess));
    assert_eq!(config.http.sse_resync, Duration::from_millis(2000));
    assert_eq!(config.http.body_limit_bytes, 1 << 20);

    let config = validate_env(&[("BATON_DATA_DIR", "/var/lib/baton")]).expect("valid");
    assert!(matches!(
        &config.storage,
        Storage::Sqlite { location: SqliteLocation::File(p), .. }
            if p == &PathBuf::from("/var/lib/baton/baton.db")
    ));
}

#[test]
fn embedded_accepts_a_sqlite_url() {
    let config = validate_env(&[("BATON_DATABASE__URL", "sqlite::memory:")]).expect("valid");
    assert!(matches!(
        &config.storage,
        Storage::Sqlite { location: SqliteLocation::Url(u), .. } if u == "sqlite::memory:"
    ));
}

#[test]
fn complete_team_config_resolves_to_postgres_and_nats() {
    let config = validate_team(&[]).expect("complete team config");
    match &config.storage {
        Storage::Postgres {
            url,
            statement_timeout,
            ..
        } => {
            assert_eq!(url.expose_secret(), DSN);
            assert_eq!(*statement_timeout, Duration::from_secs(10));
        }
        other => panic!("expected Postgres, got {other:?}"),
    }
    assert!(matches!(&config.bus, Bus::Nats { url, .. } if url.expose_secret() == NATS));
    assert!(config.auth_required);
}

#[test]
fn team_tier_names_every_missing_requirement_in_one_error() {
    let err = validate_env(&[("BATON_TIER", "team")]).expect_err("nothing configured");
    assert_eq!(
        err.to_string(),
        "tier team requires: database.url (a postgres:// DSN), bus.nats_url, \
         auth.required = true, crypto.keys or crypto.keys_dir (an encryption key), \
         crypto.active_key"
    );

    let cases: [(&[(&str, &str)], &str); 6] = [
        (
            &[("BATON_DATABASE__URL", "")],
            "database.url (a postgres:// DSN)",
        ),
        (
            &[("BATON_DATABASE__URL", "sqlite:x.db")],
            "database.url (a postgres:// DSN, not sqlite:)",
        ),
        (&[("BATON_BUS__NATS_URL", "")], "bus.nats_url"),
        (&[("BATON_AUTH__REQUIRED", "false")], "auth.required = true"),
        (
            &[("BATON_CRYPTO__KEYS__K1", "")],
            "crypto.keys or crypto.keys_dir (an encryption key)",
        ),
        (&[("BATON_CRYPTO__ACTIVE_KEY", "")], "crypto.active_key"),
    ];
    for (overrides, expected) in cases {
        match validate_team(overrides) {
            Err(ConfigError::TeamRequirements { missing }) => assert_eq!(missing, [expected]),
            other => panic!("{overrides:?}: expected a team error, got {other:?}"),
        }
    }
}

#[test]
fn embedded_refuses_postgres_and_nats_with_a_hint_to_use_team() {
    for (var, value, key) in [
        ("BATON_DATABASE__URL", DSN, "database.url"),
        (
            "BATON_DATABASE__URL",
            "postgresql://db/baton",
            "database.url",
        ),
        ("BATON_BUS__NATS_URL", NATS, "bus.nats_url"),
    ] {
        let err = validate_env(&[(var, value)]).expect_err("refused");
        assert!(
            matches!(&err, ConfigError::TeamOnly { key: k, .. } if *k == key),
            "{err}"
        );
        assert!(err.to_string().contains("set tier = \"team\""), "{err}");
        assert!(!err.to_string().contains("pw@"), "{err}");
    }
}

#[test]
fn unsupported_urls_are_refused_without_echoing_them() {
    let err = validate_env(&[("BATON_DATABASE__URL", "mysql://u:hunter2@db/x")]).expect_err("x");
    assert!(
        matches!(
            &err,
            ConfigError::Invalid {
                key: "database.url",
                ..
            }
        ),
        "{err}"
    );
    assert!(!err.to_string().contains("hunter2"));
    let err = validate_team(&[("BATON_BUS__NATS_URL", "nats://a:4222,http://u:hunter2@b")])
        .expect_err("x");
    assert!(
        matches!(
            &err,
            ConfigError::Invalid {
                key: "bus.nats_url",
                ..
            }
        ),
        "{err}"
    );
    assert!(!err.to_string().contains("hunter2"));
}

#[test]
fn non_loopback_listener_without_auth_is_refused_in_every_tier() {
    let err = validate_env(&[("BATON_HTTP__LISTEN", "0.0.0.0:8080")]).expect_err("refused");
    assert!(
        matches!(err, ConfigError::UnauthenticatedListener { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("0.0.0.0:8080"), "{err}");
    let err = validate_env(&[("BATON_HTTP__LISTEN", "[::]:8080")]).expect_err("refused");
    assert!(err.to_string().contains("[::]:8080"), "{err}");

    // Team tier: auth is required anyway; with it off the team error names it.
    let err = validate_team(&[
        ("BATON_HTTP__LISTEN", "10.0.0.5:8080"),
        ("BATON_AUTH__REQUIRED", "false"),
    ])
    .expect_err("refused");
    assert!(err.to_string().contains("auth.required = true"), "{err}");
}

#[test]
fn non_loopback_listener_is_allowed_with_auth() {
    let config = validate_env(&[
        ("BATON_HTTP__LISTEN", "0.0.0.0:8080"),
        ("BATON_AUTH__REQUIRED", "true"),
    ])
    .expect("allowed with auth");
    assert_eq!(config.http.listen.port(), 8080);
    validate_team(&[("BATON_HTTP__LISTEN", "0.0.0.0:8080")]).expect("team with auth");
}

#[test]
fn every_loopback_address_is_allowed_without_auth() {
    for listen in [
        "127.0.0.1:0",
        "127.1.2.3:80",
        "[::1]:8080",
        "[::ffff:127.0.0.1]:80",
    ] {
        validate_env(&[("BATON_HTTP__LISTEN", listen)]).unwrap_or_else(|e| panic!("{listen}: {e}"));
    }
}

#[test]
fn pool_budget_exceeded_is_refused_naming_the_numbers() {
    let err = validate_env(&[
        ("BATON_DATABASE__APP_POOL", "30"),
        ("BATON_DATABASE__CONTROL_POOL", "2"),
        ("BATON_DATABASE__CHECKPOINT_POOL", "4"),
        ("BATON_DATABASE__MAX_CONNECTIONS", "32"),
    ])
    .expect_err("over budget");
    assert!(
        matches!(
            err,
            ConfigError::PoolBudget {
                total: 36,
                max: 32,
                ..
            }
        ),
        "{err}"
    );
    let message = err.to_string();
    for number in ["30", "2", "4", "36", "32"] {
        assert!(message.contains(number), "{message}");
    }
    validate_env(&[("BATON_DATABASE__APP_POOL", "28")]).expect("exactly at budget");
}

#[test]
fn out_of_range_values_are_refused_naming_the_key() {
    let cases = [
        (
            "BATON_HTTP__BODY_LIMIT_BYTES",
            "1023",
            "http.body_limit_bytes",
        ),
        ("BATON_HTTP__SSE_BUFFER", "0", "http.sse_buffer"),
        ("BATON_HTTP__SSE_BUFFER", "65537", "http.sse_buffer"),
        (
            "BATON_HTTP__SSE_KEEPALIVE_SECS",
            "0",
            "http.sse_keepalive_secs",
        ),
        ("BATON_HTTP__SSE_RESYNC_MS", "0", "http.sse_resync_ms"),
        (
            "BATON_DATABASE__STATEMENT_TIMEOUT_MS",
            "0",
            "database.statement_timeout_ms",
        ),
        (
            "BATON_DATABASE__ACQUIRE_TIMEOUT_MS",
            "0",
            "database.acquire_timeout_ms",
        ),
        ("BATON_DATABASE__CONTROL_POOL", "0", "database.control_pool"),
        ("BATON_REPLICA_NAME", "has space", "replica_name"),
        ("BATON_LOG__FILTER", "info,=[", "log.filter"),
    ];
    for (var, value, expected) in cases {
        match validate_env(&[(var, value)]) {
            Err(ConfigError::Invalid { key, .. }) => assert_eq!(key, expected, "{var}={value}"),
            other => panic!("{var}={value}: expected Invalid, got {other:?}"),
        }
    }
    validate_env(&[
        ("BATON_HTTP__SSE_BUFFER", "65536"),
        ("BATON_HTTP__BODY_LIMIT_BYTES", "1024"),
    ])
    .expect("bounds are inclusive");
}

#[test]
fn embedded_constructor_for_tests_listens_on_port_zero() {
    let config = Config::embedded("/tmp/baton-test");
    assert_eq!(config.http.listen.port(), 0);
    assert!(config.http.listen.ip().is_loopback());
    assert!(matches!(
        &config.storage,
        Storage::Sqlite { location: SqliteLocation::File(p), .. }
            if p == &PathBuf::from("/tmp/baton-test/baton.db")
    ));
    assert!(matches!(config.bus, Bus::InProcess));
    assert!(matches!(
        &config.crypto,
        Crypto::Generated { dir } if dir == &PathBuf::from("/tmp/baton-test/keyring")
    ));
}

#[test]
fn team_tier_uses_the_configured_keys_and_active_key() {
    let config = validate_team(&[(
        "BATON_CRYPTO__KEYS__K0",
        "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=",
    )])
    .expect("valid");
    match &config.crypto {
        Crypto::Keys { keys, dir, active } => {
            let ids: Vec<&str> = keys.iter().map(|(id, _)| id.as_str()).collect();
            assert_eq!(ids, ["k0", "k1"], "env ids are lower case");
            assert_eq!(keys[1].1.expose_secret(), KEY);
            assert_eq!(dir, &None);
            assert_eq!(active, "k1");
        }
        other => panic!("expected configured keys, got {other:?}"),
    }
    // A key directory may hold the active key: it is read at start-up.
    let config = validate_team(&[
        ("BATON_CRYPTO__KEYS__K1", ""),
        ("BATON_CRYPTO__KEYS_DIR", "/etc/baton/keyring"),
        ("BATON_CRYPTO__ACTIVE_KEY", "2025-06"),
    ])
    .expect("valid");
    assert!(matches!(
        &config.crypto,
        Crypto::Keys { keys, dir: Some(d), active }
            if keys.is_empty() && d == &PathBuf::from("/etc/baton/keyring") && active == "2025-06"
    ));
}

#[test]
fn embedded_without_keys_generates_one_under_data_dir() {
    let config = validate_env(&[("BATON_DATA_DIR", "/var/lib/baton")]).expect("valid");
    assert!(matches!(
        &config.crypto,
        Crypto::Generated { dir } if dir == &PathBuf::from("/var/lib/baton/keyring")
    ));
    assert_eq!(GENERATED_KEY_ID, "local");
    let config = validate_env(&[
        ("BATON_CRYPTO__KEYS__K1", KEY),
        ("BATON_CRYPTO__ACTIVE_KEY", "k1"),
    ])
    .expect("valid");
    assert!(matches!(&config.crypto, Crypto::Keys { active, .. } if active == "k1"));
}

#[test]
fn bad_keys_are_refused_naming_the_key_id_never_the_key() {
    let short = "c2hvcnQta2V5LXNlY3JldA==";
    let cases = [
        (
            vec![
                ("BATON_CRYPTO__KEYS__K1", short),
                ("BATON_CRYPTO__ACTIVE_KEY", "k1"),
            ],
            "crypto.keys",
            "\"k1\" is 16 bytes long",
        ),
        (
            vec![
                ("BATON_CRYPTO__KEYS__K1", "not base64 at all!"),
                ("BATON_CRYPTO__ACTIVE_KEY", "k1"),
            ],
            "crypto.keys",
            "not valid standard base64",
        ),
        (
            vec![
                ("BATON_CRYPTO__KEYS__K1", KEY),
                ("BATON_CRYPTO__ACTIVE_KEY", "k2"),
            ],
            "crypto.active_key",
            "\"k2\" is not one of crypto.keys (k1)",
        ),
        (
            vec![("BATON_CRYPTO__KEYS__K1", KEY)],
            "crypto.active_key",
            "is required",
        ),
        (
            vec![("BATON_CRYPTO__ACTIVE_KEY", "k1")],
            "crypto.active_key",
            "no key is",
        ),
    ];
    for (vars, expected_key, says) in cases {
        match validate_env(&vars) {
            Err(err @ ConfigError::Invalid { key, .. }) => {
                assert_eq!(key, expected_key, "{vars:?}");
                let text = err.to_string();
                assert!(text.contains(says), "{vars:?}: {text}");
                assert!(!text.contains(KEY) && !text.contains(short), "{text}");
            }
            other => panic!("{vars:?}: expected Invalid, got {other:?}"),
        }
    }
    // From a file, an id outside [A-Za-z0-9._-] is refused, named.
    let (_dir, path) = file(&format!(
        "[crypto]\nactive_key = \"a b\"\n[crypto.keys]\n\"a b\" = \"{KEY}\"\n"
    ));
    let err = load_ok(Sources {
        config_path: Some(path),
        ..Sources::default()
    })
    .validate()
    .expect_err("bad id");
    assert!(err.to_string().contains("invalid key id \"a b\""), "{err}");
    assert!(!err.to_string().contains(KEY), "{err}");
}

#[test]
fn allowed_hosts_and_origins_are_normalized_and_checked() {
    let config = validate_env(&[
        (
            "BATON_HTTP__ALLOWED_HOSTS",
            "API.example.com, 10.0.0.1:8080,",
        ),
        (
            "BATON_HTTP__ALLOWED_ORIGINS",
            "https://App.Example.com:443, http://localhost:3000/",
        ),
    ])
    .expect("valid");
    assert_eq!(
        config.http.allowed_hosts,
        ["api.example.com", "10.0.0.1:8080"]
    );
    assert_eq!(
        config.http.allowed_origins,
        ["https://app.example.com", "http://localhost:3000"]
    );
    for (key, bad) in [
        ("BATON_HTTP__ALLOWED_HOSTS", "https://api.example.com"),
        ("BATON_HTTP__ALLOWED_HOSTS", "api.example.com/path"),
        ("BATON_HTTP__ALLOWED_HOSTS", "user@api.example.com"),
        ("BATON_HTTP__ALLOWED_ORIGINS", "app.example.com"),
        (
            "BATON_HTTP__ALLOWED_ORIGINS",
            "https://app.example.com/path",
        ),
        ("BATON_HTTP__ALLOWED_ORIGINS", "file:///etc/passwd"),
        ("BATON_HTTP__HEADER_LIMIT_BYTES", "100"),
    ] {
        let err = validate_env(&[(key, bad)]).expect_err(bad).to_string();
        let dotted = key
            .trim_start_matches("BATON_")
            .replace("__", ".")
            .to_ascii_lowercase();
        assert!(err.contains(&dotted), "{bad}: {err}");
    }
}

#[test]
fn team_tier_takes_its_nats_prefix_credentials_and_tls() {
    let config = validate_team(&[
        ("BATON_BUS__SUBJECT_PREFIX", "acme.prod"),
        ("BATON_BUS__NATS_USER", "baton"),
        ("BATON_BUS__NATS_PASSWORD", "s3cret-nats"),
        ("BATON_BUS__NATS_TLS_REQUIRED", "true"),
        ("BATON_BUS__NATS_TLS_CA_FILE", "/etc/nats/ca.pem"),
    ])
    .expect("valid");
    match &config.bus {
        Bus::Nats {
            subjects,
            auth: baton_bus::NatsAuth::UserPassword { user, password },
            tls,
            ..
        } => {
            assert_eq!(subjects.prefix(), "acme.prod");
            assert_eq!(
                (user.as_str(), password.expose_secret()),
                ("baton", "s3cret-nats")
            );
            assert!(tls.required);
            assert_eq!(
                tls.ca_file.as_deref(),
                Some(std::path::Path::new("/etc/nats/ca.pem"))
            );
        }
        other => panic!("{other:?}"),
    }
    let defaults = validate_team(&[]).expect("valid");
    assert!(matches!(&defaults.bus, Bus::Nats { subjects, .. } if subjects.prefix() == "baton"));
}

#[test]
fn nats_settings_that_contradict_each_other_are_refused_naming_the_key() {
    let cases: &[(&[(&str, &str)], &str)] = &[
        (
            &[("BATON_BUS__SUBJECT_PREFIX", "acme.>")],
            "bus.subject_prefix",
        ),
        (
            &[("BATON_BUS__SUBJECT_PREFIX", "a..b")],
            "bus.subject_prefix",
        ),
        (&[("BATON_BUS__NATS_USER", "baton")], "bus.nats_password"),
        (&[("BATON_BUS__NATS_PASSWORD", "pw")], "bus.nats_user"),
        (
            &[
                ("BATON_BUS__NATS_TOKEN", "t"),
                ("BATON_BUS__NATS_NKEY_SEED", "SUAB"),
            ],
            "bus.nats_nkey_seed",
        ),
        (
            &[
                ("BATON_BUS__NATS_USER", "u"),
                ("BATON_BUS__NATS_PASSWORD", "p"),
                ("BATON_BUS__NATS_CREDS_FILE", "/x.creds"),
            ],
            "bus.nats_creds_file",
        ),
        (
            &[("BATON_BUS__NATS_TLS_CERT_FILE", "/c.pem")],
            "bus.nats_tls_key_file",
        ),
        (
            &[("BATON_BUS__NATS_TLS_KEY_FILE", "/k.pem")],
            "bus.nats_tls_cert_file",
        ),
    ];
    for (vars, key) in cases {
        let err = validate_team(vars).expect_err("refused").to_string();
        assert!(err.contains(key), "{vars:?}: {err}");
        assert!(
            !err.contains("SUAB") && !err.contains("=p"),
            "no secret in {err}"
        );
    }
}

#[test]
fn the_embedded_tier_refuses_nats_credentials_it_would_not_use() {
    let err = validate_env(&[("BATON_BUS__NATS_TOKEN", "tok-1")])
        .expect_err("refused")
        .to_string();
    assert!(
        err.contains("bus.nats_token") && !err.contains("tok-1"),
        "{err}"
    );
    let config =
        validate_env(&[("BATON_BUS__SUBJECT_PREFIX", "local")]).expect("a prefix is harmless");
    assert!(matches!(config.bus, Bus::InProcess));
}

#[test]
fn environments_are_read_from_the_file_and_the_environment_and_checked() {
    let layer = tempfile::tempdir().expect("layer");
    let toml = format!(
        "[workspaces.environments.data]\nlayers = [\"{}:/opt/venv\"]\npath = \"/opt/venv/bin:/usr/bin:/bin\"\n\
         processes = 16\nexecute_role = \"admin\"\n",
        layer.path().display()
    );
    let (_dir, path) = file(&toml);
    let config = load_ok(Sources {
        config_path: Some(path),
        env: super::env(&[("BATON_WORKSPACES__ENVIRONMENTS__NET__NETWORK", "true")]),
        ..Sources::default()
    })
    .validate()
    .expect("valid");
    let bases = &config.environments;
    let data = bases.get("data").expect("data");
    assert_eq!(data.layers[0].at, "/opt/venv");
    assert_eq!(data.limits.processes, Some(16));
    assert_eq!(data.execute_role, baton_core::Role::Admin);
    assert!(!data.network);
    assert!(bases.get("net").expect("net").network);
    assert!(bases.get("default").is_some(), "the built-in stays");

    for (var, value) in [
        ("BATON_WORKSPACES__ENVIRONMENTS__BAD__ROOT", "relative/root"),
        ("BATON_WORKSPACES__ENVIRONMENTS__BAD__ROOT", "/no/such/dir"),
        (
            "BATON_WORKSPACES__ENVIRONMENTS__BAD__LAYERS",
            "/usr:/workspace/x",
        ),
        (
            "BATON_WORKSPACES__ENVIRONMENTS__BAD__LAYERS",
            "/usr:/opt/../etc",
        ),
        ("BATON_WORKSPACES__ENVIRONMENTS__BAD__LAYERS", "/usr"),
        ("BATON_WORKSPACES__ENVIRONMENTS__BAD__PROCESSES", "0"),
        ("BATON_WORKSPACES__ENVIRONMENTS__BAD__EXECUTE_ROLE", "root"),
    ] {
        match validate_env(&[(var, value)]) {
            Err(ConfigError::Invalid { key, message }) => {
                assert_eq!(key, "workspaces.environments", "{var}={value}");
                assert!(message.starts_with("bad: "), "{message}");
            }
            other => panic!("{var}={value}: expected Invalid, got {other:?}"),
        }
    }
}
