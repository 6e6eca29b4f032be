//! What may be shown of a run checkpoint: never its contents.

use chrono::{DateTime, Utc};

/// What may be shown of a checkpoint: never its contents.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct CheckpointMeta {
    pub id: baton_events::CheckpointId,
    /// The snapshot holds the run's engine state after this stream version.
    pub through_version: i64,
    /// The keyring key the snapshot is sealed under.
    pub key_id: String,
    /// Size of the snapshot in the clear, in bytes.
    pub size: u64,
    /// Hex SHA-256 of the snapshot in the clear.
    pub sha256: String,
    pub created_at: DateTime<Utc>,
}
