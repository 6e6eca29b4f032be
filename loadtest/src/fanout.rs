//! `fanout`: S SSE subscribers spread over the replicas and over R runs (several per run,
//! on every replica) while messages are posted on an open-loop timetable, each starting
//! a turn. Reports the delivery latency of every live event at every subscriber
//! (receive time minus the envelope's `recorded_at`, which is stamped just before the
//! append transaction: the figure includes the commit), overall, written by another
//! replica and by the subscriber's own; the replicas' memory per open stream; the
//! subscribers the replicas closed for falling behind; and, to set the figure against,
//! the server's own histograms of the append and of recorded -> hub dispatch, and the bus
//! hop measured raw in the same run ([`raw`]). Any gap, repeat or missing version at a
//! subscriber, or a run failing the store invariants, exits non-zero. `cluster --only
//! sse` runs the same measurement with its clients on one replica and the posts on the
//! other.

mod measure;
mod raw;
mod server;
mod subscriber;
mod tally;

pub use measure::{Outcome, Plan, run as measure};

use crate::report;
use crate::stats::{Percentiles, Progress};
use crate::target::{Target, TargetArgs};
use anyhow::Context;
use baton_testkit::TestNats;
use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::Args, Debug, Clone)]
pub struct FanoutArgs {
    /// Runs the subscribers watch and the posts go to.
    #[arg(long, default_value_t = 20)]
    pub runs: usize,
    /// SSE subscribers, placed round-robin over the runs, then over the replicas.
    #[arg(long, default_value_t = 200)]
    pub subscribers: usize,
    /// Messages posted per second (each starts a turn: several events).
    #[arg(long, default_value_t = 20.0)]
    pub rate: f64,
    /// Seconds of measured load (after the warm-up).
    #[arg(long, default_value_t = 30.0)]
    pub duration_secs: f64,
    /// Seconds of load before the measured window (same rate; not in the figures).
    #[arg(long, default_value_t = 2.0)]
    pub warmup_secs: f64,
    /// Bound on each post.
    #[arg(long, default_value_t = 10_000)]
    pub request_timeout_ms: u64,
    /// Cap on posts in flight; a post due beyond it counts as `not_started`.
    #[arg(long, default_value_t = 256)]
    pub max_in_flight: usize,
    /// Bound on each setup phase, on the runs settling and on the subscribers finishing.
    #[arg(long, default_value_t = 120)]
    pub deadline_secs: u64,
    /// A subscriber's stream silent this long is reopened with `Last-Event-ID`.
    #[arg(long, default_value_t = 60_000)]
    pub idle_ms: u64,
    /// NATS for the raw bus-hop reference (default: the replicas' NATS); `none` skips it.
    #[arg(long)]
    pub nats_url: Option<String>,
    /// Spawned replicas use the shared NATS (BATON_TEST_NATS_URL, else 127.0.0.1:4222)
    /// instead of a private `nats-server` the harness starts, whose only traffic is this
    /// scenario's (every replica takes every event of the server it is on).
    #[arg(long)]
    pub shared_nats: bool,
    /// Seconds of the quiet raw probe after the load; 0 skips it.
    #[arg(long, default_value_t = 5.0)]
    pub raw_secs: f64,
    /// Messages/s of the quiet raw probe (default: the event rate of the window).
    #[arg(long)]
    pub raw_rate: Option<f64>,
    /// A short run for tests: 4 runs, 16 subscribers, 8 posts/s for 3 s.
    #[arg(long)]
    pub smoke: bool,
    #[command(flatten)]
    pub target: TargetArgs,
    /// Where the JSON and Markdown reports go.
    #[arg(long, default_value = "target/loadtest")]
    pub out: PathBuf,
}

impl FanoutArgs {
    /// The plan; `bus` is the NATS the replicas use.
    fn plan(&self, bus: String) -> Plan {
        let nats_url = match self.nats_url.as_deref() {
            Some("none") => None,
            Some(u) => Some(u.to_string()),
            None => Some(bus),
        };
        Plan {
            runs: self.runs,
            subscribers: self.subscribers,
            subscribe_on: Vec::new(),
            write_on: Vec::new(),
            rate: self.rate,
            warmup: Duration::from_secs_f64(self.warmup_secs),
            duration: Duration::from_secs_f64(self.duration_secs),
            request_timeout: Duration::from_millis(self.request_timeout_ms),
            max_in_flight: self.max_in_flight,
            deadline: Duration::from_secs(self.deadline_secs),
            idle: Duration::from_millis(self.idle_ms),
            nats_url,
            raw_secs: self.raw_secs,
            raw_rate: self.raw_rate,
        }
    }
}

/// Runs the scenario, writes the reports and returns the number of failures.
pub async fn run(mut args: FanoutArgs) -> anyhow::Result<usize> {
    if args.smoke {
        args.runs = 4;
        args.subscribers = 16;
        args.rate = 8.0;
        args.duration_secs = 3.0;
        args.warmup_secs = 0.5;
        args.raw_secs = 1.0;
    }
    anyhow::ensure!(
        args.duration_secs > 0.0 && args.warmup_secs >= 0.0,
        "--duration-secs must be positive"
    );
    let p = Progress::new();
    let private = if args.target.url.is_empty() && !args.shared_nats {
        let nats = TestNats::start()
            .await
            .context("starting a private nats-server")?;
        args.target
            .replica_env
            .push(("BATON_BUS__NATS_URL".to_string(), nats.url()));
        Some(nats)
    } else {
        None
    };
    let bus = private
        .as_ref()
        .map_or_else(baton_testkit::replicas::nats_url, TestNats::url);
    let plan = args.plan(bus);
    p.say(format!(
        "fanout: {} subscribers on {} runs, {} posts/s for {} s",
        plan.subscribers, plan.runs, plan.rate, args.duration_secs
    ));
    let target = Target::start(&args.target).await?;
    let mut json = report::header("fanout", &target.about)?;
    json["nats"] = serde_json::json!(if private.is_some() {
        "private"
    } else {
        "shared"
    });
    let measured = measure(&target, &plan, p).await;
    target.stop().await?;
    drop(private);
    let o = measured?;
    let md = md(&o, &json);
    json["plan"] = serde_json::json!({
        "runs": plan.runs, "subscribers": plan.subscribers, "rate_per_sec": plan.rate,
        "warmup_secs": args.warmup_secs, "duration_secs": args.duration_secs,
        "raw_secs": plan.raw_secs, "smoke": args.smoke,
    });
    json["outcome"] = serde_json::to_value(&o)?;
    json["failures"] = serde_json::to_value(&o.failures)?;
    report::write(&args.out, "fanout", &json, &md)?;
    println!("{md}");
    Ok(o.failures.len())
}

/// The Markdown header matching [`md_row`].
pub const MD_HEADER: &str = "| measure | samples | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms |\n\
                             |---|---:|---:|---:|---:|---:|---:|";

/// One Markdown table row of `l`.
pub fn md_row(what: &str, l: &Percentiles) -> String {
    format!(
        "| {what} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
        l.count, l.p50_ms, l.p90_ms, l.p99_ms, l.p999_ms, l.max_ms
    )
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.1}x", a / b)
    } else {
        "-".to_string()
    }
}

fn md(o: &Outcome, header: &serde_json::Value) -> String {
    let mut md = format!(
        "# baton-loadtest fanout\n\n{} cores, target {}, NATS {}, started {}\n\n\
         {} subscribers ({:?} by replica) on {} runs; {} posts/s for {:.0} s after {:.0} s \
         warm-up: {} posts ok ({:.1}/s), {} busy, {} errors; {} events appended \
         ({:.0}/s); {} events received by subscribers.\n\n{MD_HEADER}\n",
        header["cores"],
        header["target"],
        header["nats"],
        header["started_at"].as_str().unwrap_or_default(),
        o.subscribers,
        o.subscribers_by_replica,
        o.runs,
        o.rate_per_sec,
        o.duration_secs,
        o.warmup_secs,
        o.posts.ok,
        o.posts.ok_per_sec,
        o.posts.busy,
        o.posts.errors,
        o.events_appended,
        o.events_per_sec,
        o.checks.events_received,
    );
    for (what, l) in [
        ("delivery: recorded -> subscriber (all)", &o.delivery),
        ("delivery, written by another replica", &o.cross_replica),
        (
            "delivery, written by the subscriber's replica",
            &o.same_replica,
        ),
        (
            "post_message (HTTP, from its intended start)",
            &o.posts.latency,
        ),
    ] {
        md.push_str(&md_row(what, l));
        md.push('\n');
    }
    for (what, probe) in [
        ("raw NATS publish -> subscriber, quiet", &o.raw_nats_quiet),
        (
            "raw NATS publish -> subscriber, under the load",
            &o.raw_nats_under_load,
        ),
    ] {
        if let Some(r) = probe {
            md.push_str(&md_row(
                &format!("{what} ({:.0}/s, {} B)", r.rate_per_sec, r.payload_bytes),
                &r.latency,
            ));
            md.push('\n');
        }
    }
    md.push('\n');
    if let Some(r) = &o.raw_nats_quiet {
        md.push_str(&format!(
            "- Ratio to the raw bus hop (quiet): delivery p50 {}, p99 {}.\n",
            ratio(o.delivery.p50_ms, r.latency.p50_ms),
            ratio(o.delivery.p99_ms, r.latency.p99_ms)
        ));
    }
    if let Some(b) = &o.server_append {
        md.push_str(&format!("- Server, append transaction: {}.\n", b.md()));
    }
    if let Some(b) = &o.server_bus_lag {
        md.push_str(&format!(
            "- Server, recorded -> hub dispatch: {}.\n",
            b.md()
        ));
    }
    match o.bytes_per_connection {
        Some(b) => md.push_str(&format!(
            "- Memory per open stream: {:.1} KiB (RSS growth as the subscribers connected; {}).\n",
            b / 1024.0,
            o.memory
                .iter()
                .map(|m| format!(
                    "{} {} streams, {:.1} -> {:.1} MiB, {:.1} MiB after the load",
                    m.replica,
                    m.connections,
                    m.rss_before_bytes as f64 / 1048576.0,
                    m.rss_connected_bytes as f64 / 1048576.0,
                    m.rss_after_load_bytes as f64 / 1048576.0
                ))
                .collect::<Vec<_>>()
                .join("; ")
        )),
        None => md.push_str("- Memory per open stream: not measured (replicas given by URL).\n"),
    }
    let c = &o.checks;
    md.push_str(&format!(
        "- Closed slow (`baton_sse_closed_slow_total`): {}; subscriber gauge once open {}.\n\
         - Subscribers: {} events received, {} gaps, {} repeats, {} missing, {} malformed, \
         {} reopened streams, {} unfinished, stream ends {:?}; {} runs checked.\n- {}\n",
        o.closed_slow,
        o.subscribers_gauge,
        c.events_received,
        c.gaps,
        c.repeats,
        c.missing,
        c.malformed,
        c.reopens,
        c.unfinished,
        c.cuts,
        c.runs_checked,
        o.cpu.md()
    ));
    md.push_str(&report::md_errors(&o.post_errors));
    for f in o.failures.iter().take(20) {
        md.push_str(&format!("- FAILURE: {f}\n"));
    }
    md
}
