//! The retention job across replicas (issue 17): two real `baton` processes on one
//! Postgres both offer to run it every 200 ms; rounds of three runs each delete a dozen
//! runs past the tenant's policy, each once (one audit entry, no row left in any table),
//! and keep the runs it does not cover.

use crate::support::{DEADLINE, start_cluster, until, uuid};
use serde_json::json;

/// Rounds every 200 ms of at most three runs: a dozen runs take several rounds, which
/// both replicas compete for.
const FAST_RETENTION: [(&str, &str); 2] = [
    ("BATON_RETENTION__INTERVAL_MS", "200"),
    ("BATON_RETENTION__BATCH", "3"),
];

/// The tables that hold rows of a run, with the count of the rows of runs `$1`.
const RUN_TABLES: [(&str, &str); 6] = [
    ("runs", "SELECT COUNT(*) FROM runs WHERE id = ANY($1)"),
    (
        "events",
        "SELECT COUNT(*) FROM events WHERE stream_id = ANY($1)",
    ),
    (
        "messages",
        "SELECT COUNT(*) FROM messages WHERE run_id = ANY($1)",
    ),
    (
        "receipts",
        "SELECT COUNT(*) FROM receipts WHERE run_id = ANY($1)",
    ),
    (
        "checkpoints",
        "SELECT COUNT(*) FROM checkpoints WHERE run_id = ANY($1)",
    ),
    (
        "idempotency",
        "SELECT COUNT(*) FROM idempotency WHERE run_id = ANY($1)",
    ),
];

#[tokio::test]
async fn two_replicas_delete_each_expired_run_once_and_keep_the_rest() {
    let (cluster, apis) = start_cluster(2, &FAST_RETENTION, None).await;
    let agent = apis[0].agent(&[("done", 0, true)]).await;
    let mut old = Vec::new();
    for i in 0..12 {
        let run = apis[i % 2].run(&agent, Some("go")).await;
        old.push(run);
    }
    let recent = apis[1].run(&agent, Some("go")).await;
    for run in old.iter().chain([&recent]) {
        apis[0].wait_status(run, "completed").await;
    }
    let pool = cluster.pool().await.expect("the database");
    let ids: Vec<uuid::Uuid> = old.iter().map(|r| uuid(r)).collect();
    let aged =
        sqlx::query("UPDATE runs SET updated_at = now() - interval '40 days' WHERE id = ANY($1)")
            .bind(&ids)
            .execute(pool)
            .await
            .expect("age the runs");
    assert_eq!(aged.rows_affected(), 12);

    let set = apis[1]
        .send(
            apis[1]
                .req(reqwest::Method::PUT, "/v1/retention")
                .json(&json!({"run_days": 30})),
        )
        .await;
    assert_eq!(set.status, 200, "{}", set.body);
    let progress = until("every old run deleted", DEADLINE * 3, || async {
        let r = apis[0].get("/v1/retention").await;
        (r.body["deleted_runs"] == 12 && r.body["due_runs"] == 0).then_some(r.body)
    })
    .await;
    assert!(progress["last_deleted_at"].is_string(), "{progress}");

    // Each deleted once: one audit entry per run, by the job, and no row left.
    let entries: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT target, actor, COUNT(*) FROM audit_log WHERE action = 'run.deleted' \
         GROUP BY target, actor ORDER BY target",
    )
    .fetch_all(pool)
    .await
    .expect("audit");
    let mut expected: Vec<(String, String, i64)> = old
        .iter()
        .map(|r| (r.clone(), "retention".to_string(), 1))
        .collect();
    expected.sort();
    assert_eq!(entries, expected);
    for (table, sql) in RUN_TABLES {
        let (left,): (i64,) = sqlx::query_as(sql)
            .bind(&ids)
            .fetch_one(pool)
            .await
            .expect("count");
        assert_eq!(left, 0, "rows left in {table}");
    }
    apis[0].wait_status(&recent, "completed").await;
    let (rounds, owner): (i64, Option<String>) =
        sqlx::query_as("SELECT rounds, owner FROM jobs WHERE name = 'retention'")
            .fetch_one(pool)
            .await
            .expect("the job");
    assert!(rounds >= 4, "a dozen runs three at a time: {rounds} rounds");
    println!("retention: 12 runs deleted in {rounds} rounds so far (holder now: {owner:?})");
}
