//! Sealed snapshots of runs' engine state.

use crate::error::StoreError;
use crate::model::CheckpointMeta;
use async_trait::async_trait;
use baton_events::{RunId, TenantId};

/// A checkpoint as stored: its metadata and the sealed snapshot
/// ([`Aad::checkpoint`](crate::crypto::Aad::checkpoint) binds it to its tenant, run and
/// id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredCheckpoint {
    pub meta: CheckpointMeta,
    pub ciphertext: Vec<u8>,
}

/// Sealed snapshots of runs' engine state. Writes go through their own small pool, so a
/// burst of checkpoints never delays requests.
#[async_trait]
pub trait CheckpointStore: Send + Sync {
    async fn save_checkpoint(
        &self,
        tenant: TenantId,
        run: RunId,
        checkpoint: &StoredCheckpoint,
    ) -> Result<(), StoreError>;

    /// The run's newest checkpoints (highest `through_version` first), at most `limit`.
    async fn latest_checkpoints(
        &self,
        tenant: TenantId,
        run: RunId,
        limit: u32,
    ) -> Result<Vec<StoredCheckpoint>, StoreError>;

    /// Metadata of the run's checkpoints, oldest first.
    async fn list_checkpoints(
        &self,
        tenant: TenantId,
        run: RunId,
    ) -> Result<Vec<CheckpointMeta>, StoreError>;
}
