//! Run workspaces: a tree of files per run, kept in the store as content-addressed blobs
//! (deduplicated per tenant) and versioned by the run's `workspace.changed` events. A
//! replica's copy on disk is only ever a cache; the store is the source of truth.
//!
//! This module holds what clients do with them: list a run's files, download one, upload
//! one into `uploads/` (a `workspace.changed` appended against the run's version, with
//! the content in the same transaction), under the [`WorkspaceLimits`]. Every path goes
//! through [`path::normalize`] first. [`promote`] decides how a command's change set
//! lands when a member changed some of its paths meanwhile (both kept, never clobbered).

pub mod path;
pub mod promote;
pub mod tools;

use crate::error::{CoreError, StoreError};
use crate::model::{Action, FileContent, Principal, WorkspaceFile};
use crate::page::{self, Page};
use crate::ports::{AppendOutcome, AppendRequest, Blob, WorkspaceStore};
use crate::runs::Runs;
use baton_events::{
    FileChange, FileChangeKind, NewEvent, RunEvent, RunId, WorkspaceChanged, WorkspaceSource,
};
use std::sync::Arc;

/// Where uploads land: a member's files never overwrite what a command wrote elsewhere.
pub const UPLOADS: &str = "uploads/";

/// How much a workspace may hold. Each write is checked against them before it is
/// appended; a write past one is refused whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkspaceLimits {
    /// The largest file, in bytes.
    pub max_file_bytes: u64,
    /// The most files one run's workspace holds.
    pub max_run_files: u64,
    /// The most bytes one run's files add up to.
    pub max_run_bytes: u64,
    /// The most bytes a tenant stores across its runs (each distinct content once).
    pub max_tenant_bytes: u64,
}

impl Default for WorkspaceLimits {
    fn default() -> Self {
        Self {
            max_file_bytes: 32 << 20,
            max_run_files: 10_000,
            max_run_bytes: 1 << 30,
            max_tenant_bytes: 20 << 30,
        }
    }
}

/// The condition of a conditional upload.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Precondition {
    #[default]
    None,
    /// `If-Match`: the file holds exactly this content (its SHA-256) now.
    Matches(String),
    /// `If-None-Match: *`: there is no file at the path yet.
    Absent,
}

/// What an upload did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uploaded {
    pub file: WorkspaceFile,
    /// A new file (rather than new content for one, or the same content again).
    pub created: bool,
}

/// The workspace use cases.
#[derive(Clone)]
pub struct Workspaces {
    pub runs: Runs,
    pub store: Arc<dyn WorkspaceStore>,
    pub limits: WorkspaceLimits,
}

impl Workspaces {
    /// The run's files in path order; the cursor is the previous page's last path.
    #[tracing::instrument(name = "workspaces.list_files", skip_all)]
    pub async fn list_files(
        &self,
        p: &Principal,
        run: RunId,
        cursor: Option<String>,
        limit: Option<u32>,
    ) -> Result<Page<WorkspaceFile>, CoreError> {
        p.require(Action::ReadRuns)?;
        let limit = page::limit(limit)?;
        let after = cursor
            .map(|c| path::normalize(&c))
            .transpose()
            .map_err(|e| CoreError::invalid(format!("cursor: {e}")))?;
        self.runs.load(p.tenant, run).await?;
        let items = self
            .store
            .list_files(p.tenant, run, after.as_deref(), limit)
            .await?;
        Ok(Page::of(items, limit, |f| f.path.clone()))
    }

    /// One file with its content.
    #[tracing::instrument(name = "workspaces.read_file", skip_all)]
    pub async fn read_file(
        &self,
        p: &Principal,
        run: RunId,
        path: &str,
    ) -> Result<FileContent, CoreError> {
        p.require(Action::ReadRuns)?;
        let path = path::normalize(path)?;
        self.runs.load(p.tenant, run).await?;
        self.store
            .read_file(p.tenant, run, &path)
            .await?
            .ok_or(CoreError::NotFound("file"))
    }

    /// Stores `content` at `path` (under [`UPLOADS`]) as a `workspace.changed` of the
    /// run; the same content again changes nothing.
    #[tracing::instrument(name = "workspaces.upload", skip_all)]
    pub async fn upload(
        &self,
        p: &Principal,
        run_id: RunId,
        path: &str,
        content: Vec<u8>,
        precondition: Precondition,
    ) -> Result<Uploaded, CoreError> {
        p.require(Action::UploadFiles)?;
        let path = path::normalize(path)?;
        if !path.starts_with(UPLOADS) {
            return Err(CoreError::InvalidPath(format!(
                "uploads go under {UPLOADS}: use {UPLOADS}{}",
                path::file_name(&path)
            )));
        }
        let size = content.len() as u64;
        if size > self.limits.max_file_bytes {
            return Err(CoreError::TooLarge(format!(
                "the file is {size} bytes, more than the {} a file may hold",
                self.limits.max_file_bytes
            )));
        }
        let blob = Blob::of(content);
        for _ in 0..crate::runs::MAX_ATTEMPTS {
            let run = self.runs.load(p.tenant, run_id).await?;
            let existing = self.store.get_file(p.tenant, run_id, &path).await?;
            check(&precondition, existing.as_ref())?;
            if let Some(same) = existing.as_ref().filter(|f| f.sha256 == blob.sha256) {
                return Ok(Uploaded {
                    file: same.clone(),
                    created: false,
                });
            }
            self.check_quota(p, run_id, existing.as_ref(), size).await?;
            let change = FileChange {
                path: path.clone(),
                change: match existing {
                    Some(_) => FileChangeKind::Modified,
                    None => FileChangeKind::Added,
                },
                sha256: Some(blob.sha256.clone()),
                size: Some(size),
            };
            let event = RunEvent::WorkspaceChanged(WorkspaceChanged {
                source: WorkspaceSource::Upload,
                receipt_id: None,
                changes: vec![change],
            });
            let meta = crate::runs::meta(&self.runs.replica, p, None);
            let mut req = AppendRequest::new(
                run_id,
                run.version,
                vec![NewEvent::new(event, meta)],
                self.runs.clock.now(),
            );
            req.blobs = vec![blob.clone()];
            match self.runs.recorder.append(p.tenant, req).await {
                Ok(AppendOutcome::Appended { events, .. }) => {
                    let stored = events
                        .last()
                        .ok_or_else(|| CoreError::Internal("an append returned no event".into()))?;
                    let file = WorkspaceFile {
                        path,
                        size,
                        sha256: blob.sha256,
                        version: stored.version,
                        updated_at: stored.recorded_at,
                    };
                    return Ok(Uploaded {
                        file,
                        created: existing.is_none(),
                    });
                }
                Ok(AppendOutcome::Duplicate(_)) => {
                    return Err(CoreError::Internal("unexpected idempotency hit".into()));
                }
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(CoreError::Conflict)
    }

    /// Refuses a write of `size` bytes replacing `existing` that would take the run or the
    /// tenant past a quota.
    async fn check_quota(
        &self,
        p: &Principal,
        run: RunId,
        existing: Option<&WorkspaceFile>,
        size: u64,
    ) -> Result<(), CoreError> {
        let usage = self.store.workspace_usage(p.tenant, run).await?;
        let limits = &self.limits;
        let files = usage.files + u64::from(existing.is_none());
        if files > limits.max_run_files {
            return Err(CoreError::QuotaExceeded(format!(
                "the run's workspace holds {} files, its quota",
                limits.max_run_files
            )));
        }
        let bytes = (usage.bytes + size).saturating_sub(existing.map_or(0, |f| f.size));
        if bytes > limits.max_run_bytes {
            return Err(CoreError::QuotaExceeded(format!(
                "the run's workspace would hold {bytes} bytes, more than its quota of {}",
                limits.max_run_bytes
            )));
        }
        if usage.tenant_bytes + size > limits.max_tenant_bytes {
            return Err(CoreError::QuotaExceeded(format!(
                "the tenant stores {} bytes; {size} more would pass its quota of {}",
                usage.tenant_bytes, limits.max_tenant_bytes
            )));
        }
        Ok(())
    }
}

/// `PreconditionFailed` unless `precondition` holds for the file there is now.
fn check(precondition: &Precondition, existing: Option<&WorkspaceFile>) -> Result<(), CoreError> {
    let failed = |why: String| Err(CoreError::PreconditionFailed(why));
    match (precondition, existing) {
        (Precondition::None, _) => Ok(()),
        (Precondition::Absent, Some(_)) => failed("a file exists at the path already".into()),
        (Precondition::Absent, None) => Ok(()),
        (Precondition::Matches(_), None) => failed("there is no file at the path".into()),
        (Precondition::Matches(sha), Some(f)) if *sha != f.sha256 => {
            failed(format!("the file's content is {} now", f.sha256))
        }
        (Precondition::Matches(_), Some(_)) => Ok(()),
    }
}
