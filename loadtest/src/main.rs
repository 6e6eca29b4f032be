//! `baton-loadtest`: drives real `baton` processes (started with the testkit
//! [`baton_testkit::Cluster`] on a fresh Postgres database and the local NATS, loopback
//! only, or given by URL) and reports figures. Subcommands:
//!
//! - `cluster` measures (1) hand-off time per run on SIGTERM of the replica owning the
//!   most of N running runs, (2) adoption time per run after SIGKILL with a short lease
//!   TTL, and (3) SSE delivery latency across replicas;
//! - `steady` offers R reads/s + W writes/s on an open-loop timetable ([`open_loop`]) and
//!   reports throughput and latency percentiles per operation;
//! - `burst` adds aligned bursts of turn completions to that load and compares request
//!   latency during the bursts with latency between them;
//! - `append` measures the most durable single-event appends per second through the API
//!   and through the store, each as a ratio to the same SQL driven directly;
//! - `rolling-upgrade` replaces each replica in turn (SIGTERM, a new process) under the
//!   `steady` load while A active runs call a mutation tool every turn and SSE watchers
//!   follow them, resuming elsewhere with `Last-Event-ID`; reports hand-off times and
//!   client-visible errors ([`upgrade`], [`faults`]);
//! - `chaos` does K cycles of SIGKILL (then restart) or SIGSTOP (then SIGCONT) of a
//!   random replica (seeded, `--seed` replays) under the same load; reports adoption
//!   times ([`chaos`]);
//! - `fanout` spreads S SSE subscribers over the replicas and R runs while messages are
//!   posted on an open-loop timetable; reports delivery latency (recorded -> client)
//!   overall, same-replica and cross-replica, the replicas' memory per open stream, the
//!   subscribers closed for falling behind, and, as the raw reference measured in the
//!   same run, the NATS publish -> subscribe hop ([`fanout`]). `cluster --only sse` uses
//!   the same measurement;
//! - `lifecycle` runs the create -> complete workload (a run created with a message, an
//!   agent that completes it at once, its stream read to the end) closed loop on one
//!   server per tier; reports runs/s, latency and CPU per run of the server, Postgres
//!   and NATS ([`lifecycle`]).
//!
//! Each prints progress, writes `<scenario>-<time>.json` and `.md` under `--out` (the
//! fault scenarios also a latency-over-time `.svg`, [`plot`]), and exits non-zero when
//! an invariant breaks (a run's versions not exactly 1..n, a client seeing a gap or a
//! repeat, a write accepted but not stored, a mutation run twice, a run not taken over
//! in time). Every loop is bounded in count and time.

mod append;
mod burst;
mod chaos;
mod client;
mod drivers;
mod fanout;
mod faults;
mod host;
mod kill;
mod lifecycle;
mod open_loop;
mod plot;
mod report;
mod stats;
mod steady;
mod takeover;
mod target;
mod upgrade;
mod watch;

use clap::{Parser, Subcommand};
use stats::{MD_HEADER, Progress};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(name = "baton-loadtest", about = "Load and fault figures for Baton")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Hand-off on SIGTERM, adoption after SIGKILL, SSE latency across replicas.
    Cluster(ClusterArgs),
    /// Open-loop reads and writes at fixed rates: throughput and latency per operation.
    Steady(steady::SteadyArgs),
    /// The steady load plus aligned bursts of turn completions.
    Burst(burst::BurstArgs),
    /// The most durable event appends per second: API, store and raw Postgres.
    Append(append::AppendArgs),
    /// Replace every replica in turn (SIGTERM, new process) under load; hand-off times.
    RollingUpgrade(upgrade::UpgradeArgs),
    /// Random SIGKILL / SIGSTOP of replicas under load, with restarts; adoption times.
    Chaos(chaos::ChaosArgs),
    /// SSE subscribers over the replicas under open-loop posts: delivery latency, memory
    /// per stream, subscribers closed for falling behind.
    Fanout(fanout::FanoutArgs),
    /// Runs created with a message, completed by the agent at once, streamed to their
    /// end: runs/s, latency and CPU per run of each process, per tier.
    Lifecycle(lifecycle::LifecycleArgs),
}

#[derive(clap::Args, Debug)]
struct ClusterArgs {
    /// The `baton` binary (default: target/release/baton, else target/debug/baton).
    #[arg(long)]
    baton: Option<PathBuf>,
    /// Replicas in the hand-off and adoption clusters.
    #[arg(long, default_value_t = 3)]
    replicas: usize,
    /// Active runs for the SIGTERM hand-off.
    #[arg(long, default_value_t = 1000)]
    runs: usize,
    /// Scripted reply delay keeping the runs `running`, in ms.
    #[arg(long, default_value_t = 120_000)]
    reply_ms: u64,
    /// Active runs for the SIGKILL adoption.
    #[arg(long, default_value_t = 200)]
    adopt_runs: usize,
    /// Lease TTL for the adoption cluster, in ms.
    #[arg(long, default_value_t = 2000)]
    adopt_ttl_ms: u64,
    /// SSE clients (one run each) on replica B.
    #[arg(long, default_value_t = 20)]
    sse_runs: usize,
    /// Messages (turns) posted on replica A per SSE run (two per second).
    #[arg(long, default_value_t = 25)]
    sse_messages: usize,
    /// Bound on each phase (creating runs, leasing, take-over, streaming), in seconds.
    #[arg(long, default_value_t = 180)]
    deadline_secs: u64,
    /// Which scenarios to run.
    #[arg(long, value_delimiter = ',', default_value = "handoff,adoption,sse")]
    only: Vec<String>,
    /// Where the JSON and Markdown reports go.
    #[arg(long, default_value = "target/loadtest")]
    out: PathBuf,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let scenario = async {
        match Cli::parse().command {
            Command::Cluster(args) => cluster(args).await,
            Command::Steady(args) => steady::run(args).await,
            Command::Burst(args) => burst::run(args).await,
            Command::Append(args) => append::run(args).await,
            Command::RollingUpgrade(args) => upgrade::run(args).await,
            Command::Chaos(args) => chaos::run(args).await,
            Command::Fanout(args) => fanout::run(args).await,
            Command::Lifecycle(args) => lifecycle::run(args).await,
        }
    };
    // Interrupted, the scenario is dropped: its cluster kills every replica it started
    // (a stopped one too) before the harness exits.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let failures = tokio::select! {
        r = scenario => r?,
        _ = tokio::signal::ctrl_c() => anyhow::bail!("interrupted"),
        _ = term.recv() => anyhow::bail!("terminated"),
    };
    if failures > 0 {
        eprintln!("{failures} invariant failure(s)");
        std::process::exit(1);
    }
    Ok(())
}

fn env(pairs: &[(&str, String)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

/// Runs the chosen scenarios, writes the reports and returns the number of failures.
async fn cluster(args: ClusterArgs) -> anyhow::Result<usize> {
    let bin = target::resolve_baton(args.baton.as_deref())?;
    let p = Progress::new();
    let deadline = Duration::from_secs(args.deadline_secs);
    let wants = |s: &str| args.only.iter().any(|o| o == s);
    let mut json = serde_json::json!({
        "started_at": chrono::Utc::now().to_rfc3339(),
        "baton": bin.display().to_string(),
        "profile": target::profile_of(&bin),
        "cores": std::thread::available_parallelism().map_or(0, |n| n.get()),
    });
    let mut md = format!(
        "# baton-loadtest cluster\n\nbinary `{}`, {} cores, started {}\n\n{MD_HEADER}\n",
        bin.display(),
        json["cores"],
        json["started_at"].as_str().unwrap_or_default()
    );
    let mut notes = String::new();
    let mut failures = Vec::new();
    let knobs = |ttl: u64, renew: u64, adopt: u64| {
        env(&[
            ("BATON_CLUSTER__LEASE_TTL_MS", ttl.to_string()),
            ("BATON_CLUSTER__RENEW_INTERVAL_MS", renew.to_string()),
            ("BATON_CLUSTER__ADOPT_INTERVAL_MS", adopt.to_string()),
            ("BATON_HTTP__SHUTDOWN_GRACE_SECS", "120".to_string()),
        ])
    };
    for (name, fault, runs, env) in [
        (
            "handoff",
            kill::Fault::Term,
            args.runs,
            knobs(30_000, 5_000, 60_000),
        ),
        (
            "adoption",
            kill::Fault::Kill,
            args.adopt_runs,
            knobs(args.adopt_ttl_ms, args.adopt_ttl_ms / 4, 250),
        ),
    ] {
        if !wants(name) {
            continue;
        }
        let plan = kill::Plan {
            fault,
            replicas: args.replicas,
            runs,
            reply_ms: args.reply_ms,
            env,
            deadline,
        };
        let o = kill::run(&bin, &plan, p).await?;
        p.say(format!("{name}: {}", serde_json::to_string(&o.takeover)?));
        let what = match fault {
            kill::Fault::Term => "SIGTERM -> new owner's lease.acquired",
            kill::Fault::Kill => "SIGKILL -> adopter's lease.acquired",
        };
        md.push_str(&o.takeover.md_row(what));
        md.push('\n');
        notes.push_str(&format!(
            "- {name}: {} runs on {} replicas, ownership {:?}; {} signalled with {} runs; \
             {} taken over (reasons {:?}, new owners {:?}); {} `lease.released{{drained}}`; \
             victim exit after {} ms; setup {:.1} s; {} runs checked, {} failures\n",
            o.runs,
            o.replicas,
            o.ownership,
            o.victim,
            o.victim_runs,
            o.taken_over,
            o.reasons,
            o.new_owners,
            o.released_drained,
            o.exit_ms.map_or("?".into(), |m| format!("{m:.0}")),
            o.setup_secs,
            o.runs_checked,
            o.failures.len()
        ));
        failures.extend(o.failures.iter().cloned());
        json[name] = serde_json::to_value(&o)?;
    }
    if wants("sse") {
        // Every client on B, every post on A, each run posted to twice a second.
        let target = target::Target::start(&target::TargetArgs {
            baton: Some(bin.clone()),
            replicas: 2,
            replica_env: Vec::new(),
            url: Vec::new(),
            key: None,
        })
        .await?;
        let plan = fanout::Plan {
            runs: args.sse_runs,
            subscribers: args.sse_runs,
            subscribe_on: vec![1],
            write_on: vec![0],
            rate: 2.0 * args.sse_runs as f64,
            warmup: Duration::ZERO,
            duration: Duration::from_secs_f64(args.sse_messages as f64 / 2.0),
            request_timeout: Duration::from_secs(30),
            max_in_flight: 256,
            deadline,
            idle: Duration::from_secs(60),
            nats_url: None,
            raw_secs: 0.0,
            raw_rate: None,
        };
        let measured = fanout::measure(&target, &plan, p).await;
        target.stop().await?;
        let o = measured?;
        p.say(format!("sse: {}", serde_json::to_string(&o.cross_replica)?));
        for (what, l) in [
            ("SSE commit on A -> client on B", &o.cross_replica),
            ("SSE commit on B -> client on B", &o.same_replica),
        ] {
            md.push_str(&format!(
                "| {what} | {} | {:.1} | {:.1} | {:.1} | {:.1} |\n",
                l.count, l.p50_ms, l.p90_ms, l.p99_ms, l.max_ms
            ));
        }
        notes.push_str(&format!(
            "- sse: {} runs, {} posts/s on A for {:.0} s, {} events received on B, {} failures\n",
            o.runs,
            o.rate_per_sec,
            o.duration_secs,
            o.checks.events_received,
            o.failures.len()
        ));
        failures.extend(o.failures.iter().cloned());
        json["sse"] = serde_json::to_value(&o)?;
    }
    md.push_str(&format!("\n{notes}"));
    for f in failures.iter().take(20) {
        md.push_str(&format!("- FAILURE: {f}\n"));
    }
    json["failures"] = serde_json::to_value(&failures)?;
    report::write(&args.out, "cluster", &json, &md)?;
    println!("{md}");
    Ok(failures.len())
}
