//! Key rotation end to end, as an operator does it, with the crash the runbook promises
//! survives: a tenant's secrets and runs (with a checkpoint after every settled turn) are
//! sealed under `old`; the replica is rolled with `old` and `new`, `new` active; `baton
//! keys rotate --batch 1` is SIGKILLed after its first progress line (so some records are
//! under `new` and some are not, none half written) and run again to the end; then `baton
//! keys retire old` (refused before, naming what used it) succeeds, and a replica holding
//! `new` alone reads every secret (a tool call sends them all) and restores every run
//! from its checkpoint, while every row opens with `new` alone.

use crate::encryption_keys::{
    NEW, OLD, base, client, key_ids, keys_command, output, put_secret, ring, start, status_row,
    team_config, tenant, text, wait_checkpoints,
};
use baton_core::Role;
use baton_core::crypto::{Aad, key_id_of};
use baton_events::{CheckpointId, RunId, TenantId};
use baton_testkit::{Api, TestDatabase, ToolServer};
use serde_json::json;
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, BufReader};

const SECRETS: [&str; 4] = ["model_key", "hook_a", "hook_b", "hook_c"];
const RUNS: usize = 3;

/// The value of a counter in the Prometheus text of `/metrics` (0 when not recorded yet).
async fn counter(api: &Api, name: &str) -> u64 {
    let r = api.get("/metrics").await;
    let Some(text) = r.body.as_str() else {
        panic!("metrics: {}", r.body)
    };
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0)
}

/// Every sealed row of the database: `(aad, key id column, ciphertext)`.
async fn sealed_rows(db_url: &str) -> Vec<(Aad, String, Vec<u8>)> {
    let pool = sqlx::PgPool::connect(db_url).await.expect("connect");
    let secrets: Vec<(uuid::Uuid, String, String, Vec<u8>)> =
        sqlx::query_as("SELECT tenant_id, name, key_id, ciphertext FROM secrets")
            .fetch_all(&pool)
            .await
            .expect("secrets");
    let checkpoints: Vec<(uuid::Uuid, uuid::Uuid, uuid::Uuid, String, Vec<u8>)> =
        sqlx::query_as("SELECT tenant_id, run_id, id, key_id, ciphertext FROM checkpoints")
            .fetch_all(&pool)
            .await
            .expect("checkpoints");
    pool.close().await;
    let mut rows: Vec<(Aad, String, Vec<u8>)> = secrets
        .into_iter()
        .map(|(t, name, k, c)| (Aad::secret(TenantId::from(t), &name), k, c))
        .collect();
    rows.extend(checkpoints.into_iter().map(|(t, run, id, k, c)| {
        let aad = Aad::checkpoint(TenantId::from(t), RunId::from(run), CheckpointId::from(id));
        (aad, k, c)
    }));
    rows
}

/// Every row's key id column names the key its envelope names: no write was torn.
fn assert_whole(rows: &[(Aad, String, Vec<u8>)]) {
    for (_, key_id, ciphertext) in rows {
        assert_eq!(
            key_id_of(ciphertext).expect("an envelope"),
            key_id,
            "the row's key id and its envelope agree"
        );
    }
}

#[tokio::test]
async fn a_rotation_killed_midway_resumes_and_the_old_key_is_then_retired() {
    let started = Instant::now();
    let dir = tempfile::tempdir().expect("tempdir");
    let db = TestDatabase::postgres().await.expect("test database");
    let url = db.url().to_string();
    let tools = ToolServer::start().await;

    // Before: everything sealed under `old`.
    let app = start(&team_config(dir.path(), &url, &[OLD], "old")).await;
    let t = tenant(&app).await;
    let owner = client(&app, t, Role::Owner).await;
    for name in SECRETS {
        put_secret(&owner, name).await;
    }
    let headers: Vec<_> = SECRETS
        .iter()
        .map(|s| json!({"header": format!("X-{s}"), "secret": s}))
        .collect();
    let tool = owner
        .post(
            "/v1/tools",
            json!({"name": "check", "input_schema": {"type": "object"}, "effect": "read",
                   "kind": {"kind": "http", "url": tools.url("check"),
                            "secret_headers": headers}}),
        )
        .await;
    assert_eq!(tool.status, 201, "{}", tool.body);
    // Two turns of chat per run (a checkpoint after each); a third call checks the secrets.
    let agent = owner
        .post(
            "/v1/agents",
            json!({"name": "rotating", "tools": [tool.body["id"]],
                   "provider": {"kind": "scripted", "replies": [
                       {"content": "one"}, {"content": "two"},
                       {"tool_calls": [{"name": "check", "arguments": {}}]},
                       {"content": "checked"}]}}),
        )
        .await;
    assert_eq!(agent.status, 201, "{}", agent.body);
    let agent = agent.body["id"].as_str().expect("agent id").to_string();
    let mut runs = Vec::new();
    for _ in 0..RUNS {
        runs.push(owner.run(&agent, Some("hi")).await);
    }
    for run in &runs {
        owner.wait_status(run, "waiting").await;
        // A message that got in before the turn's checkpoint would skip it (a checkpoint
        // is saved only of the version its turn settled at): wait for it first.
        wait_checkpoints(&owner, run, 1).await;
        owner.message_when_idle(run, "again").await;
    }
    for run in &runs {
        owner
            .wait_run(run, "two turns", |r| {
                r["status"] == "waiting" && r["turn_count"] == 2
            })
            .await;
        wait_checkpoints(&owner, run, 2).await;
    }
    let checkpoints = 2 * RUNS as u64;
    let total = SECRETS.len() as u64 + checkpoints;
    app.shutdown().await.expect("shutdown");

    // The operator rolls the replica with both keys, `new` active.
    let both = [OLD, NEW];
    let app = start(&team_config(dir.path(), &url, &both, "new")).await;
    let keys = |args: &[&str]| keys_command(dir.path(), &url, &both, "new", args);

    let status = output(keys(&["status"])).await;
    assert!(status.status.success(), "{}", text(&status.stderr));
    let stdout = text(&status.stdout);
    assert_eq!(status_row(&stdout, "old"), ["old", "no", "yes", "4", "6"]);
    assert_eq!(status_row(&stdout, "new"), ["new", "yes", "yes", "0", "0"]);
    let refused = output(keys(&["retire", "old"])).await;
    assert!(!refused.status.success());
    let said = text(&refused.stderr);
    assert!(
        said.contains("key \"old\" still seals 4 secrets and 6 checkpoints"),
        "{said}"
    );
    let active = output(keys(&["retire", "new"])).await;
    assert!(!active.status.success());
    assert!(text(&active.stderr).contains("is the active key"));

    // Crash the rotation after its first batch.
    let mut cmd = keys(&["rotate", "--batch", "1", "--pause-ms", "300"]);
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn baton encryption-keys rotate");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let mut said = Vec::new();
    let first = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(line) = lines.next_line().await.expect("read stderr") {
            said.push(line.clone());
            if line.starts_with("secrets ") {
                return line;
            }
        }
        panic!("no progress line: {said:?}");
    })
    .await
    .expect("a progress line within 20 s");
    child.start_kill().expect("SIGKILL");
    let killed = child.wait().await.expect("wait");
    assert_eq!(killed.signal(), Some(9), "killed, not finished: {killed:?}");
    assert_eq!(first, "secrets 1/4, checkpoints 0/6");
    let rows = sealed_rows(&url).await;
    assert_whole(&rows);
    let moved = rows.iter().filter(|(_, k, _)| k == "new").count() as u64;
    assert!(
        moved >= 1 && moved < total,
        "midway: {moved} of {total} records under the new key"
    );
    eprintln!("killed after {first:?}: {moved} of {total} records under the new key");

    // Run again: it continues with what is left.
    let resumed = output(keys(&["rotate", "--batch", "1"])).await;
    let (out, err) = (text(&resumed.stdout), text(&resumed.stderr));
    assert!(resumed.status.success(), "{out}{err}");
    // Secrets go first: what the killed run did was secrets.
    let (secrets_left, checkpoints_left) = (
        SECRETS.len() as u64 - moved.min(4),
        checkpoints - moved.saturating_sub(4),
    );
    assert!(
        out.contains(&format!(
            "re-sealed {secrets_left} secrets and {checkpoints_left} checkpoints"
        )),
        "{out}"
    );
    assert!(
        out.contains("every secret and checkpoint is sealed under \"new\""),
        "{out}"
    );
    assert!(
        err.lines().last()
            == Some(&*format!(
                "secrets {secrets_left}/{secrets_left}, checkpoints {checkpoints_left}/{checkpoints_left}"
            )),
        "{err}"
    );
    assert!(
        SECRETS
            .iter()
            .all(|s| !out.contains(&format!("value-of-{s}"))
                && !err.contains(&format!("value-of-{s}"))),
        "no value is printed"
    );
    assert_eq!(key_ids(&url, "secrets").await, [("new".to_string(), 4)]);
    assert_eq!(key_ids(&url, "checkpoints").await, [("new".to_string(), 6)]);

    let retired = output(keys(&["retire", "old"])).await;
    assert!(
        retired.status.success(),
        "{}{}",
        text(&retired.stdout),
        text(&retired.stderr)
    );
    assert!(
        text(&retired.stdout).contains("nothing is sealed under key \"old\""),
        "{}",
        text(&retired.stdout)
    );
    app.shutdown().await.expect("shutdown");

    // A replica with the new key alone.
    let rows = sealed_rows(&url).await;
    assert_eq!(rows.len() as u64, total);
    assert_whole(&rows);
    let new_only = ring(&[NEW], "new");
    for (aad, _, ciphertext) in &rows {
        new_only
            .open(aad, ciphertext)
            .expect("opens with the new key");
    }
    let app = start(&team_config(dir.path(), &url, &[NEW], "new")).await;
    let owner = Api::new(&base(&app), owner.token.clone());
    let (restored, skipped) = (
        counter(&owner, "baton_checkpoints_restored_total").await,
        counter(&owner, "baton_checkpoints_skipped_total").await,
    );
    for run in &runs {
        owner.message_when_idle(run, "check").await;
    }
    for run in &runs {
        let done = owner
            .wait_run(run, "three turns", |r| {
                r["status"] == "waiting" && r["turn_count"] == 3
            })
            .await;
        assert!(done.get("last_error").is_none(), "{done}");
    }
    // Each run's driver started from its newest checkpoint, which opened.
    assert_eq!(
        counter(&owner, "baton_checkpoints_restored_total").await - restored,
        RUNS as u64
    );
    assert_eq!(
        counter(&owner, "baton_checkpoints_skipped_total").await,
        skipped
    );
    // Every secret reached the tool, decrypted with the new key.
    let received = tools.received("check");
    assert_eq!(received.len(), RUNS);
    for r in &received {
        for s in SECRETS {
            assert_eq!(
                r.headers[format!("x-{s}").as_str()],
                format!("value-of-{s}")
            );
        }
    }
    app.shutdown().await.expect("shutdown");
    db.drop_db().await.expect("drop test database");
    let took = started.elapsed();
    eprintln!("rotation test took {took:?}");
    assert!(took < Duration::from_secs(30), "took {took:?}");
}
