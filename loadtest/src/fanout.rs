//! SSE delivery latency across replicas: SSE clients on replica B watch runs whose
//! messages are posted on replica A; for every event written by a replica other than B
//! (engine events of the owner, or the command events A appended) the latency is the
//! client's receive time minus the envelope's `recorded_at`. Each client must see the
//! versions without gap or duplicate, and every run's stream passes the invariants.

use crate::stats::{Progress, Summary};
use anyhow::{Context, bail};
use baton_testkit::api::sse;
use baton_testkit::{Api, Cluster};
use chrono::{DateTime, Utc};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// What to run.
#[derive(Debug, Clone)]
pub struct Plan {
    pub runs: usize,
    pub messages: usize,
    pub deadline: Duration,
}

/// What was measured.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub replicas: usize,
    pub runs: usize,
    pub messages_per_run: usize,
    /// Events by writer relative to the client's replica B: `other` or `same`.
    pub events_by_writer: BTreeMap<String, usize>,
    /// Commit on another replica -> event at the client on B.
    pub cross_replica: Summary,
    /// Events written by B itself, for comparison.
    pub same_replica: Summary,
    pub failures: Vec<String>,
}

/// One client's result: (version, writer name, latency ms) of each live event.
type Seen = Vec<(i64, Option<String>, f64)>;

/// Runs the plan against `bin` with two replicas: A = replica-0, B = replica-1.
pub async fn run(bin: &Path, plan: &Plan, p: Progress) -> anyhow::Result<Outcome> {
    p.say(format!(
        "sse fan-out: 2 replicas, {} runs x {} messages",
        plan.runs, plan.messages
    ));
    let cluster = Cluster::start(bin, 2)
        .await
        .context("starting the cluster")?;
    let (_, key) = cluster.create_tenant("loadtest").await?;
    let api = |i: usize| {
        Api::new(cluster.base_url(i), Some(key.clone()))
            .with_timeout(Duration::from_secs(30))
            .with_polling(Duration::from_millis(20), Duration::from_millis(5))
    };
    let (a, b) = (api(0), api(1));
    let replies: Vec<(&str, u64, bool)> = (0..plan.messages).map(|_| ("ok", 0, false)).collect();
    let agent = a.agent(&replies).await;
    let mut tasks = Vec::new();
    let mut runs = Vec::new();
    for _ in 0..plan.runs {
        let run = a.run(&agent, None).await;
        runs.push(run.parse::<uuid::Uuid>().context("run id")?);
        let (a, b, messages, deadline) = (a.clone(), b.clone(), plan.messages, plan.deadline);
        tasks.push(tokio::spawn(async move {
            let mut stream = b.sse(&run, None).await.context("the run streams")?;
            let subscribed = Utc::now();
            let posting = tokio::spawn({
                let run = run.clone();
                async move {
                    for j in 0..messages {
                        a.message_when_idle(&run, &format!("m{j}")).await;
                    }
                }
            });
            let read = watch(&mut stream, subscribed, messages);
            let seen = tokio::time::timeout(deadline, read)
                .await
                .with_context(|| format!("{run}: not every turn streamed within {deadline:?}"))?;
            posting.await.context("posting messages")?;
            seen
        }));
    }
    p.say(format!(
        "sse fan-out: {} clients on replica-1 reading",
        runs.len()
    ));
    let mut failures = Vec::new();
    let mut by_writer: BTreeMap<String, usize> = BTreeMap::new();
    let (mut cross, mut same) = (Vec::new(), Vec::new());
    for (k, task) in tasks.into_iter().enumerate() {
        match task.await.context("client task")? {
            Ok(seen) => {
                for (_, writer, ms) in seen.iter().filter(|(_, _, ms)| !ms.is_nan()) {
                    let local = writer.as_deref() == Some("replica-1");
                    let key = if local { "same" } else { "other" };
                    *by_writer.entry(key.to_string()).or_default() += 1;
                    if local {
                        same.push(*ms)
                    } else {
                        cross.push(*ms)
                    }
                }
                let versions: Vec<i64> = seen.iter().map(|(v, _, _)| *v).collect();
                if versions.windows(2).any(|w| w[1] != w[0] + 1) {
                    failures.push(format!("{}: client saw gaps or duplicates", runs[k]));
                }
            }
            Err(e) => failures.push(format!("{e:#}")),
        }
        if (k + 1) % 10 == 0 {
            p.say(format!(
                "sse fan-out: {}/{} clients done",
                k + 1,
                runs.len()
            ));
        }
    }
    for run in &runs {
        if let Err(e) = cluster.check_run_invariants(*run).await {
            failures.push(format!("{e:#}"));
        }
    }
    cluster.stop().await?;
    Ok(Outcome {
        replicas: 2,
        runs: plan.runs,
        messages_per_run: plan.messages,
        events_by_writer: by_writer,
        cross_replica: Summary::of(&cross),
        same_replica: Summary::of(&same),
        failures,
    })
}

/// Reads the stream until `turns` turns completed; events recorded before `subscribed`
/// (the replay) are kept for the gap check but given no latency.
async fn watch(
    stream: &mut sse::Stream,
    subscribed: DateTime<Utc>,
    turns: usize,
) -> anyhow::Result<Seen> {
    let mut seen = Vec::new();
    let mut completed = 0;
    while completed < turns {
        let Some(frame) = sse::next_frame_or_cut(stream).await else {
            bail!("stream ended after {completed} of {turns} turns");
        };
        let received: DateTime<Utc> = frame.received_at.into();
        let recorded: DateTime<Utc> = frame.envelope["recorded_at"]
            .as_str()
            .and_then(|t| t.parse().ok())
            .context("recorded_at")?;
        if frame.event_type == "turn.completed" {
            completed += 1;
        }
        let writer = frame.envelope["meta"]["replica"]
            .as_str()
            .map(|r| r.split_once('/').map_or(r, |(n, _)| n).to_string());
        let ms = (received - recorded).num_microseconds().unwrap_or(0) as f64 / 1e3;
        if recorded >= subscribed {
            seen.push((frame.version, writer, ms));
        } else {
            seen.push((frame.version, writer, f64::NAN));
        }
    }
    Ok(seen)
}
