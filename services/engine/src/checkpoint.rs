//! Checkpoints: the engine's [`RunState`] sealed with the keyring and saved after every
//! turn and before a hand-off, each announced by a `checkpoint.saved` event. A driver
//! that starts on a run restores the newest checkpoint that opens and verifies and folds
//! only the events after it; one that does not is skipped with a warning, and with none
//! left the run is rebuilt from its events alone.
//!
//! A checkpoint always snapshots a version that is already committed, so a row whose
//! event never landed (a crash in between, a lost race) is still a true snapshot.

use crate::shared::Shared;
use crate::state::RunState;
use baton_core::crypto::Aad;
use baton_core::model::CheckpointMeta;
use baton_core::ports::{AppendRequest, StoredCheckpoint};
use baton_core::{RunId, StoreError, TenantId};
use baton_events::{CheckpointId, CheckpointSaved, EventMeta, NewEvent, RunEvent};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Checkpoints tried, newest first, before rebuilding from the events alone.
const TRIED: u32 = 3;

/// What a checkpoint holds, in the clear.
#[derive(Serialize, Deserialize)]
struct Snapshot {
    /// Bumped when [`RunState`] changes shape; other formats are skipped.
    format: u32,
    state: RunState,
}

const FORMAT: u32 = 3;

/// Seals `state` (which must be folded up to a committed version) and saves it;
/// returns the event that announces it.
pub(crate) async fn seal(
    shared: &Shared,
    tenant: TenantId,
    run: RunId,
    state: &RunState,
) -> Result<RunEvent, StoreError> {
    let plain = serde_json::to_vec(&Snapshot {
        format: FORMAT,
        state: state.clone(),
    })
    .map_err(|e| StoreError::Other(format!("serializing a checkpoint: {e}")))?;
    let id = CheckpointId::new();
    let sealed = shared
        .ports
        .keyring
        .seal(&Aad::checkpoint(tenant, run, id), &plain)
        .map_err(|e| StoreError::Other(format!("sealing a checkpoint: {e}")))?;
    let meta = CheckpointMeta {
        id,
        through_version: state.version,
        key_id: sealed.key_id.clone(),
        size: plain.len() as u64,
        sha256: hex::encode(Sha256::digest(&plain)),
        created_at: shared.ports.clock.now(),
    };
    let stored = StoredCheckpoint {
        meta: meta.clone(),
        ciphertext: sealed.bytes,
    };
    shared
        .ports
        .checkpoints
        .save_checkpoint(tenant, run, &stored)
        .await?;
    metrics::counter!("baton_checkpoints_saved_total").increment(1);
    metrics::histogram!("baton_checkpoint_size_bytes").record(meta.size as f64);
    Ok(RunEvent::CheckpointSaved(CheckpointSaved {
        checkpoint_id: id,
        through_version: meta.through_version,
        key_id: meta.key_id,
        size: meta.size,
        sha256: meta.sha256,
    }))
}

/// Seals and saves `state` (folded up to the run's committed version, after its turn
/// settled and its lease was released) and appends `checkpoint.saved` without a fence,
/// unless a client command got in first: the row stays, a true snapshot of its version.
pub(crate) async fn save_and_announce(
    shared: &Shared,
    tenant: TenantId,
    run: RunId,
    state: &RunState,
) -> Result<(), StoreError> {
    let event = seal(shared, tenant, run, state).await?;
    let mut meta = EventMeta::new(tenant);
    meta.actor = Some("engine".into());
    meta.replica = Some(shared.opts.replica.clone());
    let req = AppendRequest::new(
        run,
        state.version,
        vec![NewEvent::new(event, meta)],
        shared.ports.clock.now(),
    );
    match shared.ports.recorder.append(tenant, req).await {
        Ok(_) | Err(StoreError::Conflict { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The newest checkpoint of the run that opens, verifies and is not past `through`;
/// `None` (rebuild from the events) when there is none.
pub(crate) async fn restore(
    shared: &Shared,
    tenant: TenantId,
    run: RunId,
    through: i64,
) -> Result<Option<RunState>, StoreError> {
    let candidates = shared
        .ports
        .checkpoints
        .latest_checkpoints(tenant, run, TRIED)
        .await?;
    for c in candidates {
        if c.meta.through_version > through {
            continue;
        }
        match open(shared, tenant, run, &c) {
            Ok(state) => {
                tracing::debug!(checkpoint = %c.meta.id, through = c.meta.through_version, "restored from a checkpoint");
                metrics::counter!("baton_checkpoints_restored_total").increment(1);
                return Ok(Some(state));
            }
            Err(why) => {
                tracing::warn!(checkpoint = %c.meta.id, key_id = %c.meta.key_id, reason = %why, "skipping a checkpoint");
                metrics::counter!("baton_checkpoints_skipped_total").increment(1);
            }
        }
    }
    Ok(None)
}

fn open(
    shared: &Shared,
    tenant: TenantId,
    run: RunId,
    c: &StoredCheckpoint,
) -> Result<RunState, String> {
    let aad = Aad::checkpoint(tenant, run, c.meta.id);
    let plain = shared
        .ports
        .keyring
        .open(&aad, &c.ciphertext)
        .map_err(|e| format!("it does not open: {e}"))?;
    if hex::encode(Sha256::digest(&plain)) != c.meta.sha256 {
        return Err("its SHA-256 does not match".into());
    }
    let snapshot: Snapshot =
        serde_json::from_slice(&plain).map_err(|e| format!("it does not parse: {e}"))?;
    if snapshot.format != FORMAT {
        return Err(format!("format {} is not {FORMAT}", snapshot.format));
    }
    if snapshot.state.version != c.meta.through_version {
        return Err("its state is not at its version".into());
    }
    Ok(snapshot.state)
}
