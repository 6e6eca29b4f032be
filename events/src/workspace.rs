//! The run workspace's event: `workspace.changed`, the change set of files that landed in
//! the run's workspace (an upload, or a sandboxed command's promoted result). The
//! workspace at a stream version is the fold of these events up to it; file contents are
//! blobs named by their SHA-256, stored once per tenant.

use crate::ids::ReceiptId;
use serde::{Deserialize, Serialize};

/// What made a workspace change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum WorkspaceSource {
    /// A member uploaded a file over the API.
    Upload,
    /// A sandboxed command's changes, promoted with its result.
    Command,
}

/// How one path changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FileChangeKind {
    Added,
    Modified,
    Removed,
}

/// One path of a change set, as it landed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FileChange {
    /// The file's path in the workspace: `/`-separated, relative, normalised.
    pub path: String,
    pub change: FileChangeKind,
    /// Hex SHA-256 of the new content (absent when removed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// The new content's size in bytes (absent when removed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

/// Files landed in the run's workspace. The workspace's version is the stream version of
/// its latest `workspace.changed`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WorkspaceChanged {
    pub source: WorkspaceSource,
    /// The command call whose result this change is (absent for uploads).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipt_id: Option<ReceiptId>,
    /// The paths, each once, in path order.
    pub changes: Vec<FileChange>,
}
