//! `CheckpointStore`: sealed snapshots keyed by (run, id), written and read through the
//! `checkpoint` pool, scoped to the caller's tenant. The store only ever holds what the
//! keyring sealed.

use super::Result;
use crate::backend::Backend;
use crate::plan::micros;
use crate::pools::{PoolKind, Scope};
use crate::query::Query;
use crate::rows::checkpoints::{CheckpointMetaRow, CheckpointRow, checkpoint_columns};
use crate::store::Store;
use async_trait::async_trait;
use baton_core::StoreError;
use baton_core::model::CheckpointMeta;
use baton_core::ports::{CheckpointStore, StoredCheckpoint};
use baton_events::{RunId, TenantId};

/// A run's newest checkpoints, with their contents.
const LATEST_CHECKPOINTS: &str = concat!(
    "SELECT ",
    checkpoint_columns!(),
    ", ciphertext FROM checkpoints WHERE tenant_id = $1 AND run_id = $2 \
     ORDER BY through_version DESC, created_at DESC LIMIT $3"
);

/// A run's checkpoints, oldest first, without their contents.
const CHECKPOINTS_OF_RUN: &str = concat!(
    "SELECT ",
    checkpoint_columns!(),
    " FROM checkpoints WHERE tenant_id = $1 AND run_id = $2 \
     ORDER BY through_version, created_at"
);

#[async_trait]
impl<B: Backend> CheckpointStore for Store<B> {
    #[tracing::instrument(name = "store.save_checkpoint", skip_all)]
    async fn save_checkpoint(
        &self,
        tenant: TenantId,
        run: RunId,
        c: &StoredCheckpoint,
    ) -> Result<()> {
        let size = i64::try_from(c.meta.size)
            .map_err(|_| StoreError::Other(format!("checkpoint {} is too large", c.meta.id)))?;
        // Only for a run that still exists, its row locked: a deletion that got in first
        // (after the turn settled, before its checkpoint was written) leaves no snapshot
        // behind, and one that comes after deletes it with the rest.
        let mut q = Query::new(
            "INSERT INTO checkpoints (tenant_id, run_id, id, through_version, \
             key_id, size, sha256, ciphertext, created_at) \
             SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9 WHERE EXISTS \
             (SELECT 1 FROM runs WHERE id = $2 AND tenant_id = $1",
        );
        q.push(B::LOCK_ROWS).push(")");
        let q = q
            .bind(tenant.as_uuid())
            .bind(run.as_uuid())
            .bind(c.meta.id.as_uuid())
            .bind(c.meta.through_version)
            .bind(&c.meta.key_id)
            .bind(size)
            .bind(&c.meta.sha256)
            .bind(c.ciphertext.as_slice())
            .bind(micros(c.meta.created_at));
        match self
            .write_one(PoolKind::Checkpoint, Scope::Tenant(tenant), q)
            .await?
        {
            0 => Err(StoreError::NotFound),
            _ => Ok(()),
        }
    }

    #[tracing::instrument(name = "store.latest_checkpoints", skip_all)]
    async fn latest_checkpoints(
        &self,
        tenant: TenantId,
        run: RunId,
        limit: u32,
    ) -> Result<Vec<StoredCheckpoint>> {
        let q = Query::new(LATEST_CHECKPOINTS)
            .bind(tenant.as_uuid())
            .bind(run.as_uuid())
            .bind(i64::from(limit));
        self.read_all::<CheckpointRow, _>(PoolKind::Checkpoint, Scope::Tenant(tenant), q)
            .await
    }

    #[tracing::instrument(name = "store.list_checkpoints", skip_all)]
    async fn list_checkpoints(&self, tenant: TenantId, run: RunId) -> Result<Vec<CheckpointMeta>> {
        let q = Query::new(CHECKPOINTS_OF_RUN)
            .bind(tenant.as_uuid())
            .bind(run.as_uuid());
        self.read_all::<CheckpointMetaRow, _>(PoolKind::Checkpoint, Scope::Tenant(tenant), q)
            .await
    }
}
