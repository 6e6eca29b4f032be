//! `WorkspaceStore`: a run's files (`workspace_files`) and the tenant's contents
//! (`blobs`), read on the `app` pool scoped to the tenant; and [`project_workspace`], the
//! workspace projection of the append transaction.
//!
//! A blob's `refs` counts the files (of any run of its tenant) holding it. An append's
//! `workspace.changed` moves the counts of the contents it adds and drops in one pass in
//! hash order (so two appends lock shared blobs in the same order and cannot deadlock),
//! inserting a supplied content it does not hold yet, then writes the file rows, then
//! deletes the blobs it left unheld (rows it has locked already). The foreign key from
//! files to blobs makes a miscount an error, never a file without content.

use super::Result;
use crate::backend::Backend;
use crate::plan::{AppendError, AppendPlan};
use crate::query::Query;
use crate::rows::workspace::{ContentRow, FileRow, file_columns};
use crate::store::Store;
use async_trait::async_trait;
use baton_core::StoreError;
use baton_core::model::{FileContent, WorkspaceFile, WorkspaceUsage};
use baton_core::ports::{AppendRequest, Blob, PathState, WorkspaceStore};
use baton_events::{FileChangeKind, RunEvent, RunId, TenantId, WorkspaceChanged};
use sqlx::Transaction;
use std::collections::BTreeMap;

/// A page of the run's files in path order (`$3` is the previous page's last path).
const FILES: &str = concat!(
    "SELECT ",
    file_columns!(),
    " FROM workspace_files f WHERE f.tenant_id = $1 AND f.run_id = $2 \
     AND f.sha256 IS NOT NULL AND f.path > $3 ORDER BY f.path LIMIT $4"
);

/// One of the run's files.
const FILE: &str = concat!(
    "SELECT ",
    file_columns!(),
    " FROM workspace_files f WHERE f.tenant_id = $1 AND f.run_id = $2 AND f.path = $3 \
     AND f.sha256 IS NOT NULL"
);

/// One of the run's files with its content.
const FILE_CONTENT: &str = concat!(
    "SELECT ",
    file_columns!(),
    ", b.content FROM workspace_files f JOIN blobs b \
     ON b.tenant_id = f.tenant_id AND b.sha256 = f.sha256 \
     WHERE f.tenant_id = $1 AND f.run_id = $2 AND f.path = $3"
);

const RUN_USAGE: &str = "SELECT COUNT(*) AS files, CAST(COALESCE(SUM(size), 0) AS BIGINT) \
     AS bytes FROM workspace_files WHERE tenant_id = $1 AND run_id = $2 \
     AND sha256 IS NOT NULL";

const TENANT_BYTES: &str =
    "SELECT CAST(COALESCE(SUM(size), 0) AS BIGINT) FROM blobs WHERE tenant_id = $1";

#[async_trait]
impl<B: Backend> WorkspaceStore for Store<B> {
    #[tracing::instrument(name = "store.list_files", skip_all)]
    async fn list_files(
        &self,
        tenant: TenantId,
        run: RunId,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<WorkspaceFile>> {
        let q = Query::new(FILES)
            .bind(tenant.as_uuid())
            .bind(run.as_uuid())
            .bind(after.unwrap_or(""))
            .bind(i64::from(limit));
        self.tenant_rows::<FileRow, _>(tenant, q).await
    }

    #[tracing::instrument(name = "store.get_file", skip_all)]
    async fn get_file(
        &self,
        tenant: TenantId,
        run: RunId,
        path: &str,
    ) -> Result<Option<WorkspaceFile>> {
        let q = Query::new(FILE)
            .bind(tenant.as_uuid())
            .bind(run.as_uuid())
            .bind(path);
        self.tenant_row::<FileRow, _>(tenant, q).await
    }

    #[tracing::instrument(name = "store.read_file", skip_all)]
    async fn read_file(
        &self,
        tenant: TenantId,
        run: RunId,
        path: &str,
    ) -> Result<Option<FileContent>> {
        let q = Query::new(FILE_CONTENT)
            .bind(tenant.as_uuid())
            .bind(run.as_uuid())
            .bind(path);
        self.tenant_row::<ContentRow, _>(tenant, q).await
    }

    #[tracing::instrument(name = "store.run_contents", skip_all)]
    async fn run_contents(&self, tenant: TenantId, run: RunId) -> Result<Vec<Blob>> {
        let q = Query::new(
            "SELECT b.sha256, b.content FROM blobs b WHERE b.tenant_id = $1 AND b.sha256 IN \
             (SELECT f.sha256 FROM workspace_files f WHERE f.tenant_id = $1 AND f.run_id = $2 \
             AND f.sha256 IS NOT NULL)",
        )
        .bind(tenant.as_uuid())
        .bind(run.as_uuid());
        let mut conn = self
            .pools
            .read(
                crate::pools::PoolKind::App,
                crate::pools::Scope::Tenant(tenant),
            )
            .await?;
        let rows: Vec<(String, Vec<u8>)> = q.fetch_all(&mut conn).await?;
        Ok(rows
            .into_iter()
            .map(|(sha256, content)| Blob { sha256, content })
            .collect())
    }

    #[tracing::instrument(name = "store.workspace_state", skip_all)]
    async fn workspace_state(&self, tenant: TenantId, run: RunId) -> Result<Vec<PathState>> {
        let q = Query::new(
            "SELECT path, sha256, size, version FROM workspace_files \
             WHERE tenant_id = $1 AND run_id = $2 ORDER BY path",
        )
        .bind(tenant.as_uuid())
        .bind(run.as_uuid());
        let mut conn = self
            .pools
            .read(
                crate::pools::PoolKind::App,
                crate::pools::Scope::Tenant(tenant),
            )
            .await?;
        let rows: Vec<(String, Option<String>, i64, i64)> = q.fetch_all(&mut conn).await?;
        Ok(rows
            .into_iter()
            .map(|(path, sha256, size, version)| PathState {
                path,
                version,
                sha256,
                size: u64::try_from(size).unwrap_or(0),
            })
            .collect())
    }

    #[tracing::instrument(name = "store.workspace_usage", skip_all)]
    async fn workspace_usage(&self, tenant: TenantId, run: RunId) -> Result<WorkspaceUsage> {
        let mut conn = self
            .pools
            .read(
                crate::pools::PoolKind::App,
                crate::pools::Scope::Tenant(tenant),
            )
            .await?;
        let (files, bytes): (i64, i64) = Query::new(RUN_USAGE)
            .bind(tenant.as_uuid())
            .bind(run.as_uuid())
            .fetch_one(&mut conn)
            .await?;
        let (tenant_bytes,): (i64,) = Query::new(TENANT_BYTES)
            .bind(tenant.as_uuid())
            .fetch_one(&mut conn)
            .await?;
        let count = |n: i64| u64::try_from(n).unwrap_or(0);
        Ok(WorkspaceUsage {
            files: count(files),
            bytes: count(bytes),
            tenant_bytes: count(tenant_bytes),
        })
    }
}

/// Folds the appended `workspace.changed` events into the run's files and the tenant's
/// blobs, in order.
pub(super) async fn project_workspace<B: Backend>(
    tx: &mut Transaction<'static, B>,
    tenant: TenantId,
    req: &AppendRequest,
    plan: &AppendPlan,
) -> Result<(), AppendError> {
    for (new, planned) in req.events.iter().zip(&plan.events) {
        if let RunEvent::WorkspaceChanged(change) = &new.event {
            let version = planned.version;
            apply(tx, tenant, plan, req, change, version).await?;
        }
    }
    Ok(())
}

async fn apply<B: Backend>(
    tx: &mut Transaction<'static, B>,
    tenant: TenantId,
    plan: &AppendPlan,
    req: &AppendRequest,
    change: &WorkspaceChanged,
    version: i64,
) -> Result<(), AppendError> {
    let run = plan.summary.id;
    // What each path holds now, and so how the counts move.
    let mut refs: BTreeMap<&str, i64> = BTreeMap::new();
    let mut before = Vec::with_capacity(change.changes.len());
    for c in &change.changes {
        let held: Option<(Option<String>,)> = Query::new(
            "SELECT sha256 FROM workspace_files WHERE tenant_id = $1 AND run_id = $2 \
             AND path = $3",
        )
        .bind(tenant.as_uuid())
        .bind(run.as_uuid())
        .bind(&c.path)
        .fetch_optional(&mut *tx)
        .await?;
        before.push(held.and_then(|(sha,)| sha));
    }
    for (c, held) in change.changes.iter().zip(&before) {
        if let Some(old) = held {
            *refs.entry(old.as_str()).or_default() -= 1;
        }
        if c.change != FileChangeKind::Removed {
            let sha = c
                .sha256
                .as_deref()
                .ok_or_else(|| invalid(format!("the change of {:?} names no content", c.path)))?;
            *refs.entry(sha).or_default() += 1;
        }
    }
    for (sha, delta) in refs.iter().filter(|(_, d)| **d != 0) {
        count(tx, tenant, req, sha, *delta).await?;
    }
    for c in &change.changes {
        let size = match c.change {
            FileChangeKind::Removed => 0,
            _ => i64::try_from(c.size.unwrap_or(0))
                .map_err(|_| invalid(format!("the size of {:?} is out of range", c.path)))?,
        };
        let sha = (c.change != FileChangeKind::Removed)
            .then_some(c.sha256.as_deref())
            .flatten();
        Query::new(
            "INSERT INTO workspace_files \
             (tenant_id, run_id, path, sha256, size, version, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) \
             ON CONFLICT (tenant_id, run_id, path) DO UPDATE SET \
             sha256 = excluded.sha256, size = excluded.size, version = excluded.version, \
             updated_at = excluded.updated_at",
        )
        .bind(tenant.as_uuid())
        .bind(run.as_uuid())
        .bind(&c.path)
        .bind(sha)
        .bind(size)
        .bind(version)
        .bind(plan.at)
        .execute(&mut *tx)
        .await?;
    }
    for (sha, _) in refs.iter().filter(|(_, d)| **d < 0) {
        Query::new("DELETE FROM blobs WHERE tenant_id = $1 AND sha256 = $2 AND refs <= 0")
            .bind(tenant.as_uuid())
            .bind(*sha)
            .execute(&mut *tx)
            .await?;
    }
    Ok(())
}

/// Moves blob `sha`'s count by `delta`; a content counted for the first time must be
/// among the request's blobs (and hash to its name).
async fn count<B: Backend>(
    tx: &mut Transaction<'static, B>,
    tenant: TenantId,
    req: &AppendRequest,
    sha: &str,
    delta: i64,
) -> Result<(), AppendError> {
    let supplied = req.blobs.iter().find(|b| b.sha256 == sha);
    match supplied {
        Some(blob) if delta > 0 => {
            check_hash(blob)?;
            Query::new(
                "INSERT INTO blobs (tenant_id, sha256, size, content, refs) \
                 VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT (tenant_id, sha256) DO UPDATE SET refs = blobs.refs + $5",
            )
            .bind(tenant.as_uuid())
            .bind(sha)
            .bind(blob.content.len() as i64)
            .bind(blob.content.as_slice())
            .bind(delta)
            .execute(&mut *tx)
            .await?;
        }
        _ => {
            let moved = Query::new(
                "UPDATE blobs SET refs = refs + $3 WHERE tenant_id = $1 AND sha256 = $2",
            )
            .bind(tenant.as_uuid())
            .bind(sha)
            .bind(delta)
            .execute(&mut *tx)
            .await?;
            if moved != 1 {
                return Err(invalid(format!(
                    "content {sha} is neither stored nor supplied"
                )));
            }
        }
    }
    Ok(())
}

/// A supplied blob must be what its name says.
fn check_hash(blob: &Blob) -> Result<(), AppendError> {
    if Blob::name_of(&blob.content) != blob.sha256 {
        return Err(invalid(format!(
            "the content supplied as {} does not hash to it",
            blob.sha256
        )));
    }
    Ok(())
}

fn invalid(msg: String) -> AppendError {
    AppendError::Store(StoreError::Other(format!("invalid append: {msg}")))
}
