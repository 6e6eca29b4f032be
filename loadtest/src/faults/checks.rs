//! The end-of-run checks of the active runs: each run's stream against what its SSE
//! watcher received, the tool endpoint's calls against the recorded receipts, and the
//! messages each driver got accepted against those stored.

use crate::client::Client;
use crate::drivers::{self, Driven, Drivers, Mutations, Writes};
use crate::target::Target;
use crate::watch::Watched;
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

/// The invariants a fault scenario is held to; any non-zero count fails it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Invariants {
    /// SSE arrivals that skipped versions, over every watcher.
    pub sse_gaps: u64,
    /// SSE arrivals of a version already received.
    pub sse_repeats: u64,
    /// Versions a watcher never received up to its run's last.
    pub sse_missing: i64,
    /// Mutation calls beyond one per receipt, plus calls without a receipt.
    pub duplicated_mutations: u64,
    /// Client messages stored more than once.
    pub duplicated_writes: u64,
    /// Writes accepted (2xx) and not stored, plus mutations never finished.
    pub lost_events: u64,
    /// Other failures: streams not exactly `1..n`, runs not settled or taken over in
    /// time, the load's runs holding other user messages than accepted, messages stored
    /// that no client sent.
    pub other_failures: u64,
}

/// What the checks found.
pub struct Checks {
    pub inv: Invariants,
    /// Every failure, counted invariants included.
    pub failures: Vec<String>,
    /// Failures outside the counted invariants.
    pub other: u64,
    pub watched: Vec<Watched>,
    pub mutations: Mutations,
    pub writes: Writes,
    /// The drivers' client-visible errors, by `operation: kind`.
    pub driver_errors: BTreeMap<String, u64>,
}

/// Tells each watcher its run's last version, waits for it (bounded by `deadline`) and
/// checks the active runs.
pub async fn active(
    target: &mut Target,
    client: &Client,
    active: &Drivers,
    driven: &[Driven],
    tells: Vec<tokio::sync::watch::Sender<Option<i64>>>,
    watchers: Vec<tokio::task::JoinHandle<Watched>>,
    deadline: Duration,
) -> anyhow::Result<Checks> {
    // Every active run's stream, and what its watcher saw of it.
    // Failures of the counted invariants are listed too; `other` counts the rest.
    let mut failures = Vec::new();
    let mut other = 0;
    let mut inv = Invariants::default();
    let mut last = Vec::with_capacity(active.runs.len());
    for (run, tell) in active.runs.iter().zip(&tells) {
        match target.check_run(client, *run).await {
            Ok(n) => {
                last.push(n);
                let _ = tell.send(Some(n));
            }
            Err(e) => {
                last.push(0);
                other += 1;
                failures.push(format!("{e:#}"));
                let _ = tell.send(Some(0));
            }
        }
    }
    let mut watched: Vec<Watched> = Vec::new();
    for (w, run) in watchers.into_iter().zip(&active.runs) {
        match tokio::time::timeout(deadline, w).await {
            Ok(Ok(w)) => watched.push(w),
            _ => {
                other += 1;
                failures.push(format!("the watcher of {run} did not end"));
            }
        }
    }
    drop(tells);
    for (w, n) in watched.iter().zip(&last) {
        inv.sse_gaps += w.check.gaps;
        inv.sse_repeats += w.check.repeats;
        inv.sse_missing += w.check.missing_up_to(*n);
        if !w.check.exactly(*n) {
            failures.push(format!(
                "the watcher of {} saw {:?} of versions 1..={n}",
                w.run, w.check
            ));
        }
    }

    // Mutations at the tool endpoint against the receipts; writes against messages.
    let pool = target.cluster_mut()?.pool().await?.clone();
    let receipts = drivers::receipts(&pool, &active.runs).await?;
    let answered: Vec<Option<String>> = active
        .tools
        .received(drivers::TOOL)
        .into_iter()
        .map(|r| r.idempotency_key)
        .collect();
    let mutations = drivers::mutations(
        &receipts,
        active.tools.calls(drivers::TOOL) as u64,
        &answered,
    );
    inv.duplicated_mutations = mutations.duplicated + mutations.without_intent;
    inv.lost_events += mutations.unfinished + mutations.failed;
    if mutations.duplicated + mutations.without_intent + mutations.unfinished + mutations.failed > 0
    {
        failures.push(format!("mutations: {mutations:?}"));
    }
    let mut writes = Writes::default();
    let mut driver_errors: BTreeMap<String, u64> = BTreeMap::new();
    for d in driven {
        for (k, n) in &d.errors {
            *driver_errors.entry(k.clone()).or_default() += n;
        }
        if let Some(f) = &d.failure {
            other += 1;
            failures.push(f.clone());
        }
        let stored: Vec<String> = client
            .messages(target.url(0), d.run)
            .await?
            .iter()
            .filter(|m| m["role"] == "user")
            .filter_map(|m| m["content"].as_str().map(str::to_string))
            .collect();
        let w = drivers::writes(&d.accepted, &stored);
        other += w.unexpected;
        if w.lost + w.duplicated + w.unexpected > 0 {
            failures.push(format!("run {}: accepted vs stored messages {w:?}", d.run));
        }
        writes.accepted += w.accepted;
        writes.lost += w.lost;
        writes.duplicated += w.duplicated;
        writes.unexpected += w.unexpected;
    }
    inv.duplicated_writes = writes.duplicated;
    inv.lost_events += writes.lost;
    Ok(Checks {
        inv,
        failures,
        other,
        watched,
        mutations,
        writes,
        driver_errors,
    })
}

/// The watchers' totals, as JSON.
pub fn sse_totals(watched: &[Watched]) -> Value {
    let mut cuts: BTreeMap<String, u64> = BTreeMap::new();
    for w in watched {
        for (k, n) in &w.cuts {
            *cuts.entry(k.clone()).or_default() += n;
        }
    }
    json!({
        "watchers": watched.len(),
        "events": watched.iter().map(|w| w.check.seen).sum::<u64>(),
        "resumes": watched.iter().map(|w| w.resumes).sum::<u64>(),
        "longest_blind_ms": watched.iter().map(|w| w.longest_blind_ms).fold(0.0, f64::max),
        "malformed": watched.iter().map(|w| w.malformed).sum::<u64>(),
        "finished": watched.iter().filter(|w| w.finished).count(),
        "cuts": cuts,
    })
}
