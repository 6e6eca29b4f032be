//! What the database pays for runs.
//!
//! - Idle runs cost nothing. One replica holding 1,000 idle runs and 100 runs waiting on a
//!   slow model turn issues a few statements per lease interval (one renewal for all its
//!   leases, one adoption round), not one per run, counted by its own counters.
//! - A run costs its budget of statements: the workload the performance work is measured
//!   on (create a run with a first message, the agent answers at once and completes the
//!   run, the client reads its stream to the end), counted by the server's own counters
//!   (`baton_db_statements_total`, `baton_db_transactions_total`) in both tiers, on a
//!   `baton serve` child each. The budgets are today's counts: a change that adds a
//!   statement to a run fails here, and one that removes some lowers them
//!   (docs/benchmarks.md keeps the history).

use baton_testkit::api::sse;
use baton_testkit::{Api, Cluster, Serve};
use futures::StreamExt;
use std::time::{Duration, Instant};

const BATON: &str = env!("CARGO_BIN_EXE_baton");
const IDLE: usize = 1_000;
const ACTIVE: usize = 100;
const INTERVAL_MS: u64 = 500;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idle_runs_cost_no_sql_and_renewal_is_one_statement_per_interval() {
    let cluster = Cluster::builder(BATON)
        .replicas(1)
        .env("BATON_CLUSTER__RENEW_INTERVAL_MS", INTERVAL_MS.to_string())
        // A lease long enough that a stall of the loaded test machine does not let them
        // lapse (which would make the window count re-adoptions, not the idle cost).
        .env(
            "BATON_CLUSTER__LEASE_TTL_MS",
            (20 * INTERVAL_MS).to_string(),
        )
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

    // Count what the replica sends over a window, by its own counters: exact, and at
    // once. (The database's per-database counter also counts autovacuum's work and
    // publishes other sessions' counts seconds late, which on a loaded machine swamps two
    // transactions an interval.) A scrape costs statements of its own (the gauges
    // `/metrics` reads): measured, and taken off.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let first = db_counts(&api).await;
    let second = db_counts(&api).await;
    let window = Duration::from_secs(8);
    let before = db_counts(&api).await;
    tokio::time::sleep(window).await;
    let after = db_counts(&api).await;
    let intervals = window.as_millis() as f64 / INTERVAL_MS as f64;
    let [statements, reads, writes]: [f64; 3] = std::array::from_fn(|i| {
        ((after[i] - before[i]) - (second[i] - first[i])).max(0.0) / intervals
    });
    eprintln!(
        "{IDLE} idle + {ACTIVE} leased runs, per {INTERVAL_MS} ms interval: \
         {statements:.2} statements, {reads:.2} reads, {writes:.2} writes"
    );
    // One renewal and one adoption round per interval; the schedule and webhook jobs
    // poll now and then.
    assert!(
        statements <= 4.0 && reads + writes <= 4.0,
        "expected about 2 statements and transactions per interval (one renewal, one \
         adoption round), got {statements:.2} statements, {reads:.2} reads and \
         {writes:.2} writes: idle or leased runs are costing SQL"
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

/// Runs measured one after another.
const RUNS: u32 = 10;

/// Background work as rare as the configuration allows, so a window holds the runs alone.
const QUIET: [(&str, &str); 5] = [
    ("BATON_CLUSTER__LEASE_TTL_MS", "1800000"),
    ("BATON_CLUSTER__RENEW_INTERVAL_MS", "600000"),
    ("BATON_CLUSTER__ADOPT_INTERVAL_MS", "600000"),
    ("BATON_SCHEDULES__POLL_INTERVAL_MS", "600000"),
    ("BATON_WEBHOOKS__POLL_INTERVAL_MS", "600000"),
];

/// The sum of the samples of `name` whose labels hold `part`, in Prometheus text `text`.
fn sum_of(text: &str, name: &str, part: &str) -> f64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter(|l| l.contains(part))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Statements, read transactions and write transactions so far.
async fn db_counts(api: &Api) -> [f64; 3] {
    let r = api.get("/metrics").await;
    let text = r.body.as_str().expect("metrics text").to_string();
    [
        sum_of(&text, "baton_db_statements_total", ""),
        sum_of(&text, "baton_db_transactions_total", "access=\"read\""),
        sum_of(&text, "baton_db_transactions_total", "access=\"write\""),
    ]
}

/// Statements, reads and writes per run of the workload, [`RUNS`] runs one after another,
/// less what the same time costs with nothing to do (the scrapes included).
async fn per_run(api: &Api) -> [f64; 3] {
    let agent = api.agent(&[("done", 0, true)]).await;
    // One run first, so whatever is read once per process is read.
    let warm = api.run(&agent, Some("hi")).await;
    api.wait_status(&warm, "completed").await;

    let before = db_counts(api).await;
    let started = Instant::now();
    for _ in 0..RUNS {
        let run = api.run(&agent, Some("hi")).await;
        let mut stream = api.sse(&run, None).await.expect("a stream");
        let frames = sse::read_frames(&mut stream, None, Duration::from_secs(30)).await;
        assert!(
            frames.iter().any(|f| f.event_type == "run.completed"),
            "{frames:?}"
        );
    }
    let took = started.elapsed();
    let after = db_counts(api).await;
    let idle_before = db_counts(api).await;
    tokio::time::sleep(took).await;
    let idle_after = db_counts(api).await;
    std::array::from_fn(|i| {
        ((after[i] - before[i]) - (idle_after[i] - idle_before[i])) / f64::from(RUNS)
    })
}

/// Checks a tier's counts per run against its budget of statements and transactions.
fn within_budget(tier: &str, [statements, reads, writes]: [f64; 3], budget: (f64, f64)) {
    let transactions = reads + writes;
    eprintln!(
        "{tier}: {statements:.1} statements in {reads:.1} reads and {writes:.1} writes per run \
         (budget: {} statements, {} transactions)",
        budget.0, budget.1
    );
    assert!(
        statements > 0.0 && transactions > 0.0,
        "{tier}: nothing counted ({statements}, {transactions})"
    );
    assert!(
        statements <= budget.0 && transactions <= budget.1,
        "{tier}: a run costs {statements:.1} statements and {transactions:.1} transactions, \
         over its budget of {} and {}: see docs/benchmarks.md before raising it",
        budget.0,
        budget.1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_costs_postgres_its_budget_of_statements() {
    let mut builder = Cluster::builder(BATON).replicas(1);
    for (k, v) in QUIET {
        builder = builder.env(k, v);
    }
    let cluster = builder.start().await.expect("cluster");
    let (_, key) = cluster.create_tenant("costed").await.expect("tenant");
    let api = Api::new(cluster.base_url(0), Some(key));
    within_budget("team", per_run(&api).await, (15.0, 9.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_costs_sqlite_its_budget_of_statements() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let data = data.to_str().expect("a UTF-8 path");
    let server = Serve::start(
        std::path::Path::new(BATON),
        dir.path(),
        &["--data-dir", data],
        &QUIET,
    );
    let api = Api::new(&server.base, None);
    within_budget("embedded", per_run(&api).await, (14.0, 7.0));
}
