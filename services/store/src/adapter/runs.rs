//! `RunReader`: the reads of streams, runs, messages, receipts and idempotency records,
//! each on a connection of the `app` pool scoped to the caller's tenant. Every query binds
//! the tenant too; the append is `append.rs`.

use crate::backend::Backend;
use crate::pools::{PoolKind, Scope};
use crate::query::Query;
use crate::rows::map_all;
use crate::rows::receipts::{ReceiptRow, receipt_columns};
use crate::rows::runs::{
    EventRow, IdempotencyRow, MessageRow, RunRow, event_columns, idempotency_columns,
    message_columns, run_columns,
};
use crate::store::Store;
use async_trait::async_trait;
use baton_core::StoreError;
use baton_core::model::{Message, Receipt, RunSummary};
use baton_core::ports::{IdempotencyRecord, RunListQuery, RunReader};
use baton_events::{Envelope, RunId, TenantId};

#[async_trait]
impl<B: Backend> RunReader for Store<B> {
    #[tracing::instrument(name = "store.read_stream", skip_all)]
    async fn read_stream(
        &self,
        tenant: TenantId,
        run: RunId,
        after: i64,
        limit: u32,
    ) -> Result<Vec<Envelope>, StoreError> {
        let q = Query::new(concat!(
            "SELECT ",
            event_columns!(),
            " FROM events WHERE stream_id = $1 AND tenant_id = $2 AND version > $3 \
             ORDER BY version LIMIT $4"
        ))
        .bind(run.as_uuid())
        .bind(tenant.as_uuid())
        .bind(after)
        .bind(i64::from(limit));
        let rows: Vec<EventRow> = self
            .read_all(PoolKind::App, Scope::Tenant(tenant), q)
            .await?;
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
        let q = Query::new(concat!(
            "SELECT ",
            message_columns!(),
            " FROM messages WHERE run_id = $1 AND tenant_id = $2 AND seq > $3 \
             ORDER BY seq LIMIT $4"
        ))
        .bind(run.as_uuid())
        .bind(tenant.as_uuid())
        .bind(after)
        .bind(i64::from(limit));
        let rows: Vec<MessageRow> = self
            .read_all(PoolKind::App, Scope::Tenant(tenant), q)
            .await?;
        map_all(rows)
    }

    #[tracing::instrument(name = "store.find_idempotency", skip_all)]
    async fn find_idempotency(
        &self,
        tenant: TenantId,
        request_id: &str,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        let q = Query::new(concat!(
            "SELECT ",
            idempotency_columns!(),
            " FROM idempotency WHERE tenant_id = $1 AND request_id = $2"
        ))
        .bind(tenant.as_uuid())
        .bind(request_id);
        let row: Option<IdempotencyRow> = self
            .read_optional(PoolKind::App, Scope::Tenant(tenant), q)
            .await?;
        Ok(row.map(IdempotencyRecord::from))
    }

    #[tracing::instrument(name = "store.list_receipts", skip_all)]
    async fn list_receipts(
        &self,
        tenant: TenantId,
        run: RunId,
    ) -> Result<Vec<Receipt>, StoreError> {
        let q = Query::new(concat!(
            "SELECT ",
            receipt_columns!(),
            " FROM receipts WHERE tenant_id = $1 AND run_id = $2 \
             ORDER BY created_version, id"
        ))
        .bind(tenant.as_uuid())
        .bind(run.as_uuid());
        let rows: Vec<ReceiptRow> = self
            .read_all(PoolKind::App, Scope::Tenant(tenant), q)
            .await?;
        map_all(rows)
    }

    async fn ping(&self) -> Result<(), StoreError> {
        let mut conn = self.pools.read(PoolKind::App, Scope::NoTenant).await?;
        Query::new("SELECT 1").execute(&mut conn).await.map(drop)
    }
}
