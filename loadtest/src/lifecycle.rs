//! `lifecycle`: the whole life of a run, closed loop, the workload the performance
//! figures are stated for. Each client creates a run with a first message
//! (`POST /v1/runs`), the scripted agent answers at once and completes the run, and the
//! client reads the run's event stream (SSE) until `run.completed`; then it starts the
//! next. Measured per tier, one server at a time (`team`: one `baton` replica on a fresh
//! Postgres database and the local NATS; `embedded`: `baton serve` on a fresh SQLite data
//! directory), at each client count.
//!
//! Reported per measurement: completed runs per second, the create → `run.completed`
//! latency, and the CPU each process spent per completed run (the server, every
//! `postgres` and `nats-server` process, and their sum, the machine's cost of a run; read
//! from `/proc`, so on a shared machine other work on Postgres counts too). Every stream
//! must deliver the run's versions `1..n` in order, ending with `run.completed`: anything
//! else is an invariant failure.

use crate::append::{Tally, closed_loop};
use crate::client::{Client, run_id};
use crate::open_loop::Outcome;
use crate::report;
use crate::stats::{Percentiles, Progress};
use crate::target::{self, Target, TargetArgs};
use crate::watch::SeqCheck;
use anyhow::Context;
use baton_testkit::Serve;
use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde::Serialize;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The processes whose CPU makes up the machine's cost of a run.
const SERVER: &str = "server";
const SERVICES: [&str; 2] = ["postgres", "nats-server"];

/// Frames of a run's stream that are not its events.
const EPHEMERAL: [&str; 4] = ["message.delta", "reasoning.delta", "tool.progress", "error"];

#[derive(clap::Args, Debug, Clone, Serialize)]
pub struct LifecycleArgs {
    /// Tiers to measure, one after the other: `team`, `embedded`.
    #[arg(long, value_delimiter = ',', default_value = "team,embedded")]
    pub tiers: Vec<String>,
    /// Concurrent clients; a comma-separated list measures each level.
    #[arg(long, value_delimiter = ',', default_value = "1,8,32")]
    pub clients: Vec<usize>,
    /// Seconds per measurement (after a warm-up of a fifth of it, at most 1 s).
    #[arg(long, default_value_t = 10.0)]
    pub secs: f64,
    /// Bound on each request and on each run's stream, in ms.
    #[arg(long, default_value_t = 10_000)]
    pub request_timeout_ms: u64,
    /// The `baton` binary (default: target/release/baton, else target/debug/baton).
    #[arg(long)]
    #[serde(skip)]
    pub baton: Option<PathBuf>,
    /// `KEY=VALUE` for the server of every tier; repeatable.
    #[arg(long = "replica-env", value_parser = target::parse_env)]
    pub replica_env: Vec<(String, String)>,
    /// A short run for tests: 1 and 4 clients, 1 s per measurement.
    #[arg(long)]
    #[serde(skip)]
    pub smoke: bool,
    /// Where the JSON and Markdown reports go.
    #[arg(long, default_value = "target/loadtest")]
    #[serde(skip)]
    pub out: PathBuf,
}

/// One measurement: a tier at a client count.
#[derive(Debug, Clone, Serialize)]
pub struct Measured {
    pub tier: String,
    pub clients: usize,
    pub measured_secs: f64,
    /// Runs completed (their `run.completed` read) in the window.
    pub runs: u64,
    pub runs_per_sec: f64,
    pub errors: BTreeMap<String, u64>,
    /// Create → `run.completed` read by the client.
    pub latency: Percentiles,
    /// CPU milliseconds per completed run, by process (`server`, `postgres`,
    /// `nats-server`, `harness`) and `machine` (server + postgres + nats-server).
    pub cpu_ms_per_run: BTreeMap<String, f64>,
    /// The server's context switches per completed run (all its threads).
    pub server_switches_per_run: Option<f64>,
    pub cpu: Option<crate::host::Usage>,
}

/// The server of one tier.
enum Server {
    Team(Box<Target>),
    Embedded {
        serve: Serve,
        _dir: tempfile::TempDir,
    },
}

impl Server {
    async fn start(tier: &str, args: &LifecycleArgs) -> anyhow::Result<Self> {
        match tier {
            "team" => Ok(Server::Team(Box::new(
                Target::start(&TargetArgs {
                    baton: args.baton.clone(),
                    replicas: 1,
                    replica_env: args.replica_env.clone(),
                    url: Vec::new(),
                    key: None,
                })
                .await?,
            ))),
            "embedded" => {
                let bin = target::resolve_baton(args.baton.as_deref())?;
                let mut env = target::unlimited(&bin).await?;
                env.extend(args.replica_env.iter().cloned());
                let dir = tempfile::tempdir().context("a data directory")?;
                let data = dir.path().join("data");
                let data = data.to_str().context("a UTF-8 temporary path")?.to_string();
                let env: Vec<(&str, &str)> =
                    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                let serve = Serve::start(&bin, dir.path(), &["--data-dir", &data], &env);
                Ok(Server::Embedded { serve, _dir: dir })
            }
            other => anyhow::bail!("unknown tier {other:?} (team, embedded)"),
        }
    }

    fn base(&self) -> &str {
        match self {
            Server::Team(t) => t.url(0),
            Server::Embedded { serve, .. } => &serve.base,
        }
    }

    /// The embedded tier's API takes requests without a key.
    fn key(&self) -> &str {
        match self {
            Server::Team(t) => &t.key,
            Server::Embedded { .. } => "",
        }
    }

    fn pids(&self) -> Vec<(String, u32)> {
        let pid = match self {
            Server::Team(t) => t.pids().first().map(|(_, p)| *p),
            Server::Embedded { serve, .. } => Some(serve.pid()),
        };
        pid.map(|p| (SERVER.to_string(), p)).into_iter().collect()
    }

    async fn stop(self) -> anyhow::Result<()> {
        match self {
            Server::Team(t) => t.stop().await,
            Server::Embedded { .. } => Ok(()),
        }
    }
}

/// One run's life: create it with a message and read its stream to `run.completed`.
/// `Ok` once the stream delivered `1..n` in order ending with `run.completed`; a
/// stream that ended otherwise is an error outcome named by what went wrong.
async fn one_run(client: &Client, base: &str, agent: &str, bound: Duration) -> Outcome {
    let body = json!({"agent_id": agent, "message": "hi"});
    let (outcome, answer) = client.load(format!("{base}/v1/runs"), Some(body)).await;
    let Some(run) = answer.and_then(|a| run_id(&a).ok()) else {
        return match outcome {
            Outcome::Ok => Outcome::Error("no_run_id".into()),
            other => other,
        };
    };
    let res = match client.open_stream(base, run).await {
        Ok(res) => res,
        Err(outcome) => return outcome,
    };
    let mut stream = res.bytes_stream().eventsource();
    let mut seq = SeqCheck::default();
    let deadline = tokio::time::Instant::now() + bound;
    loop {
        let ev = match tokio::time::timeout_at(deadline, stream.next()).await {
            Err(_) => return Outcome::Error("stream_timeout".into()),
            Ok(None) => return Outcome::Error("stream_ended_early".into()),
            Ok(Some(Err(_))) => return Outcome::Error("stream_broken".into()),
            Ok(Some(Ok(ev))) => ev,
        };
        // Ephemeral frames carry no version of their own (a client keeps the last id for
        // them).
        if EPHEMERAL.contains(&ev.event.as_str()) {
            continue;
        }
        let Ok(version) = ev.id.parse::<i64>() else {
            continue;
        };
        seq.push(version);
        if seq.gaps + seq.repeats > 0 {
            return Outcome::Error("stream_out_of_order".into());
        }
        if ev.event == "run.completed" {
            return Outcome::Ok;
        }
    }
}

async fn measure(
    tier: &str,
    server: &Server,
    client: &Client,
    agent: &str,
    clients: usize,
    args: &LifecycleArgs,
    p: Progress,
) -> anyhow::Result<Measured> {
    let tally = Tally::new(args.secs, server.pids(), None);
    let label = format!("lifecycle {tier}, {clients} clients");
    p.say(format!("{label}: measuring {} s", args.secs));
    let bound = Duration::from_millis(args.request_timeout_ms);
    closed_loop(&label, "runs", clients, &tally, p, |_, tally| {
        let (c, base, agent) = (client.clone(), server.base().to_string(), agent.to_string());
        async move {
            while tally.running() {
                let began = Instant::now();
                let outcome = one_run(&c, &base, &agent, bound).await;
                tally.record(began, outcome);
            }
            anyhow::Ok(())
        }
    })
    .await?;
    let phase = tally.phase("api", "lifecycle", clients);
    let mut cpu_ms_per_run = BTreeMap::new();
    if let Some(cpu) = &phase.cpu
        && phase.ok > 0
    {
        let per_run = |cores: f64| cores * cpu.secs * 1000.0 / phase.ok as f64;
        let mut machine = 0.0;
        for (who, cores) in &cpu.cores {
            let ms = per_run(*cores);
            if who == SERVER || SERVICES.contains(&who.as_str()) {
                machine += ms;
            }
            cpu_ms_per_run.insert(who.clone(), ms);
        }
        cpu_ms_per_run.insert("machine".to_string(), machine);
    }
    let server_switches_per_run = phase
        .cpu
        .as_ref()
        .and_then(|cpu| cpu.context_switches.get(SERVER))
        .filter(|_| phase.ok > 0)
        .map(|n| *n as f64 / phase.ok as f64);
    Ok(Measured {
        tier: tier.to_string(),
        clients,
        measured_secs: phase.measured_secs,
        runs: phase.ok,
        runs_per_sec: phase.per_sec,
        errors: phase.errors,
        latency: phase.latency,
        cpu_ms_per_run,
        server_switches_per_run,
        cpu: phase.cpu,
    })
}

/// Runs the scenario; returns the number of invariant failures.
pub async fn run(mut args: LifecycleArgs) -> anyhow::Result<usize> {
    if args.smoke {
        (args.clients, args.secs) = (vec![1, 4], 1.0);
    }
    anyhow::ensure!(
        !args.clients.is_empty() && args.clients.iter().all(|c| *c > 0),
        "--clients must be positive"
    );
    anyhow::ensure!(args.secs > 0.0, "--secs must be positive");
    let p = Progress::new();
    let bin = target::resolve_baton(args.baton.as_deref())?;
    let mut json = report::header(
        "lifecycle",
        &json!({"baton": bin.display().to_string(), "profile": target::profile_of(&bin)}),
    )?;
    let mut measured = Vec::new();
    for tier in &args.tiers {
        let server = Server::start(tier, &args).await?;
        let client = Client::new(server.key(), Duration::from_millis(args.request_timeout_ms))?;
        let agent = client
            .expect(
                &format!("{}/v1/agents", server.base()),
                Some(
                    &json!({"name": "loadtest lifecycle", "provider": {"kind": "scripted",
                    "replies": [{"content": "done", "delay_ms": 0, "complete_run": true}]}}),
                ),
                201,
            )
            .await
            .context("creating the scripted agent")?["id"]
            .as_str()
            .context("the agent has no id")?
            .to_string();
        // One run first, so what a process reads once is read before measuring.
        let warm = one_run(&client, server.base(), &agent, Duration::from_secs(30)).await;
        anyhow::ensure!(
            warm == Outcome::Ok,
            "{tier}: the first run failed: {warm:?}"
        );
        for &clients in &args.clients {
            let m = measure(tier, &server, &client, &agent, clients, &args, p).await?;
            p.say(format!(
                "lifecycle {tier}, {clients} clients: {:.0} runs/s, p50 {:.2} ms, \
                 machine {:.2} ms CPU per run",
                m.runs_per_sec,
                m.latency.p50_ms,
                m.cpu_ms_per_run.get("machine").copied().unwrap_or(f64::NAN)
            ));
            measured.push(m);
        }
        server.stop().await?;
    }
    let failures: Vec<String> = measured
        .iter()
        .filter(|m| m.runs == 0 || !m.errors.is_empty())
        .map(|m| {
            format!(
                "{} at {} clients: {} runs completed, errors {:?}",
                m.tier, m.clients, m.runs, m.errors
            )
        })
        .collect();
    json["args"] = serde_json::to_value(&args)?;
    json["measured"] = serde_json::to_value(&measured)?;
    json["failures"] = serde_json::to_value(&failures)?;
    let md = markdown(&json, &measured, &failures);
    report::write(&args.out, "lifecycle", &json, &md)?;
    println!("{md}");
    Ok(failures.len())
}

fn markdown(json: &serde_json::Value, measured: &[Measured], failures: &[String]) -> String {
    let ms = |m: &Measured, who: &str| {
        m.cpu_ms_per_run
            .get(who)
            .map_or("-".to_string(), |v| format!("{v:.2}"))
    };
    let mut md = format!(
        "# baton-loadtest lifecycle\n\nClosed loop: create a run with a message, the agent \
         completes it at once, read its stream to `run.completed`. `{}` ({} build), {} \
         cores, started {}\n\n\
         | tier | clients | runs/s | p50 ms | p90 ms | p99 ms | CPU ms/run: machine | \
         server | postgres | nats | harness | server switches/run | errors |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        json["target"]["baton"].as_str().unwrap_or_default(),
        json["target"]["profile"].as_str().unwrap_or_default(),
        json["cores"],
        json["started_at"].as_str().unwrap_or_default(),
    );
    for m in measured {
        md.push_str(&format!(
            "| {} | {} | {:.0} | {:.2} | {:.2} | {:.2} | {} | {} | {} | {} | {} | {} | {} |\n",
            m.tier,
            m.clients,
            m.runs_per_sec,
            m.latency.p50_ms,
            m.latency.p90_ms,
            m.latency.p99_ms,
            ms(m, "machine"),
            ms(m, SERVER),
            ms(m, "postgres"),
            ms(m, "nats-server"),
            ms(m, "harness"),
            m.server_switches_per_run
                .map_or("-".to_string(), |n| format!("{n:.1}")),
            m.errors.values().sum::<u64>(),
        ));
    }
    md.push_str(&crate::host::md_list(measured.iter().map(|m| {
        (format!("{}, {} clients", m.tier, m.clients), m.cpu.as_ref())
    })));
    md.push_str(&format!("\nInvariants: {} failures.\n", failures.len()));
    for f in failures {
        md.push_str(&format!("- FAILURE: {f}\n"));
    }
    md
}
