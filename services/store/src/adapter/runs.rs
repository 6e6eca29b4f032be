//! `RunReader`: the reads of streams, runs, messages, receipts and idempotency records,
//! each on a connection of the `app` pool scoped to the caller's tenant. Every query binds
//! the tenant too; the append is `append.rs`.

use super::Result;
use super::reads::{by_id, page_of};
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
use baton_core::model::{Message, Receipt, RunSummary};
use baton_core::ports::{IdempotencyRecord, RunListQuery, RunReader};
use baton_events::{Envelope, RunId, TenantId};

/// A page of a run's events after a version, in order: `$1` the run, `$2` the tenant,
/// `$3` the version, `$4` the limit.
const EVENTS_AFTER: &str = concat!(
    "SELECT ",
    event_columns!(),
    " FROM events WHERE stream_id = $1 AND tenant_id = $2 AND version > $3 \
     ORDER BY version LIMIT $4"
);

/// A page of a run's messages after a sequence number, in order: `$1` the run, `$2`
/// the tenant, `$3` the sequence number, `$4` the limit.
const MESSAGES_AFTER: &str = concat!(
    "SELECT ",
    message_columns!(),
    " FROM messages WHERE run_id = $1 AND tenant_id = $2 AND seq > $3 \
     ORDER BY seq LIMIT $4"
);

/// A tenant's idempotency record by request id.
const IDEMPOTENCY_RECORD: &str = concat!(
    "SELECT ",
    idempotency_columns!(),
    " FROM idempotency WHERE tenant_id = $1 AND request_id = $2"
);

/// A run's receipts in the order they were created.
const RECEIPTS_OF_RUN: &str = concat!(
    "SELECT ",
    receipt_columns!(),
    " FROM receipts WHERE tenant_id = $1 AND run_id = $2 \
     ORDER BY created_version, id"
);

/// The `SELECT` of every column a [`RunRow`] reads, from `runs`.
const SELECT_RUNS: &str = concat!("SELECT ", run_columns!(), " FROM runs");

#[async_trait]
impl<B: Backend> RunReader for Store<B> {
    #[tracing::instrument(name = "store.read_stream", skip_all)]
    async fn read_stream(
        &self,
        tenant: TenantId,
        run: RunId,
        after: i64,
        limit: u32,
    ) -> Result<Vec<Envelope>> {
        self.run_page::<EventRow, _>(tenant, EVENTS_AFTER, run, after, limit)
            .await
    }

    #[tracing::instrument(name = "store.get_run", skip_all)]
    async fn get_run(&self, tenant: TenantId, run: RunId) -> Result<Option<RunSummary>> {
        self.one_by_id::<RunRow, _>(tenant, SELECT_RUNS, run.as_uuid())
            .await
    }

    #[tracing::instrument(name = "store.run_and_events_after", skip_all)]
    async fn run_and_events_after(
        &self,
        tenant: TenantId,
        run: RunId,
        after: i64,
        limit: u32,
    ) -> Result<Option<(RunSummary, Vec<Envelope>)>> {
        let mut conn = self
            .pools
            .read(PoolKind::App, Scope::Tenant(tenant))
            .await?;
        let row = by_id::<B>(SELECT_RUNS, tenant, run.as_uuid())
            .fetch_optional::<RunRow>(&mut conn)
            .await?;
        let Some(summary) = row.map(RunSummary::try_from).transpose()? else {
            return Ok(None);
        };
        let events = if after < summary.version {
            map_all(
                page_of::<B>(EVENTS_AFTER, tenant, run, after, limit)
                    .fetch_all::<EventRow>(&mut conn)
                    .await?,
            )?
        } else {
            Vec::new()
        };
        Ok(Some((summary, events)))
    }

    #[tracing::instrument(name = "store.list_runs", skip_all)]
    async fn list_runs(&self, tenant: TenantId, query: &RunListQuery) -> Result<Vec<RunSummary>> {
        let f = &query.filter;
        let mut q = Query::<B>::new(SELECT_RUNS);
        q.push(" WHERE tenant_id = ").push_bind(tenant.as_uuid());
        if let Some(agent) = f.agent {
            q.push(" AND agent_id = ").push_bind(agent.as_uuid());
        }
        if let Some(parent) = f.parent {
            q.push(" AND parent_run_id = ").push_bind(parent.as_uuid());
        }
        if let Some(status) = f.status {
            q.push(" AND status = ").push_bind(status.as_str());
        }
        B::push_labels(&mut q, &f.metadata);
        if let Some(needle) = &f.title_contains {
            q.push(" AND ")
                .push(B::POSITION_OF)
                .push("title_folded, ")
                .push_bind(needle.clone())
                .push(") > 0");
        }
        for (bound, sql) in [
            (f.created_after, " AND created_at > "),
            (f.created_before, " AND created_at < "),
            (f.updated_after, " AND updated_at > "),
            (f.updated_before, " AND updated_at < "),
        ] {
            if let Some(t) = bound {
                q.push(sql).push_bind(t);
            }
        }
        if let Some(before) = query.before {
            q.push(" AND id < ").push_bind(before.as_uuid());
        }
        q.push(" ORDER BY id DESC LIMIT ")
            .push_bind(i64::from(query.limit));
        self.tenant_rows::<RunRow, _>(tenant, q).await
    }

    #[tracing::instrument(name = "store.list_messages", skip_all)]
    async fn list_messages(
        &self,
        tenant: TenantId,
        run: RunId,
        after: i64,
        limit: u32,
    ) -> Result<Vec<Message>> {
        self.run_page::<MessageRow, _>(tenant, MESSAGES_AFTER, run, after, limit)
            .await
    }

    #[tracing::instrument(name = "store.find_idempotency", skip_all)]
    async fn find_idempotency(
        &self,
        tenant: TenantId,
        request_id: &str,
    ) -> Result<Option<IdempotencyRecord>> {
        let q = Query::new(IDEMPOTENCY_RECORD)
            .bind(tenant.as_uuid())
            .bind(request_id);
        self.tenant_row::<IdempotencyRow, _>(tenant, q).await
    }

    #[tracing::instrument(name = "store.list_receipts", skip_all)]
    async fn list_receipts(&self, tenant: TenantId, run: RunId) -> Result<Vec<Receipt>> {
        let q = Query::new(RECEIPTS_OF_RUN)
            .bind(tenant.as_uuid())
            .bind(run.as_uuid());
        self.tenant_rows::<ReceiptRow, _>(tenant, q).await
    }

    async fn ping(&self) -> Result<()> {
        let mut conn = self.pools.read(PoolKind::App, Scope::NoTenant).await?;
        Query::new("SELECT 1").execute(&mut conn).await.map(drop)
    }
}
