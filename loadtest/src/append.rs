//! `append`: the most durable event appends per second, closed loop (C clients each
//! starting its next append when the last one answered), along three paths measured in
//! one run on the same Postgres server, so each result is a ratio to the raw figure:
//!
//! - `raw`: the append's SQL driven directly with sqlx, as the store sends it;
//! - `store`: `baton_store::PgStore` through the `EventLog::append` port;
//! - `api`: the HTTP API of the replicas (spawned or given by URL).
//!
//! Two single-event transactions are measured: `create` opens a stream with `run.created`
//! (insert the run row and the event; through the API, `POST /v1/runs` without a message)
//! and `message` appends a user `message.appended` to a client's own run (lock the run
//! row, update it, insert the event and the message row). The API has no single-event
//! message command: its `post_message` row posts a message to an idle run (two events in
//! one transaction, then the turn it starts) and has no raw match. Raw runs before and
//! after the others; ratios are to the mean of the two. Raw and store use a fresh
//! database of their own; at the end every stream they wrote must hold exactly the
//! versions `1..n` its client counted, and the API's runs must pass the same checks.

mod api;
mod direct;

use crate::client::Client;
use crate::host;
use crate::open_loop::Outcome;
use crate::report;
use crate::stats::{Hdr, Percentiles, Progress};
use crate::target::{Target, TargetArgs};
use anyhow::Context;
use api::{api_create, api_post};
use baton_testkit::TestDatabase;
use direct::{Db, check_streams, create_tenant, raw, store};
use serde::Serialize;
use serde_json::json;
use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The API's limit on scripted replies.
const MAX_SCRIPT_REPLIES: usize = 1000;

/// Runs each `post_message` client rotates over, so the next post finds a run idle.
const RUNS_PER_POSTER: usize = 8;

/// Posts per second the API is assumed never to exceed, to size the scripted agent.
const MAX_POSTS_PER_SEC: f64 = 2000.0;

/// How long after its last transaction Postgres has published an idle backend's
/// counters (at most once a second).
const STATS_PUBLISHED: Duration = Duration::from_millis(1500);

/// At most this many of the runs written through the API are checked at the end.
const MAX_API_CHECKS: usize = 2000;

#[derive(clap::Args, Debug, Clone, Serialize)]
pub struct AppendArgs {
    /// Concurrent clients; a comma-separated list measures each level.
    #[arg(long, value_delimiter = ',', default_value = "32")]
    pub clients: Vec<usize>,
    /// Seconds per measurement (after a warm-up of a fifth of it, at most 1 s).
    #[arg(long, default_value_t = 10.0)]
    pub secs: f64,
    /// Which transactions to measure.
    #[arg(long, value_delimiter = ',', default_value = "create,message")]
    pub shapes: Vec<String>,
    /// Bound on each API request, in ms.
    #[arg(long, default_value_t = 10_000)]
    pub request_timeout_ms: u64,
    /// Skip counting the database's transactions per append (which waits a moment after
    /// each measurement for Postgres to publish its counters).
    #[arg(long)]
    pub no_db_counters: bool,
    /// A short run for tests: 4 clients, 0.5 s per measurement, no database counters.
    #[arg(long)]
    #[serde(skip)]
    pub smoke: bool,
    #[command(flatten)]
    #[serde(skip)]
    pub target: TargetArgs,
    /// Where the JSON and Markdown reports go.
    #[arg(long, default_value = "target/loadtest")]
    #[serde(skip)]
    pub out: PathBuf,
}

/// One measurement.
#[derive(Debug, Clone, Serialize)]
pub struct Phase {
    /// `raw`, `raw (again)`, `store`, `api` or `api post_message`.
    pub path: String,
    pub shape: String,
    pub clients: usize,
    pub measured_secs: f64,
    /// Appends (transactions) that succeeded in the measured window.
    pub ok: u64,
    pub busy: u64,
    pub errors: BTreeMap<String, u64>,
    pub per_sec: f64,
    /// Events stored per second in the window, where the harness can count them.
    pub events_per_sec: Option<f64>,
    /// Each append's latency (closed loop: from its own start).
    pub latency: Percentiles,
    /// `per_sec` over the mean of the raw figures of the same shape and clients.
    pub ratio_to_raw: Option<f64>,
    /// Where the CPU went in the measured window.
    pub cpu: Option<host::Usage>,
    /// Raw and store: transactions the database committed per successful append, over
    /// the whole measurement (every statement outside a transaction counts as one), from
    /// `pg_stat_database` once the clients' connections closed and published them.
    pub db_xacts_per_append: Option<f64>,
}

/// What a client's appends went through, shared by its tasks.
pub(crate) struct Tally {
    measure_from: Instant,
    until: Instant,
    inner: Mutex<(Hdr, u64, u64, BTreeMap<String, u64>)>,
    /// Replicas whose CPU is read, and the usage over the window once it is over.
    pids: Vec<(String, u32)>,
    cpu: Mutex<Option<host::Usage>>,
    /// Successful appends at any time, warm-up and tail included.
    all_ok: AtomicU64,
    /// The database the appends go to, if its transactions are counted; the reading
    /// taken before the clients started; the count from then to [`Tally::count_db`].
    db_url: Option<String>,
    db_before: tokio::sync::Mutex<Option<(DbCounter, i64)>>,
    db_xacts: Mutex<Option<i64>>,
}

impl Tally {
    pub(crate) fn new(secs: f64, pids: Vec<(String, u32)>, db_url: Option<&str>) -> Arc<Self> {
        let start = Instant::now();
        let warm = (secs / 5.0).min(1.0);
        Arc::new(Tally {
            measure_from: start + Duration::from_secs_f64(warm),
            until: start + Duration::from_secs_f64(warm + secs),
            inner: Mutex::new((Hdr::new(), 0, 0, BTreeMap::new())),
            pids,
            cpu: Mutex::new(None),
            all_ok: AtomicU64::new(0),
            db_url: db_url.map(str::to_string),
            db_before: tokio::sync::Mutex::new(None),
            db_xacts: Mutex::new(None),
        })
    }

    pub(crate) fn running(&self) -> bool {
        Instant::now() < self.until
    }

    /// Records one append that began at `began` and ended now, if it ended in the window.
    pub(crate) fn record(&self, began: Instant, outcome: Outcome) {
        if outcome == Outcome::Ok {
            self.all_ok.fetch_add(1, Ordering::Relaxed);
        }
        let now = Instant::now();
        if now < self.measure_from || now > self.until {
            return;
        }
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        match outcome {
            Outcome::Ok => {
                g.0.record(now - began);
                g.1 += 1;
            }
            Outcome::Busy => g.2 += 1,
            Outcome::Error(kind) => *g.3.entry(kind).or_default() += 1,
        }
    }

    /// Reads the database's transactions since the clients started, once Postgres has
    /// published them: call it when the clients are done, after closing their pool
    /// where there is one (a backend publishes its counters when it exits, or within a
    /// second of going idle).
    async fn count_db(&self) -> anyhow::Result<()> {
        let Some((db, before)) = self.db_before.lock().await.take() else {
            return Ok(());
        };
        tokio::time::sleep(STATS_PUBLISHED).await;
        let after = db.commits().await?;
        // Less the first reading, itself a transaction.
        *self.db_xacts.lock().unwrap_or_else(|e| e.into_inner()) = Some(after - before - 1);
        db.pool.close().await;
        Ok(())
    }

    pub(crate) fn phase(&self, path: &str, shape: &str, clients: usize) -> Phase {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let secs = (self.until - self.measure_from).as_secs_f64();
        Phase {
            path: path.to_string(),
            shape: shape.to_string(),
            clients,
            measured_secs: secs,
            ok: g.1,
            busy: g.2,
            errors: g.3.clone(),
            per_sec: g.1 as f64 / secs,
            events_per_sec: None,
            latency: g.0.percentiles(),
            ratio_to_raw: None,
            cpu: self.cpu.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            db_xacts_per_append: {
                let all = self.all_ok.load(Ordering::Relaxed);
                let xacts = *self.db_xacts.lock().unwrap_or_else(|e| e.into_inner());
                xacts.filter(|_| all > 0).map(|x| x as f64 / all as f64)
            },
        }
    }
}

/// Reads how many transactions a database committed (`pg_stat_database.xact_commit`).
struct DbCounter {
    pool: sqlx::PgPool,
}

impl DbCounter {
    async fn open(url: &str) -> anyhow::Result<Self> {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .connect(url)
            .await
            .context("connecting to read the database's counters")?;
        Ok(DbCounter { pool })
    }

    /// Committed transactions so far, as published (up to a second late); each reading
    /// is a transaction itself.
    async fn commits(&self) -> anyhow::Result<i64> {
        let n: i64 = sqlx::query_scalar(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()",
        )
        .fetch_one(&self.pool)
        .await
        .context("reading pg_stat_database")?;
        Ok(n)
    }
}

/// Runs `clients` copies of `client` (given its index and the tally) until the tally's
/// window ends, printing progress (the count of `unit`s done) and reading where the CPU went in the window (while
/// every connection is still open: a database backend that exits takes its CPU time
/// with it); returns each client's result.
pub(crate) async fn closed_loop<F, Fut, T>(
    label: &str,
    unit: &str,
    clients: usize,
    tally: &Arc<Tally>,
    p: Progress,
    client: F,
) -> anyhow::Result<Vec<T>>
where
    F: Fn(usize, Arc<Tally>) -> Fut,
    Fut: Future<Output = anyhow::Result<T>> + Send + 'static,
    T: Send + 'static,
{
    if let Some(url) = &tally.db_url {
        let db = DbCounter::open(url).await?;
        let before = db.commits().await?;
        *tally.db_before.lock().await = Some((db, before));
    }
    let tasks: Vec<_> = (0..clients)
        .map(|i| tokio::spawn(client(i, tally.clone())))
        .collect();
    tokio::time::sleep_until(tally.measure_from.into()).await;
    let cpu = host::snapshot_of(&tally.pids);
    while tally.running() {
        let left = tally.until.saturating_duration_since(Instant::now());
        tokio::time::sleep(Duration::from_secs(1).min(left)).await;
        let done = tally.inner.lock().unwrap_or_else(|e| e.into_inner()).1;
        p.say(format!("{label}: {done} {unit} in the window so far"));
    }
    *tally.cpu.lock().unwrap_or_else(|e| e.into_inner()) = Some(host::since(cpu, &tally.pids));
    let mut out = Vec::with_capacity(clients);
    for t in tasks {
        out.push(t.await.context("a client panicked")??);
    }
    Ok(out)
}

/// Runs the scenario; returns the number of invariant failures.
pub async fn run(mut args: AppendArgs) -> anyhow::Result<usize> {
    if args.smoke {
        (args.clients, args.secs, args.no_db_counters) = (vec![4], 0.5, true);
    }
    anyhow::ensure!(
        args.clients.iter().all(|c| *c > 0),
        "--clients must be positive"
    );
    anyhow::ensure!(args.secs > 0.0, "--secs must be positive");
    for s in &args.shapes {
        anyhow::ensure!(s == "create" || s == "message", "unknown shape {s:?}");
    }
    let p = Progress::new();
    let target = Target::start(&args.target).await?;
    let mut json = report::header("append", &target.about)?;
    let db = TestDatabase::postgres().await?;
    baton_store::migrate::postgres(db.url())
        .await
        .context("migrating the raw/store database")?;
    let counters = !args.no_db_counters;
    let db = Db {
        tenant: create_tenant(db.url()).await?,
        db,
        counters,
    };
    let client = Client::new(&target.key, Duration::from_millis(args.request_timeout_ms))?;
    // Enough instant replies for every post a poster's run can take in one measurement,
    // with the API taking far more posts per second than it can on this kind of machine.
    let fewest = args.clients.iter().copied().min().unwrap_or(1);
    let runs = (fewest * RUNS_PER_POSTER) as f64;
    let turns = ((args.secs + 1.0) * MAX_POSTS_PER_SEC / runs).ceil() as usize + 8;
    let agent = client
        .scripted_agent(
            target.url(0),
            "loadtest append",
            &vec![0; turns.min(MAX_SCRIPT_REPLIES)],
        )
        .await?;
    let mut phases = Vec::new();
    let mut failures = Vec::new();
    let mut api_runs = Vec::new();
    for &clients in &args.clients {
        for shape in &args.shapes {
            let mut measured = Vec::new();
            for path in ["raw", "store", "api", "raw (again)"] {
                if path == "api" && shape == "message" {
                    let (phase, runs) =
                        api_post(&target, &client, &agent, clients, args.secs, p).await?;
                    api_runs.extend(runs);
                    measured.push(phase);
                    continue;
                }
                let label = format!("append {shape} via {path}, {clients} clients");
                p.say(format!("{label}: measuring {} s", args.secs));
                let (phase, checks) = match path {
                    "api" => {
                        let (ph, runs) =
                            api_create(&target, &client, &agent, clients, args.secs, p).await?;
                        api_runs.extend(runs);
                        (ph, Vec::new())
                    }
                    "store" => store(&db, shape, clients, args.secs, &label, p).await?,
                    _ => raw(&db, shape, clients, args.secs, &label, p).await?,
                };
                let mut phase = phase;
                phase.path = path.to_string();
                failures.extend(check_streams(&db, &checks).await?);
                p.say(format!("{label}: {:.0}/s", phase.per_sec));
                measured.push(phase);
            }
            let raws: Vec<f64> = measured
                .iter()
                .filter(|m| m.path.starts_with("raw"))
                .map(|m| m.per_sec)
                .collect();
            let raw_mean = raws.iter().sum::<f64>() / raws.len().max(1) as f64;
            for m in &mut measured {
                if m.path != "api post_message" && raw_mean > 0.0 {
                    m.ratio_to_raw = Some(m.per_sec / raw_mean);
                }
            }
            phases.extend(measured);
        }
    }
    // Every run, or an evenly spread sample of them when there are many.
    let step = api_runs.len().div_ceil(MAX_API_CHECKS).max(1);
    let sample: Vec<uuid::Uuid> = api_runs.iter().step_by(step).copied().collect();
    p.say(format!(
        "checking {} of the {} runs written through the API",
        sample.len(),
        api_runs.len()
    ));
    for run in &sample {
        if let Err(e) = target.check_run(&client, *run).await {
            failures.push(format!("{e:#}"));
        }
    }
    db.db.drop_db().await?;
    let about = target.about.clone();
    target.stop().await?;

    json["args"] = serde_json::to_value(&args)?;
    json["phases"] = serde_json::to_value(&phases)?;
    json["api_runs"] = json!(api_runs.len());
    json["api_runs_checked"] = json!(sample.len());
    json["failures"] = serde_json::to_value(&failures)?;
    let md = markdown(&json, &phases, &failures, &about);
    report::write(&args.out, "append", &json, &md)?;
    println!("{md}");
    Ok(failures.len())
}

fn markdown(
    json: &serde_json::Value,
    phases: &[Phase],
    failures: &[String],
    about: &crate::target::About,
) -> String {
    let mut md = format!(
        "# baton-loadtest append\n\nClosed loop, durable single-event appends; {} replicas \
         ({}); started {}\n\n\
         | shape | path | clients | appends/s | ratio to raw | events/s | db xacts/append | \
         p50 ms | p99 ms | max ms | errors |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        about.replicas,
        about.profile.unwrap_or("given by URL"),
        json["started_at"].as_str().unwrap_or_default(),
    );
    for ph in phases {
        let errors: u64 = ph.errors.values().sum();
        md.push_str(&format!(
            "| {} | {} | {} | {:.0} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {errors} |\n",
            ph.shape,
            ph.path,
            ph.clients,
            ph.per_sec,
            ph.ratio_to_raw
                .map_or("-".to_string(), |r| format!("{:.0}%", r * 100.0)),
            ph.events_per_sec
                .map_or("-".to_string(), |e| format!("{e:.0}")),
            ph.db_xacts_per_append
                .map_or("-".to_string(), |x| format!("{x:.1}")),
            ph.latency.p50_ms,
            ph.latency.p99_ms,
            ph.latency.max_ms,
        ));
    }
    md.push_str(&host::md_list(phases.iter().map(|ph| {
        (
            format!("{} via {}, {} clients", ph.shape, ph.path, ph.clients),
            ph.cpu.as_ref(),
        )
    })));
    md.push_str(&format!(
        "\nInvariants: {} of the {} runs written through the API checked, and every raw and \
         store stream; {} failures.\n",
        json["api_runs_checked"],
        json["api_runs"],
        failures.len()
    ));
    for f in failures.iter().take(20) {
        md.push_str(&format!("- FAILURE: {f}\n"));
    }
    md
}
