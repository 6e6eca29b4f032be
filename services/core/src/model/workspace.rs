//! A run's workspace as clients see it: its files, each the content a blob names.

use chrono::{DateTime, Utc};
use serde::Serialize;

/// One file of a run's workspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct WorkspaceFile {
    /// `/`-separated, relative to the workspace.
    pub path: String,
    pub size: u64,
    /// Hex SHA-256 of the content (the download's `ETag`).
    pub sha256: String,
    /// The run's stream version whose `workspace.changed` wrote this content.
    pub version: i64,
    pub updated_at: DateTime<Utc>,
}

/// A file with its content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileContent {
    pub file: WorkspaceFile,
    pub content: Vec<u8>,
}

/// What a workspace and its tenant hold now, for the quotas.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkspaceUsage {
    /// The run's files.
    pub files: u64,
    /// The sum of the run's files' sizes.
    pub bytes: u64,
    /// The bytes of every blob the tenant stores (each content once).
    pub tenant_bytes: u64,
}
