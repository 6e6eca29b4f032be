//! Reading run workspaces. Workspaces are written only by appends: a `workspace.changed`
//! event carries the change set, and the [`AppendRequest`](super::AppendRequest)'s
//! `blobs` carry the contents it names, stored in the same transaction.

use crate::error::StoreError;
use crate::model::{FileContent, WorkspaceFile, WorkspaceUsage};
use async_trait::async_trait;
use baton_events::{RunId, TenantId};

/// A content an append stores, named by its hex SHA-256. Stored once per tenant however
/// many files hold it; kept while a file of any run holds it.
#[derive(Clone, PartialEq, Eq)]
pub struct Blob {
    pub sha256: String,
    pub content: Vec<u8>,
}

impl Blob {
    /// The blob of `content`, named by its hash.
    pub fn of(content: Vec<u8>) -> Self {
        Self {
            sha256: Self::name_of(&content),
            content,
        }
    }

    /// The name of `content`: its hex SHA-256.
    pub fn name_of(content: &[u8]) -> String {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(content))
    }
}

impl std::fmt::Debug for Blob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Blob")
            .field("sha256", &self.sha256)
            .field("size", &self.content.len())
            .finish()
    }
}

/// A path as the workspace holds it: the version of its last change, and its content and
/// size unless that change removed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathState {
    pub path: String,
    pub version: i64,
    pub sha256: Option<String>,
    pub size: u64,
}

#[async_trait]
pub trait WorkspaceStore: Send + Sync {
    /// The run's files in path order, those after `after`, at most `limit`.
    async fn list_files(
        &self,
        tenant: TenantId,
        run: RunId,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<WorkspaceFile>, StoreError>;

    /// The file at `path`, if the run's workspace holds one.
    async fn get_file(
        &self,
        tenant: TenantId,
        run: RunId,
        path: &str,
    ) -> Result<Option<WorkspaceFile>, StoreError>;

    /// The file at `path` with its content.
    async fn read_file(
        &self,
        tenant: TenantId,
        run: RunId,
        path: &str,
    ) -> Result<Option<FileContent>, StoreError>;

    /// Every path the run's workspace has held, removed ones too: what a promotion is
    /// resolved against (`workspace::promote`).
    async fn workspace_state(
        &self,
        tenant: TenantId,
        run: RunId,
    ) -> Result<Vec<PathState>, StoreError>;

    /// The contents the run's files hold now, each once, in one read: what a command's
    /// copy is made of (its paths come from [`Self::workspace_state`]).
    async fn run_contents(&self, tenant: TenantId, run: RunId) -> Result<Vec<Blob>, StoreError>;

    /// The run's files and bytes, and the tenant's stored bytes.
    async fn workspace_usage(
        &self,
        tenant: TenantId,
        run: RunId,
    ) -> Result<WorkspaceUsage, StoreError>;
}
