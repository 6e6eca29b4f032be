//! Who took a signalled replica's runs over, and when: the new owners' `lease.acquired`
//! events (their `recorded_at` in the database, against the wall clock of the signal).
//! Shared by `cluster` (hand-off, adoption) and the `rolling-upgrade` and `chaos`
//! scenarios. Reads the cluster's database; signals nothing.

use anyhow::Context;
use baton_testkit::Cluster;
use chrono::{DateTime, Utc};
use serde::Serialize;
use std::collections::HashMap;

/// One run taken over from a signalled replica.
#[derive(Debug, Clone, Serialize)]
pub struct Taken {
    /// Signal -> the new owner's `lease.acquired`, in ms.
    pub ms: f64,
    /// The `lease.acquired` reason: `handoff`, `adopted` or `new`.
    pub reason: String,
    /// The new owner's identity `replica-<i>/<boot>`.
    pub owner: String,
}

/// Records in `taken` every run of `old_epoch` (the victim's runs and the epochs they
/// had at the signal) whose `lease.acquired` by another owner than `victim` at a higher
/// epoch is now stored; runs already in `taken` keep their first take-over.
pub async fn poll(
    cluster: &Cluster,
    victim: &str,
    old_epoch: &HashMap<uuid::Uuid, i64>,
    signalled: DateTime<Utc>,
    taken: &mut HashMap<uuid::Uuid, Taken>,
) -> anyhow::Result<()> {
    let runs: Vec<uuid::Uuid> = old_epoch
        .keys()
        .filter(|r| !taken.contains_key(r))
        .copied()
        .collect();
    if runs.is_empty() {
        return Ok(());
    }
    for (run, at, data) in lease_events(cluster, &runs, "lease.acquired").await? {
        let owner = data["owner"].as_str().unwrap_or_default();
        let epoch = data["epoch"].as_i64().unwrap_or_default();
        let Some(old) = old_epoch.get(&run) else {
            continue;
        };
        if owner != victim && epoch > *old && !taken.contains_key(&run) {
            taken.insert(
                run,
                Taken {
                    ms: (at - signalled).num_microseconds().unwrap_or(0) as f64 / 1e3,
                    reason: data["reason"].as_str().unwrap_or("?").to_string(),
                    owner: owner.to_string(),
                },
            );
        }
    }
    Ok(())
}

/// Every `event_type` event of `runs`: (run, recorded_at, data).
pub async fn lease_events(
    cluster: &Cluster,
    runs: &[uuid::Uuid],
    event_type: &str,
) -> anyhow::Result<Vec<(uuid::Uuid, DateTime<Utc>, serde_json::Value)>> {
    sqlx::query_as(
        "SELECT stream_id, recorded_at, data FROM events WHERE stream_id = ANY($1) AND type = $2",
    )
    .bind(runs)
    .bind(event_type)
    .fetch_all(cluster.pool().await?)
    .await
    .context("cannot read lease events")
}

/// The runs of `runs` whose lease `victim` holds now, with their epochs.
pub async fn held_by(
    cluster: &Cluster,
    runs: &[uuid::Uuid],
    victim: usize,
) -> anyhow::Result<(Option<String>, HashMap<uuid::Uuid, i64>)> {
    let mut identity = None;
    let mut held = HashMap::new();
    for l in cluster.leases(runs).await? {
        let Some(owner) = l.owner else { continue };
        if crate::kill::replica_index(&owner).ok() == Some(victim) {
            held.insert(l.run, l.epoch);
            identity = Some(owner);
        }
    }
    Ok((identity, held))
}
