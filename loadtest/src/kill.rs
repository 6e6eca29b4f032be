//! Hand-off after SIGTERM and adoption after SIGKILL: start a cluster, put `runs` runs of
//! a scripted agent with a long reply delay in `running` (each holds a lease), signal the
//! replica owning the most, and time, per run, signal -> the new owner's `lease.acquired`
//! (`recorded_at` of the event in the database). Every run's stream is then checked with
//! [`Cluster::check_run_invariants`].

use crate::stats::{Progress, Summary};
use crate::takeover::{self, Taken};
use anyhow::{Context, bail};
use baton_testkit::{Api, Cluster};
use chrono::Utc;
use futures::StreamExt;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

/// How many runs are created at once.
const CREATE_CONCURRENCY: usize = 32;
/// How often the lease rows and events are polled.
const POLL: Duration = Duration::from_millis(100);
/// Bound on each HTTP request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// Which fault to inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Fault {
    /// SIGTERM: graceful drain and hand-off.
    Term,
    /// SIGKILL: crash; others adopt after the lease TTL.
    Kill,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Plan {
    pub fault: Fault,
    pub replicas: usize,
    pub runs: usize,
    pub reply_ms: u64,
    /// `BATON_*` timing knobs for every replica.
    pub env: Vec<(String, String)>,
    /// Bound on creating the runs, on them all being leased, and on the take-over.
    pub deadline: Duration,
}

/// What was measured.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub fault: Fault,
    pub replicas: usize,
    pub runs: usize,
    pub reply_ms: u64,
    pub env: BTreeMap<String, String>,
    pub setup_secs: f64,
    /// Runs per owner before the signal.
    pub ownership: BTreeMap<String, usize>,
    pub victim: String,
    pub victim_runs: usize,
    /// Victim runs whose new owner wrote `lease.acquired` within the deadline.
    pub taken_over: usize,
    /// `lease.released{reason: drained}` events the victim wrote.
    pub released_drained: usize,
    /// `lease.acquired` reasons of the take-overs.
    pub reasons: BTreeMap<String, usize>,
    pub new_owners: BTreeMap<String, usize>,
    /// Signal -> new owner's `lease.acquired` recorded_at, per run.
    pub takeover: Summary,
    /// Signal -> victim process exit, in ms.
    pub exit_ms: Option<f64>,
    pub runs_checked: usize,
    pub failures: Vec<String>,
}

/// Runs the plan against `bin`.
pub async fn run(bin: &Path, plan: &Plan, p: Progress) -> anyhow::Result<Outcome> {
    let label = match plan.fault {
        Fault::Term => "hand-off (SIGTERM)",
        Fault::Kill => "adoption (SIGKILL)",
    };
    p.say(format!(
        "{label}: starting {} replicas, {} runs, reply delay {} ms",
        plan.replicas, plan.runs, plan.reply_ms
    ));
    let setup = Instant::now();
    let mut builder = Cluster::builder(bin).replicas(plan.replicas);
    for (k, v) in &plan.env {
        builder = builder.env(k, v);
    }
    let mut cluster = builder.start().await.context("starting the cluster")?;
    let (_, key) = cluster.create_tenant("loadtest").await?;
    let apis: Vec<Api> = (0..plan.replicas)
        .map(|i| Api::new(cluster.base_url(i), Some(key.clone())).with_timeout(REQUEST_TIMEOUT))
        .collect();
    let agent = apis[0].agent(&[("done", plan.reply_ms, true)]).await;

    let mut ids = Vec::with_capacity(plan.runs);
    let mut creating = futures::stream::iter(0..plan.runs)
        .map(|i| apis[i % apis.len()].run(&agent, Some("work on this")))
        .buffer_unordered(CREATE_CONCURRENCY);
    while let Some(id) = tokio::time::timeout(plan.deadline, creating.next())
        .await
        .context("creating runs took too long")?
    {
        ids.push(id.parse::<uuid::Uuid>().context("run id")?);
        if ids.len() % 100 == 0 || ids.len() == plan.runs {
            p.say(format!("{label}: {}/{} runs created", ids.len(), plan.runs));
        }
    }
    drop(creating);

    // A running run holds a lease; wait until every one does.
    let leased_by = Instant::now() + plan.deadline;
    let leases = loop {
        let leases = cluster.leases(&ids).await?;
        let held = leases.iter().filter(|l| l.owner.is_some()).count();
        if held == ids.len() {
            break leases;
        }
        if Instant::now() > leased_by {
            bail!(
                "only {held}/{} runs leased after {:?}",
                ids.len(),
                plan.deadline
            );
        }
        p.say(format!("{label}: {held}/{} runs leased", ids.len()));
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let setup_secs = setup.elapsed().as_secs_f64();
    let mut per_owner: BTreeMap<String, Vec<(uuid::Uuid, i64)>> = BTreeMap::new();
    for l in &leases {
        let owner = l.owner.clone().unwrap_or_default();
        per_owner.entry(owner).or_default().push((l.run, l.epoch));
    }
    let ownership: BTreeMap<String, usize> = per_owner
        .iter()
        .map(|(o, r)| (o.clone(), r.len()))
        .collect();
    let (victim_id, victim_runs) = per_owner
        .into_iter()
        .max_by_key(|(_, r)| r.len())
        .context("no owners")?;
    let victim = replica_index(&victim_id)?;
    p.say(format!(
        "{label}: all running after {setup_secs:.1} s; ownership {ownership:?}; signalling {victim_id}"
    ));

    let signalled_wall = Utc::now();
    let signalled = Instant::now();
    match plan.fault {
        Fault::Term => cluster.sigterm(victim)?,
        Fault::Kill => cluster.sigkill(victim)?,
    }
    let old_epoch: HashMap<uuid::Uuid, i64> = victim_runs.iter().copied().collect();
    let victim_ids: Vec<uuid::Uuid> = victim_runs.iter().map(|(r, _)| *r).collect();
    let mut taken: HashMap<uuid::Uuid, Taken> = HashMap::new();
    let mut exit_ms = None;
    let mut last_said = Instant::now();
    while (taken.len() < victim_ids.len() || exit_ms.is_none())
        && signalled.elapsed() < plan.deadline
    {
        if exit_ms.is_none() && !cluster.is_running(victim)? {
            exit_ms = Some(signalled.elapsed().as_secs_f64() * 1e3);
        }
        takeover::poll(&cluster, &victim_id, &old_epoch, signalled_wall, &mut taken).await?;
        if last_said.elapsed() >= Duration::from_secs(1) {
            last_said = Instant::now();
            p.say(format!(
                "{label}: {}/{} runs taken over, victim exited: {}",
                taken.len(),
                victim_ids.len(),
                exit_ms.is_some()
            ));
        }
        tokio::time::sleep(POLL).await;
    }
    p.say(format!(
        "{label}: {}/{} runs taken over after {:.1} s",
        taken.len(),
        victim_ids.len(),
        signalled.elapsed().as_secs_f64()
    ));
    let released_drained = takeover::lease_events(&cluster, &victim_ids, "lease.released")
        .await?
        .iter()
        .filter(|(_, _, d)| d["reason"] == "drained")
        .count();

    let mut failures = Vec::new();
    if taken.len() < victim_ids.len() {
        failures.push(format!(
            "{} of {} runs of {victim_id} were not taken over within {:?}",
            victim_ids.len() - taken.len(),
            victim_ids.len(),
            plan.deadline
        ));
    }
    p.say(format!(
        "{label}: checking the invariants of {} runs",
        ids.len()
    ));
    for run in &ids {
        if let Err(e) = cluster.check_run_invariants(*run).await {
            failures.push(format!("{e:#}"));
        }
    }
    let mut reasons = BTreeMap::new();
    let mut new_owners = BTreeMap::new();
    for t in taken.values() {
        *reasons.entry(t.reason.clone()).or_default() += 1;
        *new_owners.entry(t.owner.clone()).or_default() += 1;
    }
    let samples: Vec<f64> = taken.values().map(|t| t.ms).collect();
    let outcome = Outcome {
        fault: plan.fault,
        replicas: plan.replicas,
        runs: plan.runs,
        reply_ms: plan.reply_ms,
        env: plan.env.iter().cloned().collect(),
        setup_secs,
        ownership,
        victim: victim_id,
        victim_runs: victim_ids.len(),
        taken_over: taken.len(),
        released_drained,
        reasons,
        new_owners,
        takeover: Summary::of(&samples),
        exit_ms,
        runs_checked: ids.len(),
        failures,
    };
    cluster.stop().await?;
    Ok(outcome)
}

/// The index of a harness replica identity `replica-<i>/<boot>`.
pub fn replica_index(identity: &str) -> anyhow::Result<usize> {
    identity
        .split_once('/')
        .map_or(identity, |(name, _)| name)
        .strip_prefix("replica-")
        .and_then(|i| i.parse().ok())
        .with_context(|| format!("not a harness replica identity: {identity:?}"))
}
