//! `CheckpointStore` for both adapters: sealed snapshots keyed by (run, id), written
//! through the checkpoint pool. The store only ever holds what the keyring sealed.

/// Implements `CheckpointStore` for `$store`, mapping driver errors with `$classify`;
/// every statement runs on the `checkpoint` pool, scoped to the caller's tenant. Invoked
/// through [`super::impl_ports!`].
macro_rules! impl_checkpoint_store {
    ($store:ty, $classify:path) => {
        const _: () = {
            use async_trait::async_trait;
            use baton_core::StoreError;
            use baton_core::model::CheckpointMeta;
            use baton_core::ports::{CheckpointStore, StoredCheckpoint};
            use baton_events::{RunId, TenantId};
            use $crate::plan::micros;
            use $crate::pools::{PoolKind, Scope};
            use $crate::rows::{CheckpointMetaRow, CheckpointRow, checkpoint_columns};

            #[async_trait]
            impl CheckpointStore for $store {
                #[tracing::instrument(name = "store.save_checkpoint", skip_all)]
                async fn save_checkpoint(
                    &self,
                    tenant: TenantId,
                    run: RunId,
                    c: &StoredCheckpoint,
                ) -> Result<(), StoreError> {
                    let size = i64::try_from(c.meta.size).map_err(|_| {
                        StoreError::Other(format!("checkpoint {} is too large", c.meta.id))
                    })?;
                    let mut tx = self
                        .pools
                        .write(PoolKind::Checkpoint, Scope::Tenant(tenant))
                        .await?;
                    sqlx::query(
                        "INSERT INTO checkpoints (tenant_id, run_id, id, through_version, \
                         key_id, size, sha256, ciphertext, created_at) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                    )
                    .bind(tenant.as_uuid())
                    .bind(run.as_uuid())
                    .bind(c.meta.id.as_uuid())
                    .bind(c.meta.through_version)
                    .bind(&c.meta.key_id)
                    .bind(size)
                    .bind(&c.meta.sha256)
                    .bind(c.ciphertext.as_slice())
                    .bind(micros(c.meta.created_at))
                    .execute(&mut *tx)
                    .await
                    .map_err($classify)?;
                    tx.commit().await.map_err($classify)
                }

                #[tracing::instrument(name = "store.latest_checkpoints", skip_all)]
                async fn latest_checkpoints(
                    &self,
                    tenant: TenantId,
                    run: RunId,
                    limit: u32,
                ) -> Result<Vec<StoredCheckpoint>, StoreError> {
                    let mut conn = self
                        .pools
                        .read(PoolKind::Checkpoint, Scope::Tenant(tenant))
                        .await?;
                    let rows: Vec<CheckpointRow> = sqlx::query_as(concat!(
                        "SELECT ",
                        checkpoint_columns!(),
                        ", ciphertext FROM checkpoints WHERE tenant_id = $1 AND run_id = $2 \
                         ORDER BY through_version DESC, created_at DESC LIMIT $3"
                    ))
                    .bind(tenant.as_uuid())
                    .bind(run.as_uuid())
                    .bind(i64::from(limit))
                    .fetch_all(&mut *conn)
                    .await
                    .map_err($classify)?;
                    rows.into_iter().map(StoredCheckpoint::try_from).collect()
                }

                #[tracing::instrument(name = "store.list_checkpoints", skip_all)]
                async fn list_checkpoints(
                    &self,
                    tenant: TenantId,
                    run: RunId,
                ) -> Result<Vec<CheckpointMeta>, StoreError> {
                    let mut conn = self
                        .pools
                        .read(PoolKind::Checkpoint, Scope::Tenant(tenant))
                        .await?;
                    let rows: Vec<CheckpointMetaRow> = sqlx::query_as(concat!(
                        "SELECT ",
                        checkpoint_columns!(),
                        " FROM checkpoints WHERE tenant_id = $1 AND run_id = $2 \
                         ORDER BY through_version, created_at"
                    ))
                    .bind(tenant.as_uuid())
                    .bind(run.as_uuid())
                    .fetch_all(&mut *conn)
                    .await
                    .map_err($classify)?;
                    rows.into_iter().map(CheckpointMeta::try_from).collect()
                }
            }
        };
    };
}
pub(crate) use impl_checkpoint_store;
