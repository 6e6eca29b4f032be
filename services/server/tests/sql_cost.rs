//! What idle runs cost: nothing. One replica holding 1,000 idle runs and 100 runs waiting
//! on a slow model turn issues a few transactions per lease interval (one renewal for all
//! its leases, one adoption round), not one per run. Counted from Postgres's own
//! per-database transaction counter, so nothing in Baton is trusted to count itself.

use baton_testkit::{Api, Cluster};
use futures::StreamExt;
use sqlx::Row;
use std::time::Duration;

const BATON: &str = env!("CARGO_BIN_EXE_baton");
const IDLE: usize = 1_000;
const ACTIVE: usize = 100;
const INTERVAL_MS: u64 = 500;

/// Transactions committed or rolled back in the database so far (all connections).
async fn transactions(pool: &sqlx::PgPool) -> i64 {
    sqlx::query(
        "SELECT (xact_commit + xact_rollback)::bigint AS n FROM pg_stat_database \
         WHERE datname = current_database()",
    )
    .fetch_one(pool)
    .await
    .expect("stats")
    .get("n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idle_runs_cost_no_sql_and_renewal_is_one_statement_per_interval() {
    let cluster = Cluster::builder(BATON)
        .replicas(1)
        .env("BATON_CLUSTER__RENEW_INTERVAL_MS", INTERVAL_MS.to_string())
        .env("BATON_CLUSTER__LEASE_TTL_MS", (4 * INTERVAL_MS).to_string())
        .env("BATON_CLUSTER__ADOPT_INTERVAL_MS", INTERVAL_MS.to_string())
        .start()
        .await
        .expect("cluster");
    let (_, key) = cluster.create_tenant("idle").await.expect("tenant");
    let api = Api::new(cluster.base_url(0), Some(key));
    let idle_agent = api.agent(&[("x", 0, false)]).await;
    let slow_agent = api.agent(&[("x", 600_000, false)]).await;
    let idle: Vec<_> = (0..IDLE).map(|_| api.run(&idle_agent, None)).collect();
    futures::stream::iter(idle)
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
    let active: Vec<_> = (0..ACTIVE)
        .map(|_| api.run(&slow_agent, Some("go")))
        .collect();
    futures::stream::iter(active)
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;

    let pool = cluster.pool().await.expect("pool").clone();
    // Every active run is leased and waiting on its (10-minute) model turn.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let leased: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM runs WHERE lease_owner IS NOT NULL AND status = 'running'",
        )
        .fetch_one(&pool)
        .await
        .expect("count");
        if leased == ACTIVE as i64 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {leased} runs leased"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let idle_leased: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM runs WHERE status = 'waiting' AND lease_owner IS NOT NULL",
    )
    .fetch_one(&pool)
    .await
    .expect("count");
    assert_eq!(idle_leased, 0, "idle runs hold no lease");

    // Settle, then count every transaction of the database over a window. Postgres
    // publishes an idle session's counts up to 10 s late (later on a loaded machine):
    // wait until the set-up's are in, and then until a second passes at the steady rate.
    tokio::time::sleep(Duration::from_secs(11)).await;
    let steady = 2 * (1000 / INTERVAL_MS as i64) + 2;
    let settle_until = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut last = transactions(&pool).await;
    while tokio::time::Instant::now() < settle_until {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = transactions(&pool).await;
        let burst = now - last > steady;
        last = now;
        if !burst {
            break;
        }
    }
    let window = Duration::from_secs(8);
    let before = transactions(&pool).await;
    tokio::time::sleep(window).await;
    let after = transactions(&pool).await;
    let intervals = window.as_millis() as f64 / INTERVAL_MS as f64;
    // Our own two reads count too; Postgres publishes other sessions' counts lazily
    // (at most once a second each), so allow a few intervals of slack.
    let per_interval = (after - before) as f64 / intervals;
    eprintln!(
        "{IDLE} idle + {ACTIVE} leased runs: {} transactions in {window:?} = {per_interval:.2} per {INTERVAL_MS} ms interval",
        after - before
    );
    assert!(
        per_interval <= 4.0,
        "expected about 2 transactions per interval (one renewal, one adoption round), \
         got {per_interval:.2}: idle or leased runs are costing SQL"
    );
    // The renewal really covers every lease: they are all still live.
    let live: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM runs WHERE lease_owner IS NOT NULL \
         AND lease_expires_ms > (extract(epoch from now()) * 1000)::bigint",
    )
    .fetch_one(&pool)
    .await
    .expect("count");
    assert_eq!(
        live, ACTIVE as i64,
        "one statement renewed all {ACTIVE} leases"
    );
    cluster.stop().await.expect("stop");
}
