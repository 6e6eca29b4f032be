//! Encryption keys over HTTP: `GET /v1/encryption-keys` shows an admin the tenant's secrets and
//! checkpoints per key id, and `POST /v1/encryption-keys/reseal` re-seals them under the active key in
//! the background, within the caller's tenant alone; and in the embedded tier, `baton encryption-keys
//! rotate --new` makes a new generated key active, re-seals, and the server reads
//! everything with it after a restart once the first key is retired.
//!
//! Also the harness the rotation test shares: in-process team-tier apps on one Postgres
//! database whose keyring each test chooses, restarted with another keyring as an operator
//! rolls replicas, and `baton encryption-keys` as a child process with the same configuration.

use crate::common::{Api, assert_problem, store_key};
use baton_core::crypto::Keyring;
use baton_core::model::Tenant;
use baton_core::ports::{Clock, SystemClock};
use baton_core::{Role, TenantId};
use baton_server::app::{self, RunningApp};
use baton_server::config::{Bus, Config, Crypto, Storage, Tier};
use baton_testkit::TestDatabase;
use baton_testkit::replicas::nats_url;
use secrecy::SecretString;
use serde_json::{Value, json};
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

/// Two test keys, public and for test data only: the one records start under and the
/// one they are rotated to.
pub const OLD: (&str, &str) = ("old", "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=");
pub const NEW: (&str, &str) = ("new", "AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=");

/// A team-tier configuration on the database at `db_url` and the shared NATS, with the
/// keyring `keys` sealing new records under `active`, and no request rate limits.
pub fn team_config(dir: &Path, db_url: &str, keys: &[(&str, &str)], active: &str) -> Config {
    let mut config = Config::embedded(dir);
    config.http.key_rate_limit = 0;
    config.http.tenant_rate_limit = 0;
    let pools = config.storage.pools();
    config.tier = Tier::Team;
    config.auth_required = true;
    config.storage = Storage::Postgres {
        url: SecretString::from(db_url.to_string()),
        pools,
        statement_timeout: Duration::from_secs(10),
        acquire_timeout: Duration::from_secs(5),
        migrate_on_start: true,
    };
    config.bus = Bus::nats(SecretString::from(nats_url()));
    config.crypto = Crypto::Keys {
        keys: keys
            .iter()
            .map(|(id, key)| (id.to_string(), SecretString::from(key.to_string())))
            .collect(),
        dir: None,
        active: active.to_string(),
    };
    config
}

/// Starts the app of `config` on a loopback port.
pub async fn start(config: &Config) -> RunningApp {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    app::start(config, listener).await.expect("app starts")
}

pub fn base(app: &RunningApp) -> String {
    format!("http://{}", app.addr)
}

/// A new tenant of `app`'s database; returns its id.
pub async fn tenant(app: &RunningApp) -> TenantId {
    let tenant = Tenant {
        id: TenantId::new(),
        name: format!("t-{}", uuid::Uuid::new_v4()),
        created_at: SystemClock.now(),
    };
    app.stores
        .tenants
        .create_tenant(&tenant)
        .await
        .expect("tenant");
    tenant.id
}

/// A client of `app` holding a new API key of `role` in `tenant`.
pub async fn client(app: &RunningApp, tenant: TenantId, role: Role) -> Api {
    let token = store_key(&app.stores, tenant, role, None, None).await;
    Api::new(&base(app), Some(token))
}

/// Stores the secret `name` with the value `value-of-<name>`.
pub async fn put_secret(api: &Api, name: &str) {
    let r = api
        .send(
            api.req(reqwest::Method::PUT, &format!("/v1/secrets/{name}"))
                .json(&json!({"value": format!("value-of-{name}")})),
        )
        .await;
    assert_eq!(r.status, 200, "put secret: {}", r.body);
}

/// Waits until the run has at least `n` checkpoints.
pub async fn wait_checkpoints(api: &Api, run: &str, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let r = api.get(&format!("/v1/runs/{run}/checkpoints")).await;
        assert_eq!(r.status, 200, "checkpoints: {}", r.body);
        let have = r.body["items"].as_array().map_or(0, Vec::len);
        if have >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "run {run} has {have} checkpoints"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `(key_id, count)` of each table's rows, read from the database directly.
pub async fn key_ids(db_url: &str, table: &str) -> Vec<(String, i64)> {
    let pool = sqlx::PgPool::connect(db_url).await.expect("connect");
    let query = match table {
        "secrets" => "SELECT key_id, COUNT(*) FROM secrets GROUP BY key_id ORDER BY key_id",
        _ => "SELECT key_id, COUNT(*) FROM checkpoints GROUP BY key_id ORDER BY key_id",
    };
    let rows = sqlx::query_as(query).fetch_all(&pool).await.expect("read");
    pool.close().await;
    rows
}

/// A ring of the given keys, for opening rows in the test.
pub fn ring(keys: &[(&str, &str)], active: &str) -> Keyring {
    let keys: Vec<(String, String)> = keys
        .iter()
        .map(|(id, key)| (id.to_string(), key.to_string()))
        .collect();
    Keyring::from_config(&keys, active).expect("ring")
}

/// `baton encryption-keys ARGS` with the configuration of a team replica on `db_url` holding `keys`
/// (active `active`), in `dir`, its environment cleared but for that.
pub fn keys_command(
    dir: &Path,
    db_url: &str,
    keys: &[(&str, &str)],
    active: &str,
    args: &[&str],
) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_baton"));
    cmd.arg("encryption-keys")
        .args(args)
        .args(["--tier", "team", "--auth-required"])
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("BATON_DATABASE__URL", db_url)
        .env("BATON_BUS__NATS_URL", nats_url())
        .env("BATON_CRYPTO__ACTIVE_KEY", active)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    for (id, key) in keys {
        cmd.env(
            format!("BATON_CRYPTO__KEYS__{}", id.to_ascii_uppercase()),
            key,
        );
    }
    cmd
}

/// Runs a command to its end (within 20 s); returns its output.
pub async fn output(mut cmd: tokio::process::Command) -> Output {
    tokio::time::timeout(Duration::from_secs(20), cmd.output())
        .await
        .expect("the command finished within 20 s")
        .expect("the command ran")
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The `keys status` row of `key_id`: `[key_id, active, configured, secrets, checkpoints]`.
pub fn status_row(stdout: &str, key_id: &str) -> Vec<String> {
    stdout
        .lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .find(|cells| cells.first().map(String::as_str) == Some(key_id))
        .unwrap_or_else(|| panic!("no row {key_id:?} in {stdout}"))
}

/// The entry of `key_id` in a `GET /v1/encryption-keys` answer, as `(secrets, checkpoints)`.
fn counts(body: &Value, key_id: &str) -> (u64, u64) {
    let k = body["keys"]
        .as_array()
        .and_then(|keys| keys.iter().find(|k| k["key_id"] == key_id))
        .unwrap_or_else(|| panic!("no key {key_id:?} in {body}"));
    (
        k["secrets"].as_u64().expect("secrets"),
        k["checkpoints"].as_u64().expect("checkpoints"),
    )
}

/// Polls `GET /v1/encryption-keys` until the latest reseal is no longer running; returns the answer.
async fn wait_reseal(api: &Api) -> Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let r = api.get("/v1/encryption-keys").await;
        assert_eq!(r.status, 200, "{}", r.body);
        if r.body["reseal"]["state"] != "running" {
            return r.body;
        }
        assert!(
            Instant::now() < deadline,
            "the reseal never ended: {}",
            r.body
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A tenant with three secrets and a run with one settled turn (one checkpoint).
async fn tenant_with_records(app: &RunningApp, tag: &str) -> (TenantId, Api) {
    let t = tenant(app).await;
    let owner = client(app, t, Role::Owner).await;
    for i in 0..3 {
        put_secret(&owner, &format!("{tag}_{i}")).await;
    }
    let agent = owner.agent(&[("one", 0, false), ("two", 0, false)]).await;
    let run = owner.run(&agent, Some("hi")).await;
    owner.wait_status(&run, "waiting").await;
    wait_checkpoints(&owner, &run, 1).await;
    (t, owner)
}

#[tokio::test]
async fn an_admins_reseal_moves_the_tenants_records_and_no_one_elses() {
    let started = Instant::now();
    let dir = tempfile::tempdir().expect("tempdir");
    let db = TestDatabase::postgres().await.expect("test database");
    let app = start(&team_config(dir.path(), db.url(), &[OLD], "old")).await;
    let (a, _) = tenant_with_records(&app, "alpha").await;
    let (b, b_owner) = tenant_with_records(&app, "beta").await;
    app.shutdown().await.expect("shutdown");

    // Every replica now holds both keys and seals with the new one.
    let app = start(&team_config(dir.path(), db.url(), &[OLD, NEW], "new")).await;
    let admin = client(&app, a, Role::Admin).await;
    let b_owner = Api::new(&base(&app), b_owner.token.clone());
    for role in [Role::Viewer, Role::Member] {
        let api = client(&app, a, role).await;
        let detail = assert_problem(&api.get("/v1/encryption-keys").await, 403, "forbidden");
        assert!(detail.contains("encryption"), "{detail}");
        assert_problem(
            &api.post("/v1/encryption-keys/reseal", json!({})).await,
            403,
            "forbidden",
        );
    }

    let before = admin.get("/v1/encryption-keys").await;
    assert_eq!(before.status, 200, "{}", before.body);
    assert_eq!(before.body["active_key"], "new");
    assert_eq!(before.body["reseal"], Value::Null);
    assert_eq!(
        before.body["keys"],
        json!([
            {"key_id": "new", "active": true, "configured": true, "secrets": 0, "checkpoints": 0},
            {"key_id": "old", "active": false, "configured": true, "secrets": 3, "checkpoints": 1},
        ])
    );

    let bad = admin
        .send(admin.req(reqwest::Method::POST, "/v1/encryption-keys/reseal?batch=0"))
        .await;
    let detail = assert_problem(&bad, 400, "invalid_request");
    assert!(detail.contains("batch"), "{detail}");

    let accepted = admin
        .send(admin.req(reqwest::Method::POST, "/v1/encryption-keys/reseal?batch=1"))
        .await;
    assert_eq!(accepted.status, 202, "{}", accepted.body);
    assert_eq!(accepted.body["status_url"], "/v1/encryption-keys");
    assert_eq!(accepted.body["reseal"]["active_key"], "new");
    let after = wait_reseal(&admin).await;
    let job = &after["reseal"];
    assert_eq!(job["state"], "done", "{after}");
    assert_eq!(
        job["progress"],
        json!({
            "secrets": {"total": 3, "resealed": 3, "changed": 0, "unreadable": 0},
            "checkpoints": {"total": 1, "resealed": 1, "changed": 0, "unreadable": 0},
        })
    );
    assert_eq!(job["unreadable"], json!([]));
    assert_eq!(counts(&after, "new"), (3, 1));
    assert_eq!(counts(&after, "old"), (0, 0));
    let shown = after.to_string();
    assert!(
        !shown.contains(&b.to_string()) && !shown.contains("beta"),
        "{shown}"
    );

    // Tenant B's records are where they were, and B sees no reseal of its own.
    let theirs = b_owner.get("/v1/encryption-keys").await;
    assert_eq!(counts(&theirs.body, "old"), (3, 1), "{}", theirs.body);
    assert_eq!(counts(&theirs.body, "new"), (0, 0));
    assert_eq!(theirs.body["reseal"], Value::Null);
    assert_eq!(
        key_ids(db.url(), "secrets").await,
        [("new".to_string(), 3), ("old".to_string(), 3)]
    );
    assert_eq!(
        key_ids(db.url(), "checkpoints").await,
        [("new".to_string(), 1), ("old".to_string(), 1)]
    );

    // Another reseal of A finds nothing to do.
    let again = admin.post("/v1/encryption-keys/reseal", json!({})).await;
    assert_eq!(again.status, 202, "{}", again.body);
    let done = wait_reseal(&admin).await;
    assert_eq!(done["reseal"]["progress"]["secrets"]["total"], 0, "{done}");

    app.shutdown().await.expect("shutdown");
    db.drop_db().await.expect("drop test database");
    eprintln!("admin reseal test took {:?}", started.elapsed());
}

/// The embedded tier's rotation: no operator and no configured keys, so `rotate --new`
/// makes the new key in the data directory and the server picks it up when it restarts.
#[tokio::test]
async fn the_embedded_tier_rotates_its_generated_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let tools = baton_testkit::ToolServer::start().await;
    let app = start(&Config::embedded(&data)).await;
    let api = Api::new(&base(&app), None);
    put_secret(&api, "hook").await;
    let tool = api
        .post(
            "/v1/tools",
            json!({"name": "lookup", "input_schema": {"type": "object"}, "effect": "read",
                   "kind": {"kind": "http", "url": tools.url("lookup"),
                            "secret_headers": [{"header": "X-Hook", "secret": "hook"}]}}),
        )
        .await;
    assert_eq!(tool.status, 201, "{}", tool.body);
    let agent = api
        .post(
            "/v1/agents",
            json!({"name": "caller", "tools": [tool.body["id"]], "provider": {"kind": "scripted",
                   "replies": [{"content": "hello"},
                               {"tool_calls": [{"name": "lookup", "arguments": {}}]},
                               {"content": "looked"}]}}),
        )
        .await;
    assert_eq!(agent.status, 201, "{}", agent.body);
    let agent = agent.body["id"].as_str().expect("agent id").to_string();
    let run = api.run(&agent, Some("hi")).await;
    api.wait_status(&run, "waiting").await;
    wait_checkpoints(&api, &run, 1).await;
    app.shutdown().await.expect("shutdown");

    let baton = |args: &[&str]| {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_baton"));
        cmd.arg("encryption-keys")
            .args(args)
            .arg("--data-dir")
            .arg(&data)
            .current_dir(dir.path())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .kill_on_drop(true);
        cmd
    };
    let rotated = output(baton(&["rotate", "--new", "--id", "k2"])).await;
    assert!(
        rotated.status.success(),
        "{}{}",
        text(&rotated.stdout),
        text(&rotated.stderr)
    );
    assert!(
        text(&rotated.stdout).contains("re-sealed 1 secret and 1 checkpoint under the key \"k2\""),
        "{}",
        text(&rotated.stdout)
    );
    let retired = output(baton(&["retire", "local"])).await;
    assert!(retired.status.success(), "{}", text(&retired.stderr));
    assert!(!data.join("keyring").join("local").exists());
    let status = output(baton(&["status"])).await;
    let stdout = text(&status.stdout);
    assert_eq!(status_row(&stdout, "k2"), ["k2", "yes", "yes", "1", "1"]);
    assert!(!stdout.contains("local"), "{stdout}");

    // Restarted, the server seals with k2 and reads the re-sealed secret and checkpoint.
    let app = start(&Config::embedded(&data)).await;
    let api = Api::new(&base(&app), None);
    let keys = api.get("/v1/encryption-keys").await;
    assert_eq!(keys.body["active_key"], "k2", "{}", keys.body);
    assert_eq!(counts(&keys.body, "k2"), (1, 1));
    let posted = api.message(&run, "look it up", None).await;
    assert_eq!(posted.status, 201, "{}", posted.body);
    let settled = api
        .wait_run(&run, "settled", |r| {
            r["status"] == "waiting" && r["turn_count"] == 2
        })
        .await;
    assert!(settled.get("last_error").is_none(), "{settled}");
    let received = tools.received("lookup");
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].headers["x-hook"], "value-of-hook");
    app.shutdown().await.expect("shutdown");
}
