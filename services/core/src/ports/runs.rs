//! Reading runs: their event streams and the projections derived from them.

use crate::error::StoreError;
use crate::model::{Message, Receipt, RunStatus, RunSummary};
use async_trait::async_trait;
use baton_events::{Envelope, RunId, TenantId};

/// The stored outcome of a command carrying a client `request_id`.
#[derive(Debug, Clone, PartialEq)]
pub struct IdempotencyRecord {
    pub request_id: String,
    /// The use case that stored it (`post_message`, `create_run`).
    pub command: String,
    /// Hash of the command's input; a reused `request_id` with other input is refused.
    pub fingerprint: String,
    /// The original response, returned again for a repeated request.
    pub response: serde_json::Value,
}

/// Filter and cursor for listing runs, newest first.
#[derive(Debug, Clone, Default)]
pub struct RunListQuery {
    pub status: Option<RunStatus>,
    /// Only runs older than this one (the previous page's last id).
    pub before: Option<RunId>,
    pub limit: u32,
}

/// The read side of runs: event streams, the runs, messages and receipts projections,
/// and idempotency records. The engine and SSE followers read through it.
#[async_trait]
pub trait RunReader: Send + Sync {
    /// Events of a stream with `version > after`, in order, at most `limit`.
    async fn read_stream(
        &self,
        tenant: TenantId,
        run: RunId,
        after: i64,
        limit: u32,
    ) -> Result<Vec<Envelope>, StoreError>;

    async fn get_run(&self, tenant: TenantId, run: RunId)
    -> Result<Option<RunSummary>, StoreError>;

    async fn list_runs(
        &self,
        tenant: TenantId,
        query: &RunListQuery,
    ) -> Result<Vec<RunSummary>, StoreError>;

    /// Messages with `seq > after`, in order, at most `limit`.
    async fn list_messages(
        &self,
        tenant: TenantId,
        run: RunId,
        after: i64,
        limit: u32,
    ) -> Result<Vec<Message>, StoreError>;

    async fn find_idempotency(
        &self,
        tenant: TenantId,
        request_id: &str,
    ) -> Result<Option<IdempotencyRecord>, StoreError>;

    /// The run's tool-call receipts in the order they were created.
    async fn list_receipts(&self, tenant: TenantId, run: RunId)
    -> Result<Vec<Receipt>, StoreError>;

    /// Cheap connectivity check for readiness.
    async fn ping(&self) -> Result<(), StoreError>;
}
