//! The `baton` binary as a child process: start-up refusals and `config explain`.

use baton_testkit::replicas::{TEST_KEY, crypto_env};
use std::process::{Command, Output};

/// Runs `baton ARGS` in an empty temp dir with only `env` set (no inherited BATON_*).
fn baton(args: &[&str], env: &[(&str, &str)]) -> Output {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_baton"));
    cmd.args(args)
        .current_dir(dir.path())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("baton runs");
    drop(dir);
    out
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn team_tier_without_dsn_nats_or_auth_refuses_to_start_naming_each() {
    let out = baton(&["serve", "--tier", "team"], &[]);
    assert!(!out.status.success());
    let says = text(&out);
    for missing in [
        "database.url",
        "bus.nats_url",
        "auth.required",
        "crypto.keys",
        "crypto.active_key",
    ] {
        assert!(says.contains(missing), "should name {missing}: {says}");
    }
    // With only the DSN given, the other two are still named; no fallback to SQLite.
    let out = baton(
        &["serve"],
        &[
            ("BATON_TIER", "team"),
            (
                "BATON_DATABASE__URL",
                "postgres://postgres@127.0.0.1:1/none",
            ),
        ],
    );
    assert!(!out.status.success());
    let says = text(&out);
    assert!(
        says.contains("bus.nats_url") && says.contains("auth.required"),
        "{says}"
    );
    assert!(!says.contains("listening"), "{says}");
}

#[test]
fn a_non_loopback_listener_without_auth_refuses_to_start_in_every_tier() {
    let out = baton(&["serve", "--listen", "0.0.0.0:0"], &[]);
    assert!(!out.status.success(), "embedded must refuse");
    let says = text(&out);
    assert!(says.contains("0.0.0.0:0"), "names the address: {says}");
    assert!(!says.contains("listening on"), "{says}");
    // The team tier refuses too: it requires auth on any address.
    let out = baton(
        &["serve", "--tier", "team", "--listen", "0.0.0.0:0"],
        &[
            (
                "BATON_DATABASE__URL",
                "postgres://postgres@127.0.0.1:1/none",
            ),
            ("BATON_BUS__NATS_URL", "nats://127.0.0.1:1"),
        ],
    );
    assert!(!out.status.success(), "team must refuse");
    let says = text(&out);
    assert!(says.contains("auth.required"), "{says}");
    assert!(!says.contains("listening on"), "{says}");
}

#[test]
fn config_explain_redacts_the_dsn_password_and_names_each_layer() {
    let out = baton(
        &["config", "explain", "--tier", "team", "--auth-required"],
        &[
            (
                "BATON_DATABASE__URL",
                "postgres://baton:hunter2-secret@db.internal:5432/baton",
            ),
            (
                "BATON_BUS__NATS_URL",
                "nats://bus:natspw-secret@nats.internal:4222",
            ),
            ("BATON_CRYPTO__KEYS__K1", TEST_KEY),
            ("BATON_CRYPTO__ACTIVE_KEY", "k1"),
        ],
    );
    let says = text(&out);
    assert!(out.status.success(), "{says}");
    assert!(!says.contains(TEST_KEY), "encryption key leaked: {says}");
    assert!(says.contains("k1=***"), "{says}");
    assert!(
        !says.contains("hunter2-secret"),
        "DSN password leaked: {says}"
    );
    assert!(
        !says.contains("natspw-secret"),
        "NATS password leaked: {says}"
    );
    assert!(
        says.contains("postgres://baton:***@db.internal:5432/baton"),
        "{says}"
    );
    let line = |key: &str| {
        says.lines()
            .find(|l| l.starts_with(&format!("{key} ")))
            .unwrap_or_default()
            .to_string()
    };
    assert!(
        line("database.url").contains("env BATON_DATABASE__URL"),
        "{says}"
    );
    assert!(line("tier").contains("cli --tier"), "{says}");
    assert!(line("http.listen").contains("default"), "{says}");
}

#[test]
fn unknown_configuration_keys_are_refused_naming_the_key() {
    let out = baton(
        &["config", "explain"],
        &[("BATON_HTTP__LISTN", "127.0.0.1:1")],
    );
    assert!(!out.status.success());
    assert!(text(&out).contains("listn"), "{}", text(&out));
}

#[tokio::test]
async fn team_tier_with_nats_unreachable_exits_naming_nats_instead_of_hanging() {
    let db = baton_testkit::TestDatabase::postgres().await.expect("db");
    let url = db.url().to_string();
    let out = tokio::task::spawn_blocking(move || {
        baton(
            &[
                "serve",
                "--tier",
                "team",
                "--auth-required",
                "--listen",
                "127.0.0.1:0",
            ],
            &[
                ("BATON_DATABASE__URL", url.as_str()),
                ("BATON_BUS__NATS_URL", "nats://127.0.0.1:1"),
                crypto_env()[0],
                crypto_env()[1],
            ],
        )
    })
    .await
    .expect("join");
    assert!(!out.status.success());
    assert!(text(&out).contains("NATS"), "{}", text(&out));
    db.drop_db().await.expect("drop");
}

/// A `baton serve` child process; killed on drop.
struct Served {
    child: std::process::Child,
    base: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `baton serve ARGS` on a free loopback port in `dir` and waits until it listens.
fn serve(dir: &std::path::Path, args: &[&str]) -> Served {
    use std::io::BufRead;
    let mut child = Command::new(env!("CARGO_BIN_EXE_baton"))
        .arg("serve")
        .args(args)
        .args(["--listen", "127.0.0.1:0"])
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn baton serve");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = std::io::BufReader::new(stdout).lines();
    let base = lines
        .find_map(|l| {
            l.ok()?
                .strip_prefix("baton listening on ")
                .map(str::to_owned)
        })
        .expect("baton prints its address");
    Served { child, base }
}

#[tokio::test]
async fn admin_create_tenant_prints_an_owner_key_that_the_server_accepts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().to_string_lossy().into_owned();
    let out = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["admin", "create-tenant", "acme", "--data-dir", &data])
        .current_dir(dir.path())
        .env_clear()
        .output()
        .expect("runs");
    let says = text(&out);
    assert!(out.status.success(), "{says}");
    let field = |name: &str| {
        says.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().to_string())
            .unwrap_or_else(|| panic!("no {name} in {says}"))
    };
    let key = field("api_key:");
    assert!(baton_core::crypto::tokens::is_well_formed(&key), "{key}");
    field("tenant_id:");
    let again = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["admin", "create-tenant", "acme", "--data-dir", &data])
        .current_dir(dir.path())
        .env_clear()
        .output()
        .expect("runs");
    assert!(
        !again.status.success(),
        "a second tenant of the same name is refused"
    );

    let served = serve(dir.path(), &["--data-dir", &data, "--auth-required"]);
    let with_key = crate::common::Api::new(&served.base, Some(key));
    assert_eq!(with_key.get("/v1/runs").await.status, 200);
    let without = crate::common::Api::new(&served.base, None);
    crate::common::assert_problem(&without.get("/v1/runs").await, 401, "unauthorized");
}

#[tokio::test]
async fn migrate_applies_the_schema_once_and_serve_without_auth_uses_the_default_tenant() {
    let db = baton_testkit::TestDatabase::postgres().await.expect("db");
    let url = db.url().to_string();
    let migrate = |url: String| {
        tokio::task::spawn_blocking(move || {
            baton(
                &["migrate", "--tier", "team", "--auth-required"],
                &[
                    ("BATON_DATABASE__URL", url.as_str()),
                    ("BATON_BUS__NATS_URL", "nats://127.0.0.1:4222"),
                    crypto_env()[0],
                    crypto_env()[1],
                ],
            )
        })
    };
    for _ in 0..2 {
        let out = migrate(url.clone()).await.expect("join");
        assert!(out.status.success(), "{}", text(&out));
        assert!(text(&out).contains("migrations applied"));
    }
    db.drop_db().await.expect("drop");

    let dir = tempfile::tempdir().expect("tempdir");
    let served = serve(dir.path(), &[]);
    let local = crate::common::Api::new(&served.base, None);
    let agent = local.agent(&[("hi", 0, false)]).await;
    local.run(&agent, None).await;
    assert!(
        dir.path().join("baton-data/baton.db").exists(),
        "default data dir"
    );
}

/// `serve` with `database.migrate_on_start = false` checks the schema instead of
/// migrating: against a database lacking this binary's migrations it exits naming them and
/// `baton migrate`. (Run with a deadline: a regression would serve forever.)
#[tokio::test]
async fn serve_without_migrate_on_start_refuses_an_unmigrated_database_naming_baton_migrate() {
    let db = baton_testkit::TestDatabase::postgres().await.expect("db");
    let url = db.url().to_string();
    let (exited, says) = tokio::task::spawn_blocking(move || {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("out.log");
        let file = std::fs::File::create(&log).expect("log file");
        let mut child = Command::new(env!("CARGO_BIN_EXE_baton"))
            .args(["serve", "--tier", "team", "--auth-required"])
            .args(["--listen", "127.0.0.1:0"])
            .current_dir(dir.path())
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("BATON_DATABASE__URL", &url)
            .env("BATON_DATABASE__MIGRATE_ON_START", "false")
            .env("BATON_BUS__NATS_URL", "nats://127.0.0.1:4222")
            .envs(crypto_env())
            .stdout(file.try_clone().expect("log file"))
            .stderr(file)
            .spawn()
            .expect("spawn baton serve");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait") {
                break Some(status);
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        let says = std::fs::read_to_string(&log).expect("read log");
        (status, says)
    })
    .await
    .expect("join");
    let status = exited.unwrap_or_else(|| panic!("still serving after 30 s: {says}"));
    assert!(!status.success(), "{says}");
    let pending = baton_store::PG_MIGRATOR
        .iter()
        .filter(|m| !m.migration_type.is_down_migration())
        .map(|m| m.version.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    assert!(
        says.contains(&format!("lacks migrations this binary needs: {pending}"))
            && says.contains("baton migrate"),
        "{says}"
    );
    assert!(!says.contains("listening"), "{says}");
    db.drop_db().await.expect("drop");
}
