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

    // A variable meant for another program: named, with how to unset it.
    let out = baton(&["serve"], &[("BATON_BIN", "/usr/bin/true")]);
    let says = text(&out);
    assert!(!out.status.success(), "{says}");
    assert!(says.contains("env BATON_BIN"), "{says}");
    assert!(says.contains("env -u BATON_BIN baton"), "{says}");
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
                (
                    "BATON_BUS__NATS_URL",
                    "nats://baton:s3cret-pass@127.0.0.1:1",
                ),
                crypto_env()[0],
                crypto_env()[1],
            ],
        )
    })
    .await
    .expect("join");
    let says = text(&out);
    assert!(!out.status.success(), "{says}");
    // The URL without its password, and the cause.
    assert!(says.contains("NATS at nats://baton:"), "{says}");
    assert!(says.contains("@127.0.0.1:1"), "{says}");
    assert!(says.contains("onnection refused"), "{says}");
    assert!(!says.contains("s3cret-pass"), "{says}");
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
    serve_logging(dir, args, std::process::Stdio::null())
}

/// [`serve`], its standard error going to `stderr`.
fn serve_logging(
    dir: &std::path::Path,
    args: &[&str],
    stderr: impl Into<std::process::Stdio>,
) -> Served {
    use std::io::BufRead;
    let mut child = Command::new(env!("CARGO_BIN_EXE_baton"))
        .arg("serve")
        .args(args)
        .args(["--listen", "127.0.0.1:0"])
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .stdout(std::process::Stdio::piped())
        .stderr(stderr)
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

/// `baton migrate` needs the database alone (no NATS, auth or keys), lists what it applied
/// by version, and says when nothing was pending.
#[tokio::test]
async fn migrate_needs_only_the_database_and_names_what_it_applied() {
    let db = baton_testkit::TestDatabase::postgres().await.expect("db");
    let url = db.url().to_string();
    let migrate = |url: String| {
        tokio::task::spawn_blocking(move || {
            baton(
                &["migrate", "--tier", "team"],
                &[("BATON_DATABASE__URL", url.as_str())],
            )
        })
    };
    let first = migrate(url.clone()).await.expect("join");
    let says = text(&first);
    assert!(first.status.success(), "{says}");
    assert!(says.contains("applied migration 1 (initial)"), "{says}");
    let applied = says
        .lines()
        .filter(|l| l.starts_with("applied migration "))
        .count();
    let latest = baton_store::migrate::PG_MIGRATOR
        .iter()
        .map(|m| m.version)
        .max()
        .expect("migrations");
    assert_eq!(
        applied,
        baton_store::migrate::PG_MIGRATOR.iter().count(),
        "{says}"
    );
    assert!(
        says.contains(&format!(
            "{applied} migrations applied: the database is at version {latest}"
        )),
        "{says}"
    );
    let again = migrate(url.clone()).await.expect("join");
    let says = text(&again);
    assert!(again.status.success(), "{says}");
    assert!(
        says.contains(&format!(
            "no migrations pending: the database is at version {latest}"
        )),
        "{says}"
    );
    assert!(!says.contains("applied migration"), "{says}");
    db.drop_db().await.expect("drop");

    // Without a database there is nothing to migrate: the refusal names database.url alone.
    let out = baton(&["migrate", "--tier", "team"], &[]);
    let says = text(&out);
    assert!(!out.status.success(), "{says}");
    assert!(says.contains("database.url"), "{says}");
    assert!(!says.contains("nats"), "{says}");
}

#[tokio::test]
async fn serve_without_auth_uses_the_default_tenant_in_the_default_data_dir() {
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

/// The embedded tier's data directory holds conversations and keys in clear: it and every
/// directory inside are 0700, its files 0600; a database an earlier version left readable
/// to others is made private on the next start.
#[tokio::test]
async fn the_embedded_data_directory_is_readable_by_its_user_alone() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("nested/data");
    let data_arg = data.to_string_lossy().into_owned();
    let mode = |p: &std::path::Path| {
        std::fs::metadata(p)
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
            .permissions()
            .mode()
            & 0o777
    };
    let check = |data: &std::path::Path| {
        let mut seen = 0;
        let mut stack = vec![data.to_path_buf()];
        while let Some(d) = stack.pop() {
            assert_eq!(mode(&d), 0o700, "{}", d.display());
            for entry in std::fs::read_dir(&d).expect("read_dir") {
                let path = entry.expect("entry").path();
                if path.is_dir() {
                    stack.push(path);
                } else {
                    assert_eq!(mode(&path), 0o600, "{}", path.display());
                    seen += 1;
                }
            }
        }
        seen
    };
    {
        let served = serve(dir.path(), &["--data-dir", &data_arg]);
        let local = crate::common::Api::new(&served.base, None);
        let agent = local.agent(&[("hi", 0, false)]).await;
        local.run(&agent, None).await;
        for file in ["baton.db", "baton.db-wal", "baton.lock", "keyring"] {
            assert!(data.join(file).exists(), "{file}");
        }
        // The database, its WAL files, the lock and the generated key at least.
        assert!(check(&data) >= 5);
        assert_eq!(mode(&dir.path().join("nested")), 0o700, "created parents");
    }
    std::fs::set_permissions(
        data.join("baton.db"),
        std::fs::Permissions::from_mode(0o644),
    )
    .expect("chmod");
    let served = serve(dir.path(), &["--data-dir", &data_arg]);
    assert_eq!(mode(&data.join("baton.db")), 0o600, "tightened on start");
    check(&data);
    drop(served);
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

/// A database error names the server and database (never the password) and says what
/// Postgres said, without the line of Postgres's own source sqlx appends.
#[test]
fn a_database_error_names_the_server_and_not_postgres_source_lines() {
    let out = baton(
        &["migrate", "--tier", "team"],
        &[(
            "BATON_DATABASE__URL",
            "postgres://postgres:pw-s3cret@127.0.0.1:5432/baton_no_such_database",
        )],
    );
    let says = text(&out);
    assert!(!out.status.success(), "{says}");
    assert!(
        says.contains("Postgres at 127.0.0.1:5432/baton_no_such_database"),
        "{says}"
    );
    assert!(says.contains("does not exist (code 3D000)"), "{says}");
    assert!(!says.contains(" at line "), "{says}");
    assert!(!says.contains("pw-s3cret"), "{says}");
}

/// By default every request is one log line at info (method, route, status, latency,
/// request id, tenant), and a log written to a file has no colour escapes.
#[tokio::test]
async fn each_request_is_one_access_log_line_and_a_log_file_has_no_colour() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("stderr.log");
    let file = std::fs::File::create(&log).expect("log file");
    let served = serve_logging(dir.path(), &[], file);
    let api = crate::common::Api::new(&served.base, None);
    let listed = api
        .send(
            api.req(reqwest::Method::GET, "/v1/runs")
                .header("x-request-id", "req-access-1"),
        )
        .await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    let missing = api
        .send(
            api.req(
                reqwest::Method::GET,
                "/v1/runs/00000000-0000-0000-0000-000000000000",
            )
            .header("x-request-id", "req-access-2"),
        )
        .await;
    assert_eq!(missing.status, 404, "{}", missing.body);
    // The line is written as the response's head goes out: soon after the client has it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let text = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("req-access-2") || std::time::Instant::now() > deadline {
            break text;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    let line = |id: &str| {
        text.lines()
            .find(|l| l.contains(id) && l.contains("baton_api::access"))
            .unwrap_or_else(|| panic!("no access line for {id} in:\n{text}"))
            .to_owned()
    };
    let first = line("req-access-1");
    for part in [
        "http.request.method=GET",
        "http.route=\"/v1/runs\"",
        "tenant_id=",
        "status=200",
        "latency_ms=",
    ] {
        assert!(first.contains(part), "{part} in {first}");
    }
    let second = line("req-access-2");
    assert!(
        second.contains("http.route=\"/v1/runs/{run_id}\""),
        "{second}"
    );
    assert!(second.contains("status=404"), "{second}");
    assert!(!text.contains('\u{1b}'), "no escapes in a file:\n{text}");
    drop(served);
}

/// `baton --version` says when the binary is a debug build, so tools that measure it
/// (`baton-loadtest`) need not guess from its path.
#[test]
fn the_version_names_a_debug_build() {
    let out = baton(&["--version"], &[]);
    let says = text(&out);
    assert!(out.status.success(), "{says}");
    assert!(says.contains(env!("CARGO_PKG_VERSION")), "{says}");
    assert_eq!(
        says.contains("(debug build)"),
        cfg!(debug_assertions),
        "{says}"
    );
}
