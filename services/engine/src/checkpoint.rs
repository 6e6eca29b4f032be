//! Checkpoints: the driver's [`RunState`] sealed with the keyring and saved after every
//! turn and before a hand-off, each announced by a `checkpoint.saved` event. A driver
//! that starts on a run restores the newest checkpoint that opens and verifies and folds
//! only the events after it; one that does not is skipped with a warning, and with none
//! left the run is rebuilt from its events alone.
//!
//! A checkpoint always snapshots a version that is already committed, so a row whose
//! event never landed (a crash in between, a lost race) is still a true snapshot.

use crate::driver::Driver;
use crate::outcome::StepError;
use crate::state::RunState;
use baton_core::StoreError;
use baton_core::crypto::Aad;
use baton_core::model::CheckpointMeta;
use baton_core::model::RunSummary;
use baton_core::ports::{AppendRequest, StoredCheckpoint};
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

const FORMAT: u32 = 1;

impl Driver {
    /// Seals the state (which must be folded up to a committed version) and saves it;
    /// returns the event that announces it.
    pub(crate) async fn seal_checkpoint(&self) -> Result<RunEvent, StoreError> {
        let plain = serde_json::to_vec(&Snapshot {
            format: FORMAT,
            state: self.state.clone(),
        })
        .map_err(|e| StoreError::Other(format!("serializing a checkpoint: {e}")))?;
        let id = CheckpointId::new();
        let sealed = self
            .shared
            .ports
            .keyring
            .seal(&Aad::checkpoint(self.tenant, self.run, id), &plain)
            .map_err(|e| StoreError::Other(format!("sealing a checkpoint: {e}")))?;
        let meta = CheckpointMeta {
            id,
            through_version: self.state.version,
            key_id: sealed.key_id.clone(),
            size: plain.len() as u64,
            sha256: hex::encode(Sha256::digest(&plain)),
            created_at: self.shared.ports.clock.now(),
        };
        let stored = StoredCheckpoint {
            meta: meta.clone(),
            ciphertext: sealed.bytes,
        };
        self.shared
            .ports
            .checkpoints
            .save_checkpoint(self.tenant, self.run, &stored)
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

    /// After a turn settled (the lease is already released): saves a checkpoint of the
    /// run as it stands and appends `checkpoint.saved`, unless a client command got in
    /// first (the row stays: it is a true snapshot of its version). Best effort: a
    /// failure costs a longer rebuild later, never the turn.
    pub(crate) async fn checkpoint_after_turn(&mut self, run: &RunSummary) {
        if run.status.is_terminal() {
            return;
        }
        let saved = async {
            self.refresh(run).await?;
            if self.state.version != run.version {
                return Ok(());
            }
            let event = self.seal_checkpoint().await?;
            let mut meta = EventMeta::new(self.tenant);
            meta.actor = Some("engine".into());
            meta.replica = Some(self.shared.opts.replica.clone());
            let req = AppendRequest::new(
                self.run,
                run.version,
                vec![NewEvent::new(event, meta)],
                self.shared.ports.clock.now(),
            );
            match self.shared.ports.recorder.append(self.tenant, req).await {
                Ok(_) | Err(StoreError::Conflict { .. }) => Ok(()),
                Err(e) => Err(StepError::from(e)),
            }
        };
        if let Err(e) = saved.await {
            tracing::warn!(error = %e, "could not save the turn's checkpoint");
        }
    }

    /// Starts the state from the newest checkpoint that opens, verifies and is not past
    /// `run`; leaves it empty (rebuild from the events) when there is none.
    pub(crate) async fn restore(&mut self, run: &RunSummary) -> Result<(), StoreError> {
        let candidates = self
            .shared
            .ports
            .checkpoints
            .latest_checkpoints(self.tenant, self.run, TRIED)
            .await?;
        for c in candidates {
            if c.meta.through_version > run.version {
                continue;
            }
            match self.open(&c) {
                Ok(state) => {
                    tracing::debug!(checkpoint = %c.meta.id, through = c.meta.through_version, "restored from a checkpoint");
                    metrics::counter!("baton_checkpoints_restored_total").increment(1);
                    self.state = state;
                    return Ok(());
                }
                Err(why) => {
                    tracing::warn!(checkpoint = %c.meta.id, key_id = %c.meta.key_id, reason = %why, "skipping a checkpoint");
                    metrics::counter!("baton_checkpoints_skipped_total").increment(1);
                }
            }
        }
        Ok(())
    }

    fn open(&self, c: &StoredCheckpoint) -> Result<RunState, String> {
        let aad = Aad::checkpoint(self.tenant, self.run, c.meta.id);
        let plain = self
            .shared
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
}
