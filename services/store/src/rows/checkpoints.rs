//! The rows of `checkpoints`: a checkpoint's metadata, and with it the sealed snapshot.

use super::corrupt;
use baton_core::StoreError;
use chrono::{DateTime, Utc};
use uuid::Uuid;

/// Expands to the metadata columns of `checkpoints`, in the order [`CheckpointMetaRow`]
/// reads them.
macro_rules! checkpoint_columns {
    () => {
        "id, through_version, key_id, size, sha256, created_at"
    };
}
pub(crate) use checkpoint_columns;

/// A checkpoint's metadata: every column of `checkpoints` but its tenant, run and
/// ciphertext.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct CheckpointMetaRow {
    pub id: Uuid,
    pub through_version: i64,
    pub key_id: String,
    pub size: i64,
    pub sha256: String,
    pub created_at: DateTime<Utc>,
}

impl TryFrom<CheckpointMetaRow> for baton_core::model::CheckpointMeta {
    type Error = StoreError;

    fn try_from(r: CheckpointMetaRow) -> Result<Self, StoreError> {
        Ok(baton_core::model::CheckpointMeta {
            id: r.id.into(),
            through_version: r.through_version,
            key_id: r.key_id,
            size: u64::try_from(r.size)
                .map_err(|_| corrupt(format!("checkpoint {} has size {}", r.id, r.size)))?,
            sha256: r.sha256,
            created_at: r.created_at,
        })
    }
}

/// A row of `checkpoints` without its tenant and run: the metadata and the sealed
/// snapshot.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct CheckpointRow {
    #[sqlx(flatten)]
    pub meta: CheckpointMetaRow,
    pub ciphertext: Vec<u8>,
}

impl TryFrom<CheckpointRow> for baton_core::ports::StoredCheckpoint {
    type Error = StoreError;

    fn try_from(r: CheckpointRow) -> Result<Self, StoreError> {
        Ok(baton_core::ports::StoredCheckpoint {
            meta: r.meta.try_into()?,
            ciphertext: r.ciphertext,
        })
    }
}
