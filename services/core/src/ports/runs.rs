//! Reading runs: their event streams and the projections derived from them.

use crate::error::StoreError;
use crate::model::{Message, Receipt, RunStatus, RunSummary};
use async_trait::async_trait;
use baton_events::{AgentId, Envelope, RunId, TenantId};
use chrono::{DateTime, Utc};

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
    pub filter: RunFilter,
    /// Only runs older than this one (the previous page's last id).
    pub before: Option<RunId>,
    pub limit: u32,
}

/// What a run list is narrowed to; every condition must hold.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunFilter {
    pub agent: Option<AgentId>,
    /// Runs a `delegate` tool call of this run started.
    pub parent: Option<RunId>,
    pub status: Option<RunStatus>,
    /// Every pair must be one of the run's labels.
    pub metadata: Vec<(String, String)>,
    /// Runs whose title contains this, folded with [`fold_title`].
    pub title_contains: Option<String>,
    pub created_after: Option<DateTime<Utc>>,
    pub created_before: Option<DateTime<Utc>>,
    pub updated_after: Option<DateTime<Utc>>,
    pub updated_before: Option<DateTime<Utc>>,
}

/// How titles are compared by a search: lower-cased, in Rust, so both databases compare
/// the same way (the store keeps a folded copy of each title).
pub fn fold_title(title: &str) -> String {
    title.to_lowercase()
}

impl RunFilter {
    /// Whether `run` passes: what the store's query must answer, stated in memory
    /// (time bounds are exclusive).
    pub fn matches(&self, run: &RunSummary) -> bool {
        let title = run.title.as_deref().map(fold_title);
        self.agent.is_none_or(|a| run.agent_id == a)
            && self.parent.is_none_or(|p| run.parent_run_id == Some(p))
            && self.status.is_none_or(|s| run.status == s)
            && self
                .metadata
                .iter()
                .all(|(k, v)| run.metadata.get(k) == Some(v))
            && self
                .title_contains
                .as_deref()
                .is_none_or(|q| title.as_deref().is_some_and(|t| t.contains(q)))
            && self.created_after.is_none_or(|t| run.created_at > t)
            && self.created_before.is_none_or(|t| run.created_at < t)
            && self.updated_after.is_none_or(|t| run.updated_at > t)
            && self.updated_before.is_none_or(|t| run.updated_at < t)
    }
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

    /// The run and the first page of its events with `version > after` (at most
    /// `limit`), read on one connection: what a stream opening needs, in one read
    /// instead of two. `None` when the run does not exist in the tenant; no events are
    /// read when `after` is at or past the run's version.
    async fn run_and_events_after(
        &self,
        tenant: TenantId,
        run: RunId,
        after: i64,
        limit: u32,
    ) -> Result<Option<(RunSummary, Vec<Envelope>)>, StoreError>;

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
