//! `steady`: R reads/s and W writes/s for D seconds on the open-loop timetable
//! ([`crate::open_loop`]), spread round-robin over the replicas. Reads cycle through
//! get run, list messages and the first events page of a pool of runs; writes post a
//! message to the next pool run (round-robin, so a run is revisited only after
//! `pool / posts per second` seconds, long after its scripted turn ended) or, for a share
//! of them, create a run with a first message. The agent is `scripted` with instant
//! replies. At the end every run must settle and pass the invariants: stored versions
//! exactly `1..n`, the projection at `n`, no failed turn, and exactly one stored user
//! message per accepted post (plus the first). The pieces are public for `burst`.

use crate::client::{self, Client};
use crate::host;
use crate::open_loop::{self, Class, Outcome, Plan, Slot};
use crate::report;
use crate::stats::Progress;
use crate::target::{Rotation, Target, TargetArgs};
use anyhow::Context;
use futures::StreamExt;
use futures::future::BoxFuture;
use serde::Serialize;
use serde_json::json;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The most replies a scripted agent may have (the API's limit).
const MAX_SCRIPT_REPLIES: u64 = 1000;

/// How many setup requests run at once.
const SETUP_CONCURRENCY: usize = 16;

/// How many runs are checked at once at the end.
const CHECK_CONCURRENCY: usize = 8;

/// Items per page of the list reads (the API's default).
const READ_PAGE: usize = 50;

/// The load shared by `steady` and `burst`.
#[derive(clap::Args, Debug, Clone, Serialize)]
pub struct LoadArgs {
    /// Reads per second (get run, list messages, events page, in turn).
    #[arg(long, default_value_t = 500.0)]
    pub reads: f64,
    /// Writes per second (post message, or create run for --create-share of them).
    #[arg(long, default_value_t = 100.0)]
    pub writes: f64,
    /// Share of the writes that create a run (with a first message) instead of posting.
    #[arg(long, default_value_t = 0.2)]
    pub create_share: f64,
    /// Runs the reads and posts go to.
    #[arg(long, default_value_t = 300)]
    pub pool_runs: usize,
    /// Seconds of load before the measured window (same rate; not in the figures).
    #[arg(long, default_value_t = 2.0)]
    pub warmup_secs: f64,
    /// Cap on requests in flight; a request due beyond it counts as `not_started`.
    #[arg(long, default_value_t = 256)]
    pub max_in_flight: usize,
    /// Bound on each load request.
    #[arg(long, default_value_t = 10_000)]
    pub request_timeout_ms: u64,
    /// Bound on setting up the pool and on the runs settling at the end, in seconds.
    #[arg(long, default_value_t = 120)]
    pub deadline_secs: u64,
}

impl LoadArgs {
    /// The small load of `--smoke`.
    pub fn smoke(&mut self) {
        self.reads = 40.0;
        self.writes = 10.0;
        self.pool_runs = 20;
        self.warmup_secs = 0.5;
    }

    fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.reads >= 0.0 && self.writes >= 0.0,
            "rates must not be negative"
        );
        anyhow::ensure!(
            (0.0..=1.0).contains(&self.create_share),
            "--create-share is a fraction"
        );
        anyhow::ensure!(self.pool_runs > 0, "--pool-runs must be at least 1");
        anyhow::ensure!(self.max_in_flight > 0, "--max-in-flight must be at least 1");
        Ok(())
    }
}

#[derive(clap::Args, Debug, Clone)]
pub struct SteadyArgs {
    #[command(flatten)]
    pub load: LoadArgs,
    /// Seconds of measured load (after the warm-up).
    #[arg(long, default_value_t = 60.0)]
    pub duration_secs: f64,
    /// A short run for tests: 40 reads/s, 10 writes/s, 20 runs, 3 s in all.
    #[arg(long)]
    pub smoke: bool,
    #[command(flatten)]
    pub target: TargetArgs,
    /// Where the JSON and Markdown reports go.
    #[arg(long, default_value = "target/loadtest")]
    pub out: PathBuf,
}

/// The pool and what the writes did, for the checks at the end.
pub struct Load {
    pub agent: String,
    pub pool: Arc<Vec<uuid::Uuid>>,
    /// Per pool run: posts accepted, and posts whose answer was lost (a timeout or a
    /// broken connection: stored or not, the harness cannot tell).
    accepted: Arc<Mutex<HashMap<uuid::Uuid, (u64, u64)>>>,
    /// Runs the writes created.
    created: Arc<Mutex<Vec<uuid::Uuid>>>,
}

/// Creates the agent and the pool (each run with a first message, whose turn must end).
pub async fn prepare(
    target: &Target,
    client: &Client,
    args: &LoadArgs,
    total_secs: f64,
    p: Progress,
) -> anyhow::Result<Load> {
    args.validate()?;
    // Each pool run answers its first message and its share of the posts.
    let posts = args.writes * (1.0 - args.create_share) * total_secs;
    let turns = (posts / args.pool_runs as f64).ceil() as u64 + 3;
    anyhow::ensure!(
        turns <= MAX_SCRIPT_REPLIES,
        "{turns} turns per run exceed the {MAX_SCRIPT_REPLIES} replies a scripted agent may \
         have: raise --pool-runs"
    );
    let delays = vec![0; turns as usize];
    let agent = client
        .scripted_agent(target.url(0), "loadtest steady", &delays)
        .await?;
    p.say(format!(
        "creating {} pool runs (agent with {turns} instant replies)",
        args.pool_runs
    ));
    let mut creating = futures::stream::iter(0..args.pool_runs)
        .map(|i| client.create_run(target.url(i as u64), &agent, Some("hello")))
        .buffer_unordered(SETUP_CONCURRENCY);
    let mut pool = Vec::with_capacity(args.pool_runs);
    let deadline = Duration::from_secs(args.deadline_secs);
    while let Some(run) = tokio::time::timeout(deadline, creating.next())
        .await
        .context("creating the pool took too long")?
    {
        pool.push(run?);
    }
    drop(creating);
    client
        .wait_settled(&target.urls, &pool, deadline)
        .await
        .context("the pool's first turns")?;
    p.say(format!("{} pool runs idle", pool.len()));
    Ok(Load {
        agent,
        pool: Arc::new(pool),
        accepted: Arc::new(Mutex::new(HashMap::new())),
        created: Arc::new(Mutex::new(Vec::new())),
    })
}

/// The timetable of reads and writes for `secs` seconds.
pub fn plan(args: &LoadArgs, secs: f64) -> Plan {
    let timeout = Duration::from_millis(args.request_timeout_ms);
    Plan {
        classes: vec![
            Class {
                per_sec: args.reads,
            },
            Class {
                per_sec: args.writes,
            },
        ],
        duration: Duration::from_secs_f64(secs),
        max_in_flight: args.max_in_flight,
        drain: timeout + Duration::from_secs(2),
    }
}

/// The request for each slot of [`plan`]: class 0 reads, class 1 writes, round-robin
/// over every replica of the target.
pub fn requests(
    target: &Target,
    client: &Client,
    load: &Load,
    args: &LoadArgs,
) -> impl FnMut(Slot) -> (&'static str, BoxFuture<'static, Outcome>) + use<> {
    requests_on(Rotation::new(&target.urls), client, load, args)
}

/// Like [`requests`], round-robin over the replicas in `rotation` when each is due.
pub fn requests_on(
    rotation: Rotation,
    client: &Client,
    load: &Load,
    args: &LoadArgs,
) -> impl FnMut(Slot) -> (&'static str, BoxFuture<'static, Outcome>) + use<> {
    let (client, pool) = (client.clone(), load.pool.clone());
    let (accepted, created) = (load.accepted.clone(), load.created.clone());
    let (agent, share) = (load.agent.clone(), args.create_share);
    let mut posts: u64 = 0;
    move |slot| {
        let Some(base) = rotation.pick(slot.seq) else {
            let op = if slot.class == 0 {
                "get_run"
            } else {
                "post_message"
            };
            let outcome = Outcome::Error("no_replica".into());
            return (op, Box::pin(std::future::ready(outcome)));
        };
        let c = client.clone();
        if slot.class == 0 {
            let run = pool[((slot.seq / 3) % pool.len() as u64) as usize];
            let (op, url) = match slot.seq % 3 {
                0 => ("get_run", format!("{base}/v1/runs/{run}")),
                1 => (
                    "list_messages",
                    format!("{base}/v1/runs/{run}/messages?limit={READ_PAGE}"),
                ),
                _ => (
                    "events_page",
                    format!("{base}/v1/runs/{run}/events?after=0&limit={READ_PAGE}"),
                ),
            };
            return (op, Box::pin(async move { c.load(url, None).await.0 }));
        }
        // Write `seq` creates a run when the running count of creations goes up.
        let creates = ((slot.seq + 1) as f64 * share).floor() > (slot.seq as f64 * share).floor();
        if creates {
            let body = json!({"agent_id": agent, "message": "hello"});
            let created = created.clone();
            let url = format!("{base}/v1/runs");
            return (
                "create_run",
                Box::pin(async move {
                    let (outcome, body) = c.load(url, Some(body)).await;
                    if let Some(run) = body.and_then(|b| client::run_id(&b).ok()) {
                        lock(&created).push(run);
                    }
                    outcome
                }),
            );
        }
        let run = pool[(posts % pool.len() as u64) as usize];
        posts += 1;
        let url = format!("{base}/v1/runs/{run}/messages");
        let body = json!({"content": format!("m{}", slot.seq)});
        let accepted = accepted.clone();
        (
            "post_message",
            Box::pin(async move {
                let (outcome, _) = c.load(url, Some(body)).await;
                match &outcome {
                    Outcome::Ok => lock(&accepted).entry(run).or_default().0 += 1,
                    Outcome::Error(kind) if client::answer_lost(kind) => {
                        lock(&accepted).entry(run).or_default().1 += 1
                    }
                    _ => {}
                }
                outcome
            }),
        )
    }
}

/// A poisoned lock only means a request task panicked; the counts are still whole.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the end-of-run checks found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Checked {
    pub runs_checked: usize,
    pub events_checked: i64,
    pub failures: Vec<String>,
}

/// Waits for every run (the pool, the created ones and `extra` with the user messages
/// each must hold, give or take those whose answer was lost) to settle, then checks the
/// invariants of each.
pub async fn verify(
    target: &Target,
    client: &Client,
    load: &Load,
    extra: &[(uuid::Uuid, Users)],
    deadline: Duration,
    p: Progress,
) -> anyhow::Result<Checked> {
    let accepted = lock(&load.accepted).clone();
    let mut expect: Vec<(uuid::Uuid, Users)> = load
        .pool
        .iter()
        .map(|r| {
            let (ok, lost) = accepted.get(r).copied().unwrap_or_default();
            (
                *r,
                Users {
                    at_least: 1 + ok,
                    lost,
                },
            )
        })
        .collect();
    expect.extend(lock(&load.created).iter().map(|r| {
        (
            *r,
            Users {
                at_least: 1,
                lost: 0,
            },
        )
    }));
    expect.extend_from_slice(extra);
    let runs: Vec<uuid::Uuid> = expect.iter().map(|(r, _)| *r).collect();
    p.say(format!("waiting for {} runs to settle", runs.len()));
    let settled = client.wait_settled(&target.urls, &runs, deadline).await?;
    p.say(format!("checking {} runs", runs.len()));
    let checks = futures::stream::iter(expect.iter().zip(&settled).enumerate())
        .map(|(i, ((run, users), summary))| async move {
            check(target, client, target.url(i as u64), *run, *users, summary).await
        })
        .buffer_unordered(CHECK_CONCURRENCY)
        .collect::<Vec<_>>()
        .await;
    let mut out = Checked {
        runs_checked: runs.len(),
        ..Checked::default()
    };
    for c in checks {
        match c {
            Ok(n) => out.events_checked += n,
            Err(e) => out.failures.push(format!("{e:#}")),
        }
    }
    Ok(out)
}

/// User messages a run must hold: `at_least`, and up to `lost` more.
#[derive(Debug, Clone, Copy)]
pub struct Users {
    pub at_least: u64,
    pub lost: u64,
}

/// One run: versions `1..n` with the projection at `n`, not failed, and the user
/// messages it must hold.
async fn check(
    target: &Target,
    client: &Client,
    base: &str,
    run: uuid::Uuid,
    users: Users,
    summary: &serde_json::Value,
) -> anyhow::Result<i64> {
    let n = target.check_run(client, run).await?;
    anyhow::ensure!(
        summary["status"] == "waiting" && summary["last_error"].is_null(),
        "run {run} ended {} with error {}",
        summary["status"],
        summary["last_error"]
    );
    let messages = client.messages(base, run).await?;
    let stored = messages.iter().filter(|m| m["role"] == "user").count() as u64;
    anyhow::ensure!(
        (users.at_least..=users.at_least + users.lost).contains(&stored),
        "run {run}: {} user messages accepted ({} more answers lost), {stored} stored",
        users.at_least,
        users.lost
    );
    Ok(n)
}

/// Runs the scenario; returns the number of invariant failures.
pub async fn run(mut args: SteadyArgs) -> anyhow::Result<usize> {
    if args.smoke {
        args.load.smoke();
        args.duration_secs = 2.5;
    }
    let p = Progress::new();
    let load_args = &args.load;
    let secs = load_args.warmup_secs + args.duration_secs;
    let target = Target::start(&args.target).await?;
    let mut json = report::header("steady", &target.about)?;
    let client = Client::new(
        &target.key,
        Duration::from_millis(load_args.request_timeout_ms),
    )?;
    let load = prepare(&target, &client, load_args, secs, p).await?;
    p.say(format!(
        "steady: {} reads/s + {} writes/s for {:.1} s ({:.1} s warm-up) on {} replicas",
        load_args.reads,
        load_args.writes,
        secs,
        load_args.warmup_secs,
        target.urls.len()
    ));
    let plan = plan(load_args, secs);
    let cpu = host::snapshot();
    let done = open_loop::drive(
        &plan,
        std::time::Instant::now(),
        "steady",
        p,
        requests(&target, &client, &load, load_args),
    )
    .await;
    let cpu = host::since(cpu, &target.pids());
    let warm_ms = load_args.warmup_secs * 1e3;
    let measured = args.duration_secs;
    let timeline = report::timeline(&done.samples);
    let (ops, errors) = report::summarise(&done.samples, measured, |s| s.at_ms >= warm_ms);
    let deadline = Duration::from_secs(load_args.deadline_secs);
    let checked = verify(&target, &client, &load, &[], deadline, p).await?;
    let about = target.about.clone();
    target.stop().await?;

    json["load"] = serde_json::to_value(load_args)?;
    json["measured_secs"] = json!(measured);
    json["ops"] = serde_json::to_value(&ops)?;
    let (totals, _) = report::summarise_by(&done.samples, measured, |s| s.at_ms >= warm_ms, kind);
    json["totals"] = serde_json::to_value(&totals)?;
    json["errors"] = serde_json::to_value(&errors)?;
    json["undrained"] = json!(done.undrained);
    json["max_schedule_lag_ms"] = json!(done.max_schedule_lag_ms);
    json["checked"] = serde_json::to_value(&checked)?;
    json["cpu"] = serde_json::to_value(&cpu)?;
    json["timeline"] = serde_json::to_value(&timeline)?;
    let mut md = format!(
        "# baton-loadtest steady\n\n{} reads/s + {} writes/s offered for {measured} s after \
         {} s of warm-up, {} replicas ({}), started {}\n\n",
        load_args.reads,
        load_args.writes,
        load_args.warmup_secs,
        about.replicas,
        about.profile.unwrap_or("given by URL"),
        json["started_at"].as_str().unwrap_or_default(),
    );
    md.push_str(&report::md_table(&[
        (String::new(), &ops),
        ("all".to_string(), &totals),
    ]));
    md.push('\n');
    md.push_str(&report::md_errors(&errors));
    md.push_str(&report::md_slowest(&timeline, 3));
    md.push_str(&format!("{}\n", cpu.md()));
    md.push_str(&md_footer(
        &checked,
        done.max_schedule_lag_ms,
        done.undrained,
    ));
    report::write(&args.out, "steady", &json, &md)?;
    println!("{md}");
    Ok(checked.failures.len())
}

/// `reads` or `writes`: the class of an operation.
pub fn kind(s: &open_loop::Sample) -> &'static str {
    if matches!(s.op, "post_message" | "create_run") {
        "writes"
    } else {
        "reads"
    }
}

/// The lines under the tables: scheduler lag, undrained requests, invariants.
pub fn md_footer(checked: &Checked, lag_ms: f64, undrained: usize) -> String {
    let mut md = format!(
        "\nScheduler lag at worst {lag_ms:.1} ms; {undrained} requests undrained. \
         Invariants: {} runs ({} events) checked, {} failures.\n",
        checked.runs_checked,
        checked.events_checked,
        checked.failures.len()
    );
    for f in checked.failures.iter().take(20) {
        md.push_str(&format!("- FAILURE: {f}\n"));
    }
    md
}
