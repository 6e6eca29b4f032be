//! What `rolling-upgrade` and `chaos` share: a spawned cluster under the `steady`
//! open-loop load, plus A active runs with tool calls ([`crate::drivers`]) each followed
//! by an SSE watcher that resumes elsewhere when its replica goes ([`crate::watch`]).
//! The scenario's faults run while the load does; replicas leave the load's rotation
//! before they are signalled and come back once they listen again. Afterwards every
//! run settles and the invariants are held against what clients saw: SSE gaps and
//! repeats, mutations run more than once, accepted writes not stored, streams not
//! exactly `1..n`. The report (JSON, Markdown and the latency plot, [`crate::plot`])
//! goes under `--out`. The faults themselves live in `upgrade` and `chaos`.

use crate::client::Client;
use crate::drivers;
use crate::open_loop;
use crate::plot::{self, Marker};
use crate::report;
use crate::stats::{Progress, Summary};
use crate::steady::{self, LoadArgs};
use crate::target::{self, Rotation, Target, TargetArgs};
use crate::watch;
use anyhow::Context;
use baton_testkit::Cluster;
use checks::Checks;
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// An SSE stream silent for this long is given up and resumed elsewhere (the replicas
/// send a keep-alive every second).
const SSE_IDLE: Duration = Duration::from_secs(3);

mod checks;

/// How often a fault's wait for take-overs polls.
pub const POLL: Duration = Duration::from_millis(100);

/// Options both fault scenarios take.
#[derive(clap::Args, Debug, Clone, Serialize)]
pub struct FaultArgs {
    /// The `baton` binary (default: target/release/baton, else target/debug/baton).
    #[arg(long)]
    pub baton: Option<PathBuf>,
    /// Replicas.
    #[arg(long, default_value_t = 3)]
    pub replicas: usize,
    /// Active runs (each turn calls a mutation tool), each followed by an SSE watcher.
    #[arg(long, default_value_t = 30)]
    pub runs: usize,
    /// Delay of each scripted model step of the active runs (two per turn), in ms.
    #[arg(long, default_value_t = 300)]
    pub reply_ms: u64,
    /// How long the mutation tool takes to answer, in ms.
    #[arg(long, default_value_t = 100)]
    pub tool_ms: u64,
    /// Lease TTL of the replicas, in ms (renewal every quarter of it).
    #[arg(long, default_value_t = 3000)]
    pub lease_ttl_ms: u64,
    /// Seconds of load after the warm-up; the faults start with it.
    #[arg(long, default_value_t = 60.0)]
    pub duration_secs: f64,
    /// Width of the plot's latency windows, in ms.
    #[arg(long, default_value_t = 250.0)]
    pub window_ms: f64,
    /// `KEY=VALUE` for every replica, after the scenario's own; repeatable.
    #[arg(long = "replica-env", value_parser = target::parse_env)]
    pub replica_env: Vec<(String, String)>,
    #[command(flatten)]
    pub load: LoadArgs,
    /// A short run for tests.
    #[arg(long)]
    pub smoke: bool,
    /// Where the JSON, Markdown and SVG reports go.
    #[arg(long, default_value = "target/loadtest")]
    pub out: PathBuf,
}

impl FaultArgs {
    /// The small load and cluster of `--smoke`.
    pub fn smoke(&mut self) {
        self.load.smoke();
        self.load.deadline_secs = 30;
        self.runs = 6;
        self.reply_ms = 400;
        self.tool_ms = 50;
        self.lease_ttl_ms = 1500;
        // Small pools: smoke runs share the test Postgres (and its connection limit)
        // with other tests running side by side. `--replica-env` given later wins.
        for (k, v) in [
            ("BATON_DATABASE__APP_POOL", "4"),
            ("BATON_DATABASE__MAX_CONNECTIONS", "8"),
        ] {
            self.replica_env.insert(0, (k.to_string(), v.to_string()));
        }
    }

    /// The timing knobs every replica gets.
    fn env(&self) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = [
            ("BATON_CLUSTER__LEASE_TTL_MS", self.lease_ttl_ms.to_string()),
            (
                "BATON_CLUSTER__RENEW_INTERVAL_MS",
                (self.lease_ttl_ms / 4).max(1).to_string(),
            ),
            ("BATON_CLUSTER__ADOPT_INTERVAL_MS", "250".to_string()),
            ("BATON_HTTP__SHUTDOWN_GRACE_SECS", "30".to_string()),
            ("BATON_HTTP__SSE_KEEPALIVE_SECS", "1".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        env.extend(self.replica_env.iter().cloned());
        env
    }

    /// Bound on one fault's take-overs and on the runs settling.
    pub fn deadline(&self) -> Duration {
        Duration::from_secs(self.load.deadline_secs)
    }
}

/// What a fault needs while the load runs.
pub struct Env<'a> {
    pub cluster: &'a mut Cluster,
    pub rotation: &'a Rotation,
    /// The active runs (whose take-overs are timed).
    pub runs: &'a [uuid::Uuid],
    /// The load's start: markers are placed in seconds from it.
    pub t0: Instant,
    pub markers: &'a mut Vec<Marker>,
    pub p: Progress,
}

impl Env<'_> {
    /// Places a marker at now.
    pub fn mark(&mut self, label: String) {
        self.p.say(&label);
        self.markers.push(Marker {
            t: self.t0.elapsed().as_secs_f64(),
            label,
        });
    }

    /// Puts replica `i` back in rotation at its current address.
    pub fn rejoin(&mut self, i: usize) {
        self.rotation
            .set(i, Some(self.cluster.base_url(i).to_string()));
    }
}

/// What a fault reports: its JSON, its Markdown section and its invariant failures.
pub struct Faulted {
    pub json: Value,
    pub md: String,
    pub failures: Vec<String>,
}

/// Take-over times by reason and in all.
pub fn takeover_summary(taken: &[crate::takeover::Taken]) -> (Summary, BTreeMap<String, Summary>) {
    let mut by: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for t in taken {
        by.entry(t.reason.clone()).or_default().push(t.ms);
    }
    let all: Vec<f64> = taken.iter().map(|t| t.ms).collect();
    let by = by
        .into_iter()
        .map(|(r, ms)| (r, Summary::of(&ms)))
        .collect();
    (Summary::of(&all), by)
}

/// Runs the load, the drivers and the watchers, calls `fault` once the warm-up is over,
/// then checks and reports; returns the number of invariant failures.
pub async fn run<F>(name: &'static str, args: &FaultArgs, fault: F) -> anyhow::Result<usize>
where
    F: AsyncFnOnce(&mut Env<'_>) -> anyhow::Result<Faulted>,
{
    let p = Progress::new();
    anyhow::ensure!(args.replicas >= 2, "--replicas must be at least 2");
    anyhow::ensure!(args.runs >= 1, "--runs must be at least 1");
    let la = &args.load;
    let secs = la.warmup_secs + args.duration_secs;
    let deadline = args.deadline();
    let mut target = Target::start(&TargetArgs {
        baton: args.baton.clone(),
        replicas: args.replicas,
        replica_env: args.env(),
        url: Vec::new(),
        key: None,
    })
    .await?;
    let mut json = report::header(name, &target.about)?;
    let client = Client::new(&target.key, Duration::from_millis(la.request_timeout_ms))?;
    let load = steady::prepare(&target, &client, la, secs, p).await?;
    let rotation = Rotation::new(&target.urls);
    // Drivers and watchers end by then whatever happens: the load, a fault per replica
    // or cycle bounded by the deadline, and settling.
    let hard = Instant::now() + Duration::from_secs_f64(secs) + deadline * 4;
    let plan = drivers::Plan {
        runs: args.runs,
        reply_ms: args.reply_ms,
        tool_ms: args.tool_ms,
    };
    let mut active = drivers::start(&client, target.url(0), rotation.clone(), &plan, hard).await?;
    p.say(format!(
        "{name}: {} active runs with tool calls and SSE watchers",
        active.runs.len()
    ));
    let setup = watch::Setup {
        http: baton_testkit::http_client(),
        key: target.key.clone(),
        rotation: rotation.clone(),
        idle: SSE_IDLE,
        deadline: hard,
    };
    let (tells, watchers): (Vec<_>, Vec<_>) = active
        .runs
        .iter()
        .enumerate()
        .map(|(i, run)| {
            let (tx, rx) = tokio::sync::watch::channel(None);
            (tx, watch::spawn(setup.clone(), *run, i as u64, rx))
        })
        .unzip();

    let t0 = Instant::now();
    let timetable = steady::plan(la, secs);
    let fire = steady::requests_on(rotation.clone(), &client, &load, la);
    let loading =
        tokio::spawn(async move { open_loop::drive(&timetable, t0, name, p, fire).await });
    tokio::time::sleep_until((t0 + Duration::from_secs_f64(la.warmup_secs)).into()).await;
    let mut markers = Vec::new();
    let faulted = {
        let mut env = Env {
            cluster: target.cluster_mut()?,
            rotation: &rotation,
            runs: &active.runs,
            t0,
            markers: &mut markers,
            p,
        };
        fault(&mut env).await?
    };
    let fault_secs = t0.elapsed().as_secs_f64();
    if fault_secs > secs {
        p.say(format!(
            "{name}: the faults outlasted the load ({fault_secs:.1} s > {secs:.1} s)"
        ));
    }
    let done = loading.await.context("the load task")?;
    p.say(format!("{name}: load over; letting the active runs settle"));
    let driven = active.finish().await;
    target.refresh_urls();

    let Checks {
        mut inv,
        mut failures,
        mut other,
        watched,
        mutations,
        writes,
        driver_errors,
    } = checks::active(
        &mut target,
        &client,
        &active,
        &driven,
        tells,
        watchers,
        deadline,
    )
    .await?;
    failures.splice(0..0, faulted.failures.iter().cloned());
    other += faulted.failures.len() as u64;
    let checked = steady::verify(&target, &client, &load, &[], deadline, p).await?;
    other += checked.failures.len() as u64;
    failures.extend(checked.failures.iter().cloned());
    inv.other_failures = other;
    let about = target.about.clone();
    target.stop().await?;

    // The report.
    let warm_ms = la.warmup_secs * 1e3;
    let (ops, errors) =
        report::summarise(&done.samples, args.duration_secs, |s| s.at_ms >= warm_ms);
    let timeline = report::timeline(&done.samples);
    let (series, error_dots) = plot::p99_windows(&done.samples, args.window_ms);
    let span = secs.max(fault_secs);
    let base = report::base(&args.out, name)?;
    let svg_path = base.with_extension("svg");
    let svg_name = svg_path
        .file_name()
        .map(|f| f.to_string_lossy().to_string())
        .unwrap_or_default();
    let title = format!(
        "baton-loadtest {name}: p99 per {} ms window, {} reads/s + {} writes/s",
        args.window_ms, la.reads, la.writes
    );
    std::fs::write(
        &svg_path,
        plot::svg(&title, &series, &error_dots, &markers, span),
    )
    .with_context(|| format!("cannot write {}", svg_path.display()))?;
    let sse = checks::sse_totals(&watched);
    let uncertain_resolved: u64 = driven.iter().map(|d| d.uncertain_resolved).sum();
    let turns: usize = driven.iter().map(|d| d.accepted.len()).sum();
    json["args"] = serde_json::to_value(args)?;
    json["fault"] = faulted.json;
    json["ops"] = serde_json::to_value(&ops)?;
    json["errors"] = serde_json::to_value(&errors)?;
    json["undrained"] = json!(done.undrained);
    json["max_schedule_lag_ms"] = json!(done.max_schedule_lag_ms);
    json["timeline"] = serde_json::to_value(&timeline)?;
    json["markers"] = json!(
        markers
            .iter()
            .map(|m| json!({"t": m.t, "label": m.label}))
            .collect::<Vec<_>>()
    );
    json["active"] = json!({
        "runs": driven.len(),
        "turns_accepted": turns,
        "uncertain_resolved": uncertain_resolved,
        "errors": driver_errors,
        "writes": writes,
    });
    json["mutations"] = serde_json::to_value(&mutations)?;
    json["sse"] = sse.clone();
    json["checked"] = serde_json::to_value(&checked)?;
    json["invariants"] = serde_json::to_value(&inv)?;
    json["failures"] = serde_json::to_value(&failures)?;
    json["plot"] = json!(svg_name);

    let mut md = format!(
        "# baton-loadtest {name}\n\n{} replicas ({}), {} active runs with a mutation per turn \
         and an SSE watcher each, under {} reads/s + {} writes/s for {} s after {} s of \
         warm-up; started {}\n\n",
        about.replicas,
        about.profile.unwrap_or("?"),
        args.runs,
        la.reads,
        la.writes,
        args.duration_secs,
        la.warmup_secs,
        json["started_at"].as_str().unwrap_or_default()
    );
    md.push_str(&faulted.md);
    md.push_str(&format!(
        "\n## Invariants\n\n| invariant | count |\n|---|---:|\n| SSE gaps | {} |\n\
         | SSE repeats | {} |\n| SSE versions missing | {} |\n| duplicated mutations | {} |\n\
         | duplicated writes | {} |\n| lost events | {} |\n| other failures | {} |\n\n",
        inv.sse_gaps,
        inv.sse_repeats,
        inv.sse_missing,
        inv.duplicated_mutations,
        inv.duplicated_writes,
        inv.lost_events,
        inv.other_failures
    ));
    md.push_str(&format!(
        "Mutations: {} receipts, {} calls at the tool endpoint, {} ok, {} held uncertain \
         ({} resolved by the harness). Active runs: {turns} messages accepted, {} lost, {} \
         stored twice. SSE: {} events to {} watchers, {} resumptions (longest blind {:.0} \
         ms), ends by kind {}.\n\n",
        mutations.intents,
        mutations.calls,
        mutations.ok,
        mutations.uncertain,
        uncertain_resolved,
        writes.lost,
        writes.duplicated,
        sse["events"],
        sse["watchers"],
        sse["resumes"],
        sse["longest_blind_ms"].as_f64().unwrap_or(0.0),
        sse["cuts"]
    ));
    md.push_str("## Load\n\n");
    md.push_str(&report::md_table(&[(String::new(), &ops)]));
    md.push('\n');
    md.push_str(&report::md_errors(&errors));
    md.push_str("\nClient-visible errors of the active runs' drivers (retried):\n");
    if driver_errors.is_empty() {
        md.push_str("none.\n");
    }
    for (k, n) in &driver_errors {
        md.push_str(&format!("- {k}: {n}\n"));
    }
    md.push('\n');
    md.push_str(&report::md_slowest(&timeline, 3));
    md.push_str(&format!("\n![latency over time]({svg_name})\n"));
    md.push_str(&steady::md_footer(
        &checked,
        done.max_schedule_lag_ms,
        done.undrained,
    ));
    for f in failures.iter().take(20) {
        md.push_str(&format!("- FAILURE: {f}\n"));
    }
    report::write_at(&base, &json, &md)?;
    println!("{md}");
    Ok(failures.len())
}
