//! The `fanout` measurement on a [`Target`]: R runs of a scripted agent with instant
//! replies; S subscribers placed round-robin over the runs and then over the chosen
//! replicas (so each run has subscribers on every replica); once all are open (the
//! replicas' `baton_sse_subscribers` says so) the replicas' memory is read again; then
//! messages are posted on an open-loop timetable, each to the next run, through the
//! chosen replicas in turn, every post starting a turn (the message's append on the
//! replica that took the post, the turn's on the run's owner). At the end every run
//! settles, every subscriber must hold exactly its run's versions `1..n`, and every run
//! passes the store invariants. Also returns the server-side histograms over the window
//! and the bus hop measured raw ([`super::raw`]).

use super::raw::{self, Probe};
use super::server::{self, Buckets, Scrape};
use super::subscriber::{self, Got, Seat};
use super::tally::{self, Checks, Memory, Tally};
use crate::client::Client;
use crate::host;
use crate::open_loop::{self, Class};
use crate::report::{self, OpReport};
use crate::stats::{Percentiles, Progress};
use crate::target::Target;
use anyhow::Context;
use futures::StreamExt;
use serde::Serialize;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

/// The most replies a scripted agent may have (the API's limit).
const MAX_SCRIPT_REPLIES: u64 = 1000;

/// Setup requests (creating runs, checks) at once.
const SETUP_CONCURRENCY: usize = 16;

/// Subscribers opened at once, batch after batch.
const OPEN_BATCH: usize = 64;

/// How often the subscriber gauge is polled while subscribers connect.
const GAUGE_POLL: Duration = Duration::from_millis(100);

/// The raw probe's rate while the load runs (a light, constant load of its own).
const PROBE_UNDER_LOAD_RATE: f64 = 50.0;

/// What to run.
#[derive(Debug, Clone)]
pub struct Plan {
    pub runs: usize,
    pub subscribers: usize,
    /// Replica indexes subscribers connect to; every replica when empty.
    pub subscribe_on: Vec<usize>,
    /// Replica indexes posts go to; every replica when empty.
    pub write_on: Vec<usize>,
    /// Posts per second.
    pub rate: f64,
    pub warmup: Duration,
    pub duration: Duration,
    pub request_timeout: Duration,
    pub max_in_flight: usize,
    /// Bound on each setup phase, on the runs settling and on the subscribers finishing.
    pub deadline: Duration,
    /// A subscriber's stream silent this long is reopened.
    pub idle: Duration,
    /// NATS for the raw probes; none skips them.
    pub nats_url: Option<String>,
    /// Length of the quiet raw probe, in seconds; 0 skips it.
    pub raw_secs: f64,
    /// Its rate; `None`: the rate events were appended at during the window.
    pub raw_rate: Option<f64>,
}

/// What was measured.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub runs: usize,
    pub subscribers: usize,
    /// Subscribers per replica index.
    pub subscribers_by_replica: Vec<usize>,
    pub rate_per_sec: f64,
    pub warmup_secs: f64,
    pub duration_secs: f64,
    pub posts: OpReport,
    pub post_errors: BTreeMap<String, u64>,
    /// Durable events appended on all replicas over the window (`/metrics`).
    pub events_appended: u64,
    pub events_per_sec: f64,
    /// Recorded -> received, every live event at every subscriber.
    pub delivery: Percentiles,
    /// Of which written by another replica than the subscriber's / by its own.
    pub cross_replica: Percentiles,
    pub same_replica: Percentiles,
    pub checks: Checks,
    /// Per replica with subscribers; empty when the replicas were given by URL.
    pub memory: Vec<Memory>,
    /// Over every replica with subscribers; `None` without `/proc` readings.
    pub bytes_per_connection: Option<f64>,
    /// `baton_sse_closed_slow_total` over the whole measurement, all replicas.
    pub closed_slow: u64,
    /// `baton_sse_subscribers` over all replicas once every subscriber was open.
    pub subscribers_gauge: f64,
    /// The append transaction alone (`baton_event_append_duration_seconds`).
    pub server_append: Option<Buckets>,
    /// Recorded -> the hub's dispatch (`baton_bus_lag_seconds`): the append, the publish
    /// queue, NATS and decoding, before the hub hands the event to subscribers.
    pub server_bus_lag: Option<Buckets>,
    /// The bus hop alone on a quiet machine, after the load.
    pub raw_nats_quiet: Option<Probe>,
    /// The same probe at 50 messages/s while the load ran.
    pub raw_nats_under_load: Option<Probe>,
    pub cpu: host::Usage,
    pub failures: Vec<String>,
}

/// Runs `plan` on `target`.
pub async fn run(target: &Target, plan: &Plan, p: Progress) -> anyhow::Result<Outcome> {
    anyhow::ensure!(plan.runs > 0, "--runs must be at least 1");
    anyhow::ensure!(
        plan.subscribers >= plan.runs,
        "--subscribers must be at least --runs"
    );
    anyhow::ensure!(plan.rate > 0.0, "--rate must be positive");
    let n = target.urls.len();
    let pick = |v: &[usize]| -> anyhow::Result<Vec<usize>> {
        let v = if v.is_empty() {
            (0..n).collect()
        } else {
            v.to_vec()
        };
        anyhow::ensure!(v.iter().all(|i| *i < n), "no replica {v:?} among {n}");
        Ok(v)
    };
    let (sub_on, write_on) = (pick(&plan.subscribe_on)?, pick(&plan.write_on)?);
    let client = Client::new(&target.key, plan.request_timeout)?;
    let http = baton_testkit::http_client_builder()
        .tcp_nodelay(true)
        .build()
        .context("cannot build the HTTP client")?;
    let mut ids = Vec::with_capacity(n);
    for base in &target.urls {
        let ready = client.expect(&format!("{base}/readyz"), None, 200).await?;
        ids.push(
            ready["replica"]
                .as_str()
                .context("no replica in /readyz")?
                .to_string(),
        );
    }

    let total = plan.warmup + plan.duration;
    let turns = (plan.rate * total.as_secs_f64() / plan.runs as f64).ceil() as u64 + 3;
    anyhow::ensure!(
        turns <= MAX_SCRIPT_REPLIES,
        "{turns} turns per run exceed the {MAX_SCRIPT_REPLIES} replies of a scripted agent: \
         raise --runs or lower --rate"
    );
    let agent = client
        .scripted_agent(
            &target.urls[write_on[0]],
            "loadtest fanout",
            &vec![0; turns as usize],
        )
        .await?;
    let mut creating = futures::stream::iter(0..plan.runs)
        .map(|i| client.create_run(&target.urls[write_on[i % write_on.len()]], &agent, None))
        .buffered(SETUP_CONCURRENCY);
    let mut runs = Vec::with_capacity(plan.runs);
    while let Some(r) = tokio::time::timeout(plan.deadline, creating.next())
        .await
        .context("creating the runs took too long")?
    {
        runs.push(r?);
    }
    drop(creating);
    p.say(format!(
        "{} runs created (agent with {turns} instant replies)",
        runs.len()
    ));

    // Memory and counters before any subscriber.
    let pids = target.pids();
    let rss = |i: usize| pids.get(i).and_then(|(_, pid)| server::rss_bytes(*pid));
    let rss_before: Vec<Option<u64>> = (0..n).map(rss).collect();
    let scrape_before = server::scrape_all(&http, &target.urls).await?;

    // The subscribers, batch by batch.
    let (opened_tx, mut opened) = mpsc::unbounded_channel();
    let measure_from = Arc::new(OnceLock::new());
    let setup = subscriber::Setup {
        http: http.clone(),
        key: target.key.clone(),
        idle: plan.idle,
        deadline: Instant::now() + total + 3 * plan.deadline,
        measure_from: measure_from.clone(),
        opened: opened_tx,
    };
    let lasts: Vec<watch::Sender<Option<i64>>> =
        runs.iter().map(|_| watch::channel(None).0).collect();
    let mut by_replica = vec![0; n];
    let mut subs = Vec::with_capacity(plan.subscribers);
    for k in 0..plan.subscribers {
        let replica = sub_on[(k / plan.runs) % sub_on.len()];
        by_replica[replica] += 1;
        let seat = Seat {
            run: runs[k % plan.runs],
            replica,
            base: target.urls[replica].clone(),
            replica_id: ids[replica].clone(),
        };
        subs.push(subscriber::spawn(
            setup.clone(),
            seat,
            lasts[k % plan.runs].subscribe(),
        ));
        if (k + 1) % OPEN_BATCH == 0 || k + 1 == plan.subscribers {
            let want = (k % OPEN_BATCH) + 1;
            for _ in 0..want {
                tokio::time::timeout(plan.deadline, opened.recv())
                    .await
                    .context("opening the subscribers' streams took too long")?;
            }
            p.say(format!("{}/{} subscribers open", k + 1, plan.subscribers));
        }
    }
    drop(setup);
    // Open on the client is not yet registered on the server: wait for the gauge.
    let expected: f64 = sub_on
        .iter()
        .map(|i| scrape_before[*i].value("baton_sse_subscribers"))
        .sum::<f64>()
        + plan.subscribers as f64;
    let until = Instant::now() + plan.deadline;
    let gauge = loop {
        let now = server::scrape_all(&http, &target.urls).await?;
        let g: f64 = now.iter().map(|s| s.value("baton_sse_subscribers")).sum();
        if g >= expected || Instant::now() > until {
            break g;
        }
        tokio::time::sleep(GAUGE_POLL).await;
    };
    let rss_connected: Vec<Option<u64>> = (0..n).map(rss).collect();
    p.say(format!(
        "subscribers registered: gauge {gauge} (expected {expected}); posting {} messages/s \
         for {:.0} s + {:.0} s warm-up",
        plan.rate,
        plan.duration.as_secs_f64(),
        plan.warmup.as_secs_f64()
    ));

    // The load, with a light raw probe alongside.
    let started = Instant::now();
    let window_wall = open_loop::wall_at(started + plan.warmup);
    let _ = measure_from.set(window_wall);
    let probe_under_load = plan.nats_url.clone().map(|url| {
        let secs = plan.duration.as_secs_f64();
        let warmup = plan.warmup;
        tokio::spawn(async move {
            tokio::time::sleep(warmup).await;
            raw::probe(&url, PROBE_UNDER_LOAD_RATE, secs, 1024).await
        })
    });
    // The window opens after the warm-up: CPU and counters from there.
    let opener = {
        let (http, urls) = (http.clone(), target.urls.clone());
        let at = started + plan.warmup;
        tokio::spawn(async move {
            tokio::time::sleep_until(at.into()).await;
            let cpu = tokio::task::spawn_blocking(host::snapshot).await.ok();
            let scrape = server::scrape_all(&http, &urls).await.ok();
            (cpu, scrape)
        })
    };
    let timetable = open_loop::Plan {
        classes: vec![Class { per_sec: plan.rate }],
        duration: total,
        max_in_flight: plan.max_in_flight,
        drain: plan.request_timeout + Duration::from_secs(2),
    };
    let done = {
        let (urls, runs, c) = (target.urls.clone(), runs.clone(), client.clone());
        let (nr, nw) = (runs.len() as u64, write_on.len() as u64);
        open_loop::drive(&timetable, started, "fanout", p, move |slot| {
            let run = runs[(slot.seq % nr) as usize];
            // Each sweep over the runs moves on by one replica.
            let w = write_on[((slot.seq + slot.seq / nr) % nw) as usize];
            let url = format!("{}/v1/runs/{run}/messages", urls[w]);
            let body = json!({"content": format!("m{}", slot.seq)});
            let c = c.clone();
            (
                "post_message",
                async move { c.load(url, Some(body)).await.0 },
            )
        })
        .await
    };
    let scrape_end = server::scrape_all(&http, &target.urls).await?;
    let (cpu, scrape_window) = opener.await.context("opening the window")?;
    let cpu = cpu.map(|s| host::since(s, &pids)).unwrap_or_default();
    let window_secs = plan.duration.as_secs_f64();
    let warm_ms = plan.warmup.as_secs_f64() * 1e3;
    let (ops, post_errors) = report::summarise(&done.samples, window_secs, |s| s.at_ms >= warm_ms);
    let posts = ops.get("post_message").cloned().unwrap_or_default();
    let probe_under_load = match probe_under_load {
        Some(t) => Some(t.await.context("the raw probe under load")??),
        None => None,
    };

    // Settle, then tell every subscriber its run's last version.
    p.say("waiting for the runs to settle");
    let settled = client
        .wait_settled(&target.urls, &runs, plan.deadline)
        .await?;
    let mut failures = Vec::new();
    for (i, s) in settled.iter().enumerate() {
        match s["version"].as_i64() {
            Some(v) => {
                let _ = lasts[i].send(Some(v));
            }
            None => failures.push(format!("{}: no version in {s}", runs[i])),
        }
        if s["status"] == "failed" {
            failures.push(format!("{}: a turn failed", runs[i]));
        }
    }
    p.say(format!(
        "waiting for {} subscribers to reach their run's end",
        subs.len()
    ));
    let mut got: Vec<Got> = Vec::with_capacity(subs.len());
    for s in subs {
        got.push(s.await.context("a subscriber task")?);
    }
    drop(lasts);
    let rss_after: Vec<Option<u64>> = (0..n).map(rss).collect();
    let scrape_after = server::scrape_all(&http, &target.urls).await?;

    // Integrity: each subscriber holds exactly its run's versions; each run's stream is whole.
    let finals: BTreeMap<uuid::Uuid, i64> = runs
        .iter()
        .zip(&settled)
        .filter_map(|(r, s)| Some((*r, s["version"].as_i64()?)))
        .collect();
    let Tally {
        mut checks,
        all,
        cross,
        same,
        data_bytes,
        failures: broken,
    } = tally::subscribers(&got, &finals);
    failures.extend(broken);
    let checked = futures::stream::iter(runs.iter())
        .map(|r| target.check_run(&client, *r))
        .buffer_unordered(SETUP_CONCURRENCY)
        .collect::<Vec<_>>()
        .await;
    checks.runs_checked = checked.len();
    failures.extend(
        checked
            .into_iter()
            .filter_map(|c| c.err().map(|e| format!("{e:#}"))),
    );

    // Server figures over the window; memory per connection.
    let window = scrape_window.map_or_else(Scrape::default, |w| server::diff(&scrape_end, &w));
    let closed_slow =
        server::diff(&scrape_after, &scrape_before).value("baton_sse_closed_slow_total");
    let events_appended = window.value("baton_events_appended_total").max(0.0) as u64;
    let events_per_sec = events_appended as f64 / window_secs;
    let memory = tally::memory(&by_replica, &rss_before, &rss_connected, &rss_after);
    let bytes_per_connection = tally::per_connection(&memory);

    let raw_nats_quiet = match (&plan.nats_url, plan.raw_secs > 0.0) {
        (Some(url), true) => {
            let rate = plan.raw_rate.unwrap_or(events_per_sec).max(1.0);
            let payload = data_bytes
                .checked_div(checks.events_received)
                .unwrap_or(1024) as usize;
            p.say(format!(
                "raw NATS probe: {rate:.0} messages/s of {payload} bytes for {} s",
                plan.raw_secs
            ));
            Some(raw::probe(url, rate, plan.raw_secs, payload).await?)
        }
        _ => None,
    };
    Ok(Outcome {
        runs: plan.runs,
        subscribers: plan.subscribers,
        subscribers_by_replica: by_replica,
        rate_per_sec: plan.rate,
        warmup_secs: plan.warmup.as_secs_f64(),
        duration_secs: window_secs,
        posts,
        post_errors,
        events_appended,
        events_per_sec,
        delivery: all.percentiles(),
        cross_replica: cross.percentiles(),
        same_replica: same.percentiles(),
        checks,
        memory,
        bytes_per_connection,
        closed_slow: closed_slow.max(0.0) as u64,
        subscribers_gauge: gauge,
        server_append: window.histogram("baton_event_append_duration_seconds"),
        server_bus_lag: window.histogram("baton_bus_lag_seconds"),
        raw_nats_quiet,
        raw_nats_under_load: probe_under_load,
        cpu,
        failures,
    })
}
