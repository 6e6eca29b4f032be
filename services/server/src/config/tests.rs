//! Unit tests of the configuration layer: layering and load errors here; validation,
//! `config explain` and `config reference` in the submodules. Nothing reads or changes the
//! process environment.

mod explain;
mod reference;
mod validate;

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;

use super::*;

pub(super) const PASSWORD: &str = "s3cr3t-hunter2";
/// An encryption key (standard base64 of 32 bytes); must never be shown.
pub(super) const KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";

pub(super) fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// A config file in a fresh temporary directory (kept alive by the returned guard).
pub(super) fn file(contents: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("baton.toml");
    std::fs::write(&path, contents).expect("write config file");
    (dir, path)
}

pub(super) fn load_ok(sources: Sources) -> Loaded {
    match load(sources) {
        Ok(loaded) => loaded,
        Err(e) => panic!("load failed: {e}"),
    }
}

pub(super) fn load_err(sources: Sources) -> ConfigError {
    match load(sources) {
        Ok(loaded) => panic!("load succeeded: {:?}", loaded.raw()),
        Err(e) => e,
    }
}

pub(super) fn with_env(pairs: &[(&str, &str)]) -> Sources {
    Sources {
        env: env(pairs),
        ..Sources::default()
    }
}

fn addr(s: &str) -> SocketAddr {
    s.parse().expect("test address")
}

#[test]
fn defaults_apply_when_no_layer_sets_anything() {
    let loaded = load_ok(Sources::default());
    let raw = loaded.raw();
    assert_eq!(raw.tier, Tier::Embedded);
    assert_eq!(raw.data_dir, PathBuf::from("./baton-data"));
    assert_eq!(raw.replica_name, "baton");
    assert_eq!(raw.http.listen, addr("127.0.0.1:8080"));
    assert_eq!(raw.http.body_limit_bytes, 1_048_576);
    assert_eq!(raw.database.max_connections, 32);
    assert_eq!(raw.log.format, LogFormat::Pretty);
    assert!(
        loaded
            .explain_rows()
            .iter()
            .all(|r| r.source == Layer::Default)
    );
}

#[test]
fn file_overrides_defaults_including_nested_tables() {
    let (_dir, path) = file(
        "replica_name = \"from-file\"\n[http]\nlisten = \"127.0.0.1:9000\"\n\
         [database]\napp_pool = 8\n",
    );
    let loaded = load_ok(Sources {
        config_path: Some(path.clone()),
        ..Sources::default()
    });
    assert_eq!(loaded.raw().replica_name, "from-file");
    assert_eq!(loaded.raw().http.listen, addr("127.0.0.1:9000"));
    assert_eq!(loaded.raw().database.app_pool, 8);
    assert_eq!(
        loaded.raw().database.control_pool,
        2,
        "untouched keys keep defaults"
    );
    assert_eq!(loaded.source_of("http.listen"), Some(&Layer::File(path)));
    assert_eq!(loaded.source_of("http.sse_buffer"), Some(&Layer::Default));
}

#[test]
fn env_overrides_file_with_double_underscore_nesting() {
    let (_dir, path) = file("[http]\nlisten = \"127.0.0.1:9000\"\nsse_buffer = 10\n");
    let loaded = load_ok(Sources {
        config_path: Some(path.clone()),
        env: env(&[
            ("BATON_HTTP__LISTEN", "127.0.0.1:9100"),
            ("BATON_DATABASE__MIGRATE_ON_START", "false"),
            ("BATON_LOG__FORMAT", "json"),
            ("UNRELATED", "ignored"),
        ]),
        ..Sources::default()
    });
    let raw = loaded.raw();
    assert_eq!(raw.http.listen, addr("127.0.0.1:9100"));
    assert_eq!(
        raw.http.sse_buffer, 10,
        "file value survives where env is silent"
    );
    assert!(!raw.database.migrate_on_start);
    assert_eq!(raw.log.format, LogFormat::Json);
    assert_eq!(
        loaded.source_of("http.listen"),
        Some(&Layer::Env("BATON_HTTP__LISTEN".into()))
    );
    assert_eq!(
        loaded.source_of("http.sse_buffer"),
        Some(&Layer::File(path))
    );
}

#[test]
fn cli_flags_override_env_and_file_but_only_when_passed() {
    let (_dir, path) = file("tier = \"embedded\"\n[log]\nformat = \"json\"\n");
    let sources = |cli| Sources {
        config_path: Some(path.clone()),
        env: env(&[
            ("BATON_HTTP__LISTEN", "127.0.0.1:9100"),
            ("BATON_AUTH__REQUIRED", "false"),
        ]),
        cli,
    };
    let loaded = load_ok(sources(CliOverrides {
        listen: Some(addr("127.0.0.1:9200")),
        auth_required: Some(true),
        data_dir: Some("/tmp/elsewhere".into()),
        ..CliOverrides::default()
    }));
    assert_eq!(loaded.raw().http.listen, addr("127.0.0.1:9200"));
    assert!(loaded.raw().auth.required);
    assert_eq!(loaded.raw().data_dir, PathBuf::from("/tmp/elsewhere"));
    assert_eq!(
        loaded.raw().log.format,
        LogFormat::Json,
        "no --log-format passed"
    );
    assert_eq!(
        loaded.source_of("http.listen"),
        Some(&Layer::Cli("--listen"))
    );
    assert_eq!(
        loaded.source_of("data_dir"),
        Some(&Layer::Cli("--data-dir"))
    );

    let untouched = load_ok(sources(CliOverrides::default()));
    assert_eq!(untouched.raw().http.listen, addr("127.0.0.1:9100"));
    assert!(!untouched.raw().auth.required);
}

#[test]
fn cli_overrides_parse_from_flags() {
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        overrides: CliOverrides,
    }
    let cli = Cli::try_parse_from([
        "baton",
        "--tier",
        "team",
        "--listen",
        "0.0.0.0:8080",
        "--auth-required",
        "--log-format",
        "json",
        "--database-url",
        "postgres://u:pw@db/baton",
    ])
    .expect("flags parse");
    let o = cli.overrides;
    assert_eq!(o.tier, Some(Tier::Team));
    assert_eq!(o.listen, Some(addr("0.0.0.0:8080")));
    assert_eq!(o.auth_required, Some(true));
    assert_eq!(o.log_format, Some(LogFormat::Json));
    assert!(o.database_url.is_some() && o.nats_url.is_none() && o.data_dir.is_none());

    let off = Cli::try_parse_from(["baton", "--auth-required=false"]).expect("flags parse");
    assert_eq!(off.overrides.auth_required, Some(false));
}

#[test]
fn hostname_is_the_default_replica_name_and_ranks_below_every_layer() {
    let loaded = load_ok(with_env(&[("HOSTNAME", "baton-7f9c-x2")]));
    assert_eq!(loaded.raw().replica_name, "baton-7f9c-x2");
    assert_eq!(
        loaded.source_of("replica_name"),
        Some(&Layer::Env("HOSTNAME".into()))
    );

    let (_dir, path) = file("replica_name = \"pinned\"\n");
    let loaded = load_ok(Sources {
        config_path: Some(path),
        env: env(&[("HOSTNAME", "baton-7f9c-x2")]),
        ..Sources::default()
    });
    assert_eq!(loaded.raw().replica_name, "pinned");
}

#[test]
fn unknown_key_in_file_is_rejected_naming_key_and_file() {
    let (_dir, path) = file("[http]\nlisten = \"127.0.0.1:1\"\nlisen = \"typo\"\n");
    let err = load_err(Sources {
        config_path: Some(path.clone()),
        ..Sources::default()
    });
    match &err {
        ConfigError::UnknownKey { key, origin, .. } => {
            assert_eq!(key, "http.lisen");
            assert_eq!(origin, &Layer::File(path.clone()));
        }
        other => panic!("unexpected error: {other}"),
    }
    let message = err.to_string();
    assert!(message.contains("http.lisen") && message.contains(&path.display().to_string()));

    let (_dir, path) = file("[htp]\nlisten = \"127.0.0.1:1\"\n");
    let err = load_err(Sources {
        config_path: Some(path),
        ..Sources::default()
    });
    assert!(
        matches!(&err, ConfigError::UnknownKey { key, .. } if key == "htp"),
        "{err}"
    );
}

#[test]
fn unknown_baton_env_var_is_rejected_naming_key_and_variable() {
    let err = load_err(with_env(&[("BATON_HTTP_LISTEN", "127.0.0.1:1")]));
    match &err {
        ConfigError::UnknownKey { key, origin, .. } => {
            assert_eq!(key, "http_listen");
            assert_eq!(origin, &Layer::Env("BATON_HTTP_LISTEN".into()));
        }
        other => panic!("unexpected error: {other}"),
    }
    assert!(err.to_string().contains("env BATON_HTTP_LISTEN"), "{err}");

    let err = load_err(with_env(&[("BATON_DATABASE__PASSWORD", PASSWORD)]));
    assert!(
        matches!(&err, ConfigError::UnknownKey { key, .. } if key == "database.password"),
        "{err}"
    );
    assert!(!err.to_string().contains(PASSWORD));
}

#[test]
fn malformed_env_var_names_are_rejected() {
    for name in [
        "BATON_HTTP____LISTEN",
        "BATON_",
        "BATON_HTTP__",
        "BATON_HTTP.LISTEN",
    ] {
        let err = load_err(with_env(&[(name, "x")]));
        assert!(
            matches!(&err, ConfigError::EnvName { name: n, .. } if n == name),
            "{err}"
        );
    }
    let err = load_err(with_env(&[
        ("BATON_HTTP", "x"),
        ("BATON_HTTP__LISTEN", "127.0.0.1:1"),
    ]));
    assert!(err.to_string().contains("BATON_HTTP also sets"), "{err}");
}

#[test]
fn wrong_types_are_rejected_naming_the_key() {
    let (_dir, path) = file("[http]\nbody_limit_bytes = \"lots\"\n");
    let err = load_err(Sources {
        config_path: Some(path.clone()),
        ..Sources::default()
    });
    match &err {
        ConfigError::InvalidValue { key, origin, .. } => {
            assert_eq!(key, "http.body_limit_bytes");
            assert_eq!(origin, &Layer::File(path));
        }
        other => panic!("unexpected error: {other}"),
    }

    let cases = [
        ("BATON_HTTP__SSE_BUFFER", "many", "http.sse_buffer"),
        ("BATON_HTTP__LISTEN", "localhost", "http.listen"),
        ("BATON_AUTH__REQUIRED", "maybe", "auth.required"),
        ("BATON_TIER", "enterprise", "tier"),
        ("BATON_DATABASE__APP_POOL", "-1", "database.app_pool"),
    ];
    for (var, value, expected_key) in cases {
        let err = load_err(with_env(&[(var, value)]));
        match &err {
            ConfigError::InvalidValue { key, origin, .. } => {
                assert_eq!(key, expected_key);
                assert_eq!(origin, &Layer::Env(var.into()));
            }
            other => panic!("{var}: unexpected error: {other}"),
        }
    }
}

#[test]
fn a_secret_in_the_wrong_place_is_not_echoed_in_errors() {
    let dsn = format!("postgres://baton:{PASSWORD}@db/baton");
    let err = load_err(with_env(&[("BATON_DATABASE", &dsn)]));
    assert!(matches!(err, ConfigError::InvalidValue { .. }), "{err}");
    assert!(!err.to_string().contains(PASSWORD), "{err}");

    let (_dir, path) = file(&format!("[database]\nurl = \"{dsn}\n"));
    let err = load_err(Sources {
        config_path: Some(path),
        ..Sources::default()
    });
    assert!(matches!(err, ConfigError::ParseFile { .. }), "{err}");
    assert!(!err.to_string().contains(PASSWORD), "{err}");
    assert!(err.to_string().contains("at line 2, column"), "{err}");
    assert!(err.to_string().ends_with("; invalid basic string"), "{err}");
}

#[test]
fn missing_config_file_is_an_error_naming_the_path() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("nope.toml");
    let err = load_err(Sources {
        config_path: Some(path.clone()),
        ..Sources::default()
    });
    assert!(matches!(err, ConfigError::ReadFile { .. }), "{err}");
    assert!(err.to_string().contains(&path.display().to_string()));
}

#[test]
fn empty_urls_count_as_unset() {
    let loaded = load_ok(with_env(&[
        ("BATON_DATABASE__URL", ""),
        ("BATON_BUS__NATS_URL", " "),
    ]));
    assert!(loaded.raw().database.url.is_none() && loaded.raw().bus.nats_url.is_none());
    let config = loaded.validate().expect("embedded defaults are valid");
    assert!(matches!(config.bus, Bus::InProcess));
}

#[test]
fn debug_output_never_contains_secrets() {
    let dsn = format!("postgres://baton:{PASSWORD}@db:5432/baton");
    let nats = format!("nats://bus:{PASSWORD}@nats:4222");
    let sources = Sources {
        env: env(&[
            ("BATON_TIER", "team"),
            ("BATON_DATABASE__URL", &dsn),
            ("BATON_AUTH__REQUIRED", "true"),
            ("BATON_CRYPTO__KEYS__K1", KEY),
            ("BATON_CRYPTO__ACTIVE_KEY", "k1"),
        ]),
        cli: CliOverrides {
            nats_url: Some(nats.into()),
            ..CliOverrides::default()
        },
        ..Sources::default()
    };
    assert!(!format!("{sources:?}").contains(PASSWORD));
    assert!(!format!("{sources:?}").contains(KEY));
    let loaded = load_ok(sources);
    assert!(!format!("{loaded:?}").contains(PASSWORD));
    assert!(!format!("{loaded:?}").contains(KEY));
    let config = loaded.validate().expect("complete team config");
    assert!(!format!("{config:?}").contains(PASSWORD));
    assert!(!format!("{config:?}").contains(KEY));
}
