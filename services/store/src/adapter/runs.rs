//! `RunReader` for both adapters: the reads of streams, runs, messages, receipts and
//! idempotency records, each on a connection of the `app` pool scoped to the caller's
//! tenant. Every query binds the tenant too; `append` lives in `append.rs`.

/// Implements `RunReader` for `$store` (a `$db` store), mapping driver errors with
/// `$classify`. Invoked through [`super::impl_ports!`].
macro_rules! impl_run_store {
    ($store:ty, $db:ty, $classify:path) => {
        const _: () = {
            use async_trait::async_trait;
            use baton_core::StoreError;
            use baton_core::model::{Message, Receipt, RunSummary};
            use baton_core::ports::{IdempotencyRecord, RunListQuery, RunReader};
            use baton_events::{Envelope, RunId, TenantId};
            use $crate::pools::{PoolKind, Scope};
            use $crate::rows::{
                EventRow, IdempotencyRow, MessageRow, ReceiptRow, RunRow, event_columns,
                idempotency_columns, map_all, message_columns, receipt_columns, run_columns,
            };

            #[async_trait]
            impl RunReader for $store {
                #[tracing::instrument(name = "store.read_stream", skip_all)]
                async fn read_stream(
                    &self,
                    tenant: TenantId,
                    run: RunId,
                    after: i64,
                    limit: u32,
                ) -> Result<Vec<Envelope>, StoreError> {
                    let mut conn = self
                        .pools
                        .read(PoolKind::App, Scope::Tenant(tenant))
                        .await?;
                    let rows: Vec<EventRow> = sqlx::query_as(concat!(
                        "SELECT ",
                        event_columns!(),
                        " FROM events WHERE stream_id = $1 AND tenant_id = $2 AND version > $3 \
                         ORDER BY version LIMIT $4"
                    ))
                    .bind(run.as_uuid())
                    .bind(tenant.as_uuid())
                    .bind(after)
                    .bind(i64::from(limit))
                    .fetch_all(&mut *conn)
                    .await
                    .map_err($classify)?;
                    map_all(rows)
                }

                #[tracing::instrument(name = "store.get_run", skip_all)]
                async fn get_run(
                    &self,
                    tenant: TenantId,
                    run: RunId,
                ) -> Result<Option<RunSummary>, StoreError> {
                    self.one_by_id::<RunRow, _>(
                        tenant,
                        concat!("SELECT ", run_columns!(), " FROM runs"),
                        run.as_uuid(),
                    )
                    .await
                }

                #[tracing::instrument(name = "store.list_runs", skip_all)]
                async fn list_runs(
                    &self,
                    tenant: TenantId,
                    query: &RunListQuery,
                ) -> Result<Vec<RunSummary>, StoreError> {
                    self.newest_first::<RunRow, _>(
                        tenant,
                        concat!("SELECT ", run_columns!(), " FROM runs"),
                        query.status.map(|s| ("status", s.as_str())),
                        query.before.map(|b| b.as_uuid()),
                        query.limit,
                    )
                    .await
                }

                #[tracing::instrument(name = "store.list_messages", skip_all)]
                async fn list_messages(
                    &self,
                    tenant: TenantId,
                    run: RunId,
                    after: i64,
                    limit: u32,
                ) -> Result<Vec<Message>, StoreError> {
                    let mut conn = self
                        .pools
                        .read(PoolKind::App, Scope::Tenant(tenant))
                        .await?;
                    let rows: Vec<MessageRow> = sqlx::query_as(concat!(
                        "SELECT ",
                        message_columns!(),
                        " FROM messages WHERE run_id = $1 AND tenant_id = $2 AND seq > $3 \
                         ORDER BY seq LIMIT $4"
                    ))
                    .bind(run.as_uuid())
                    .bind(tenant.as_uuid())
                    .bind(after)
                    .bind(i64::from(limit))
                    .fetch_all(&mut *conn)
                    .await
                    .map_err($classify)?;
                    map_all(rows)
                }

                #[tracing::instrument(name = "store.find_idempotency", skip_all)]
                async fn find_idempotency(
                    &self,
                    tenant: TenantId,
                    request_id: &str,
                ) -> Result<Option<IdempotencyRecord>, StoreError> {
                    let mut conn = self
                        .pools
                        .read(PoolKind::App, Scope::Tenant(tenant))
                        .await?;
                    let row: Option<IdempotencyRow> = sqlx::query_as(concat!(
                        "SELECT ",
                        idempotency_columns!(),
                        " FROM idempotency WHERE tenant_id = $1 AND request_id = $2"
                    ))
                    .bind(tenant.as_uuid())
                    .bind(request_id)
                    .fetch_optional(&mut *conn)
                    .await
                    .map_err($classify)?;
                    Ok(row.map(IdempotencyRecord::from))
                }

                #[tracing::instrument(name = "store.list_receipts", skip_all)]
                async fn list_receipts(
                    &self,
                    tenant: TenantId,
                    run: RunId,
                ) -> Result<Vec<Receipt>, StoreError> {
                    let mut conn = self
                        .pools
                        .read(PoolKind::App, Scope::Tenant(tenant))
                        .await?;
                    let rows: Vec<ReceiptRow> = sqlx::query_as(concat!(
                        "SELECT ",
                        receipt_columns!(),
                        " FROM receipts WHERE tenant_id = $1 AND run_id = $2 \
                         ORDER BY created_version, id"
                    ))
                    .bind(tenant.as_uuid())
                    .bind(run.as_uuid())
                    .fetch_all(&mut *conn)
                    .await
                    .map_err($classify)?;
                    map_all(rows)
                }

                async fn ping(&self) -> Result<(), StoreError> {
                    let mut conn = self.pools.read(PoolKind::App, Scope::NoTenant).await?;
                    sqlx::query("SELECT 1")
                        .execute(&mut *conn)
                        .await
                        .map(|_| ())
                        .map_err($classify)
                }
            }
        };
    };
}
pub(crate) use impl_run_store;
