//! `burst`: the `steady` load plus aligned bursts of turn completions. Burst run `j` has
//! a scripted agent of its own whose every reply waits `d_j` ms, from `lead` down to
//! `lead - spread`; for each burst the harness posts one message to run `j` exactly `d_j`
//! ms before the burst instant (on its own timetable, so the posts are spread over
//! `spread` ms rather than piled up), and so every turn ends at the burst instant, give
//! or take the wake-up and claim of each turn: their settling appends (which release the
//! leases) and their checkpoints hit the database together. Afterwards the burst
//! windows are read from the stored events (first `turn.completed` to last
//! `checkpoint.saved` of the burst's turn, server timestamps on the harness's timetable)
//! and every load request is put in one class: overlapping a burst window, overlapping a
//! posting window (the posts and the turns they start), or between them. The report
//! compares the classes' latencies per operation.

use crate::client::{Client, answer_lost};
use crate::host;
use crate::open_loop::{self, Outcome, Sample};
use crate::report::{self, OpReport};
use crate::stats::{Hdr, Percentiles, Progress};
use crate::steady::{self, LoadArgs, Users};
use crate::target::{Target, TargetArgs};
use anyhow::Context;
use chrono::{DateTime, Utc};
use futures::StreamExt;
use serde::Serialize;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How many runs are created or read at once in setup and analysis.
const CONCURRENCY: usize = 16;

#[derive(clap::Args, Debug, Clone)]
pub struct BurstArgs {
    #[command(flatten)]
    pub load: LoadArgs,
    /// Bursts of aligned turn completions.
    #[arg(long, default_value_t = 6)]
    pub bursts: usize,
    /// Runs whose turns end together in each burst.
    #[arg(long, default_value_t = 200)]
    pub burst_runs: usize,
    /// Seconds between bursts.
    #[arg(long, default_value_t = 10.0)]
    pub every_secs: f64,
    /// The longest reply delay: the first message of a burst is posted this long before it.
    #[arg(long, default_value_t = 3000)]
    pub lead_ms: u64,
    /// The span the posts of a burst are spread over (the delays range over it).
    #[arg(long, default_value_t = 2000)]
    pub spread_ms: u64,
    /// A short run for tests: the `steady` smoke load, 2 bursts of 10 runs 2 s apart.
    #[arg(long)]
    pub smoke: bool,
    #[command(flatten)]
    pub target: TargetArgs,
    /// Where the JSON and Markdown reports go.
    #[arg(long, default_value = "target/loadtest")]
    pub out: PathBuf,
}

/// One burst's posting, as the harness saw it (ms on the timetable).
#[derive(Debug, Clone, Serialize)]
pub struct Posting {
    pub posted_at_ms: f64,
    pub posts_done_ms: f64,
    pub accepted: usize,
    pub busy: usize,
    pub errors: usize,
    /// Post latency, from each post's intended start.
    pub latency: Percentiles,
}

/// One burst's windows, from the stored events (ms on the timetable).
#[derive(Debug, Clone, Serialize)]
pub struct Burst {
    pub posting: Posting,
    /// Last `turn.started` of the burst's turns: the posting window ends there.
    pub last_started_ms: f64,
    pub turns_completed: usize,
    pub first_completed_ms: f64,
    pub last_completed_ms: f64,
    /// Last `checkpoint.saved` after the burst's turns: the burst window ends there.
    pub last_checkpoint_ms: f64,
    /// `turn.completed` spread: last - first.
    pub spread_ms: f64,
}

/// Runs the scenario; returns the number of invariant failures.
pub async fn run(mut args: BurstArgs) -> anyhow::Result<usize> {
    if args.smoke {
        args.load.smoke();
        (args.bursts, args.burst_runs, args.every_secs) = (2, 10, 2.0);
        (args.lead_ms, args.spread_ms) = (500, 300);
    }
    anyhow::ensure!(args.bursts > 0 && args.burst_runs > 0, "nothing to burst");
    anyhow::ensure!(
        args.spread_ms < args.lead_ms,
        "--spread-ms must be below --lead-ms"
    );
    anyhow::ensure!(
        args.every_secs * 1e3 >= args.lead_ms as f64 * 2.0,
        "--every-secs must be at least twice --lead-ms, so one burst's turns end before \
         the next one's messages are posted"
    );
    let p = Progress::new();
    let la = &args.load;
    let secs = la.warmup_secs + args.bursts as f64 * args.every_secs;
    let target = Target::start(&args.target).await?;
    let mut json = report::header("burst", &target.about)?;
    let client = Client::new(&target.key, Duration::from_millis(la.request_timeout_ms))?;
    let load = steady::prepare(&target, &client, la, secs, p).await?;
    // Run j's reply delay: from `lead` down, so its post is due `delay` before the burst.
    let n = args.burst_runs as u64;
    let delays: Vec<u64> = (0..n)
        .map(|j| args.lead_ms - j * args.spread_ms / n)
        .collect();
    let (c, t, replies) = (&client, &target, args.bursts + 1);
    let burst_runs: Vec<uuid::Uuid> = futures::stream::iter(delays.iter().enumerate())
        .map(|(j, d)| async move {
            let base = t.url(j as u64);
            let agent = c
                .scripted_agent(base, "loadtest burst", &vec![*d; replies])
                .await?;
            c.create_run(base, &agent, None).await
        })
        .buffered(CONCURRENCY)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<anyhow::Result<_>>()?;
    p.say(format!(
        "burst: {} bursts of {} runs every {} s (posted {}..{} ms ahead), under {} reads/s + \
         {} writes/s, {secs:.1} s in all",
        args.bursts,
        args.burst_runs,
        args.every_secs,
        args.lead_ms,
        args.lead_ms - args.spread_ms,
        la.reads,
        la.writes
    ));

    let started = Instant::now() + Duration::from_millis(100);
    // Burst k's instant; the lead keeps the first post after the start.
    let at = |k: usize| {
        let ms = la.warmup_secs * 1e3 + (k as f64 + 0.5) * args.every_secs * 1e3;
        started + Duration::from_secs_f64(ms.max(args.lead_ms as f64) / 1e3)
    };
    let posting = tokio::spawn({
        let (client, runs, urls) = (client.clone(), burst_runs.clone(), target.urls.clone());
        let times: Vec<Instant> = (0..args.bursts).map(at).collect();
        async move { post_bursts(&client, &urls, &runs, &delays, &times, started).await }
    });
    let plan = steady::plan(la, secs);
    let cpu = host::snapshot();
    let done = open_loop::drive(
        &plan,
        started,
        "burst",
        p,
        steady::requests(&target, &client, &load, la),
    )
    .await;
    let (postings, users) = posting.await.context("the burst posts")?;
    let cpu = host::since(cpu, &target.pids());
    let timeline = report::timeline(&done.samples);

    let deadline = Duration::from_secs(la.deadline_secs);
    let extra: Vec<(uuid::Uuid, Users)> = burst_runs.iter().copied().zip(users).collect();
    let checked = steady::verify(&target, &client, &load, &extra, deadline, p).await?;
    let bursts = windows(&target, &client, &burst_runs, postings, done.started_wall).await?;
    let about = target.about.clone();
    target.stop().await?;

    let warm_ms = la.warmup_secs * 1e3;
    let class = |s: &Sample| classify(s, &bursts);
    let mut classes = BTreeMap::new();
    let mut errors_by_class = BTreeMap::new();
    for (name, secs) in class_secs(&bursts, secs - la.warmup_secs) {
        let (ops, errors) = report::summarise(&done.samples, secs, |s| {
            s.at_ms >= warm_ms && class(s) == name
        });
        classes.insert(name, ops);
        errors_by_class.insert(name, errors);
    }

    json["load"] = serde_json::to_value(la)?;
    json["bursts"] = json!({
        "count": args.bursts, "runs": args.burst_runs, "every_secs": args.every_secs,
        "lead_ms": args.lead_ms, "spread_ms": args.spread_ms, "each": serde_json::to_value(&bursts)?,
    });
    json["classes"] = serde_json::to_value(&classes)?;
    json["errors"] = serde_json::to_value(&errors_by_class)?;
    json["undrained"] = json!(done.undrained);
    json["max_schedule_lag_ms"] = json!(done.max_schedule_lag_ms);
    json["checked"] = serde_json::to_value(&checked)?;
    json["cpu"] = serde_json::to_value(&cpu)?;
    json["timeline"] = serde_json::to_value(&timeline)?;
    let md = markdown(&args, &about, &json, &bursts, &classes, &errors_by_class);
    let md = md
        + &report::md_slowest(&timeline, 3)
        + &format!("{}\n", cpu.md())
        + &steady::md_footer(&checked, done.max_schedule_lag_ms, done.undrained);
    report::write(&args.out, "burst", &json, &md)?;
    println!("{md}");
    Ok(checked.failures.len())
}

/// For each burst instant of `times`, posts one message to each burst run its reply
/// delay before the instant; returns each burst's posting and the user messages each run
/// must hold.
async fn post_bursts(
    client: &Client,
    urls: &[String],
    runs: &[uuid::Uuid],
    delays: &[u64],
    times: &[Instant],
    started: Instant,
) -> (Vec<Posting>, Vec<Users>) {
    let mut postings = Vec::new();
    let mut users = vec![
        Users {
            at_least: 0,
            lost: 0
        };
        runs.len()
    ];
    let ms = |t: Instant| t.saturating_duration_since(started).as_secs_f64() * 1e3;
    for (k, at) in times.iter().enumerate() {
        let due = |j: usize| {
            at.checked_sub(Duration::from_millis(delays[j]))
                .unwrap_or(*at)
        };
        let posts = runs.iter().enumerate().map(|(j, run)| {
            let url = format!("{}/v1/runs/{run}/messages", urls[j % urls.len()]);
            let body = json!({"content": format!("burst {k}")});
            let due = due(j);
            async move {
                tokio::time::sleep_until(due.into()).await;
                let (outcome, _) = client.load(url, Some(body)).await;
                (outcome, due.elapsed())
            }
        });
        let answers = futures::future::join_all(posts).await;
        let mut hist = Hdr::new();
        let mut p = Posting {
            posted_at_ms: ms(due(0)),
            posts_done_ms: ms(Instant::now()),
            accepted: 0,
            busy: 0,
            errors: 0,
            latency: Percentiles::default(),
        };
        for (i, (outcome, latency)) in answers.into_iter().enumerate() {
            match outcome {
                Outcome::Ok => {
                    p.accepted += 1;
                    users[i].at_least += 1;
                    hist.record(latency);
                }
                Outcome::Busy => p.busy += 1,
                Outcome::Error(kind) => {
                    p.errors += 1;
                    if answer_lost(&kind) {
                        users[i].lost += 1;
                    }
                }
            }
        }
        p.latency = hist.percentiles();
        postings.push(p);
    }
    (postings, users)
}

/// Each burst's windows from the burst runs' stored events: for the turn that burst
/// started on each run (counted per run in order), its `turn.started`, `turn.completed`
/// and the `checkpoint.saved` that follows.
async fn windows(
    target: &Target,
    client: &Client,
    runs: &[uuid::Uuid],
    postings: Vec<Posting>,
    started_wall: DateTime<Utc>,
) -> anyhow::Result<Vec<Burst>> {
    let events: Vec<Vec<serde_json::Value>> = futures::stream::iter(runs.iter().enumerate())
        .map(|(i, run)| client.events(target.url(i as u64), *run))
        .buffer_unordered(CONCURRENCY)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<anyhow::Result<_>>()?;
    let ms = |e: &serde_json::Value| -> Option<f64> {
        let at: DateTime<Utc> = e["recorded_at"].as_str()?.parse().ok()?;
        Some((at - started_wall).num_microseconds()? as f64 / 1e3)
    };
    let mut out: Vec<Burst> = postings
        .into_iter()
        .map(|posting| Burst {
            posting,
            last_started_ms: f64::NAN,
            turns_completed: 0,
            first_completed_ms: f64::NAN,
            last_completed_ms: f64::NAN,
            last_checkpoint_ms: f64::NAN,
            spread_ms: 0.0,
        })
        .collect();
    for run in &events {
        // Which burst a turn belongs to: the last posting that began before it started.
        let mut burst: Option<usize> = None;
        for e in run {
            let Some(t) = ms(e) else { continue };
            match e["type"].as_str() {
                Some("turn.started") => {
                    burst = out.iter().rposition(|b| b.posting.posted_at_ms <= t);
                    if let Some(b) = burst.and_then(|k| out.get_mut(k)) {
                        b.last_started_ms = b.last_started_ms.max(t);
                    }
                }
                Some("turn.completed") => {
                    if let Some(b) = burst.and_then(|k| out.get_mut(k)) {
                        b.turns_completed += 1;
                        b.first_completed_ms = b.first_completed_ms.min(t);
                        b.last_completed_ms = b.last_completed_ms.max(t);
                    }
                }
                Some("checkpoint.saved") => {
                    if let Some(b) = burst.and_then(|k| out.get_mut(k)) {
                        b.last_checkpoint_ms = b.last_checkpoint_ms.max(t);
                    }
                }
                _ => {}
            }
        }
    }
    for b in &mut out {
        b.spread_ms = b.last_completed_ms - b.first_completed_ms;
        if b.last_checkpoint_ms.is_nan() {
            b.last_checkpoint_ms = b.last_completed_ms;
        }
    }
    // f64::min/max ignore NaN, so bursts without turns keep NaN: leave them out.
    out.retain(|b| b.turns_completed > 0);
    Ok(out)
}

/// `burst` when the request overlaps a burst window, `posting` when it overlaps a
/// posting window, else `between`.
fn classify(s: &Sample, bursts: &[Burst]) -> &'static str {
    let overlaps = |a: f64, b: f64| s.at_ms <= b && s.end_ms() >= a;
    if bursts
        .iter()
        .any(|b| overlaps(b.first_completed_ms, b.last_checkpoint_ms))
    {
        "burst"
    } else if bursts.iter().any(|b| {
        overlaps(
            b.posting.posted_at_ms,
            b.last_started_ms.max(b.posting.posts_done_ms),
        )
    }) {
        "posting"
    } else {
        "between"
    }
}

/// The classes and the seconds each covers of the `measured` window (rates are over these).
fn class_secs(bursts: &[Burst], measured: f64) -> [(&'static str, f64); 3] {
    let burst: f64 = bursts
        .iter()
        .map(|b| (b.last_checkpoint_ms - b.first_completed_ms).max(0.0) / 1e3)
        .sum();
    let posting: f64 = bursts
        .iter()
        .map(|b| {
            (b.last_started_ms.max(b.posting.posts_done_ms) - b.posting.posted_at_ms).max(0.0) / 1e3
        })
        .sum();
    [
        ("burst", burst),
        ("posting", posting),
        ("between", (measured - burst - posting).max(0.0)),
    ]
}

fn markdown(
    args: &BurstArgs,
    about: &crate::target::About,
    json: &serde_json::Value,
    bursts: &[Burst],
    classes: &BTreeMap<&str, BTreeMap<String, OpReport>>,
    errors: &BTreeMap<&str, BTreeMap<String, u64>>,
) -> String {
    let la = &args.load;
    let mut md = format!(
        "# baton-loadtest burst\n\n{} reads/s + {} writes/s; {} bursts of {} turn \
         completions every {} s (each run's message posted its reply delay ahead, {} to {} \
         ms); {} replicas ({}); started {}\n\n",
        la.reads,
        la.writes,
        args.bursts,
        args.burst_runs,
        args.every_secs,
        args.lead_ms,
        args.lead_ms - args.spread_ms,
        about.replicas,
        about.profile.unwrap_or("given by URL"),
        json["started_at"].as_str().unwrap_or_default(),
    );
    md.push_str(
        "| burst | posted at s | posts p99 ms | turns completed | completions spread ms | \
         burst window ms |\n|---:|---:|---:|---:|---:|---:|\n",
    );
    for (k, b) in bursts.iter().enumerate() {
        md.push_str(&format!(
            "| {k} | {:.1} | {:.1} | {} | {:.0} | {:.0} |\n",
            b.posting.posted_at_ms / 1e3,
            b.posting.latency.p99_ms,
            b.turns_completed,
            b.spread_ms,
            b.last_checkpoint_ms - b.first_completed_ms
        ));
    }
    md.push_str("\nLoad requests by when they ran (ok/s over the class's windows):\n\n");
    let rows: Vec<(String, &BTreeMap<String, OpReport>)> = ["burst", "between", "posting"]
        .iter()
        .filter_map(|c| classes.get(c).map(|ops| (c.to_string(), ops)))
        .collect();
    md.push_str(&report::md_table(&rows));
    for (class, errs) in errors {
        if !errs.is_empty() {
            md.push_str(&format!("\n{class}: {}", report::md_errors(errs)));
        }
    }
    if errors.values().all(BTreeMap::is_empty) {
        md.push_str("\nNo errors.\n");
    }
    md
}
