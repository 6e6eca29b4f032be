//! Retention: the tenants' policies, the runs past them, pruning idempotency records past
//! their window, and the lease of a background job that any replica may run, one round at
//! a time.

use crate::error::StoreError;
use crate::model::{AuditEntry, ExpiredRun, RetentionPolicy};
use async_trait::async_trait;
use baton_events::TenantId;
use chrono::{DateTime, Utc};
use std::time::Duration;

/// A job's lease, as a claim took it: the epoch fences the round's report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobLease {
    pub name: String,
    pub owner: String,
    pub epoch: i64,
}

/// A background job as the store keeps it: its lease and the last round's report.
#[derive(Debug, Clone, PartialEq)]
pub struct JobStatus {
    pub owner: Option<String>,
    pub epoch: i64,
    /// Rounds finished.
    pub rounds: i64,
    /// When the next round is due (Unix milliseconds).
    pub next_round_ms: i64,
    pub last_round: Option<serde_json::Value>,
    pub updated_at: Option<DateTime<Utc>>,
}

#[async_trait]
pub trait RetentionStore: Send + Sync {
    /// The tenant's policy and progress; `None` when it never set one.
    async fn get_retention(&self, tenant: TenantId) -> Result<Option<RetentionPolicy>, StoreError>;

    /// Sets the tenant's default (`None`: keep ended runs) at `at`, with its audit entry;
    /// the progress counts stay. An unknown tenant is `NotFound`.
    async fn put_retention(
        &self,
        tenant: TenantId,
        run_days: Option<u32>,
        at: DateTime<Utc>,
        audit: &AuditEntry,
    ) -> Result<(), StoreError>;

    /// Ended runs whose last change is older than their policy allows at `now` (the
    /// agent's `limits.retention_days`, else the tenant's default), oldest first, at most
    /// `limit`; of one tenant, or of every tenant with `None`.
    async fn expired_runs(
        &self,
        tenant: Option<TenantId>,
        now: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<ExpiredRun>, StoreError>;

    /// Deletes an expired run as [`EventLog::delete_run`](super::EventLog::delete_run)
    /// does (every row, refused as a `Conflict` if it moved past `run.version` or holds a
    /// lease), and counts it in its tenant's progress, in one transaction.
    async fn delete_expired_run(
        &self,
        run: &ExpiredRun,
        audit: &AuditEntry,
    ) -> Result<(), StoreError>;

    /// Deletes idempotency records made before `before`, at most `limit`; returns how many.
    async fn prune_idempotency(&self, before: DateTime<Utc>, limit: u32)
    -> Result<u64, StoreError>;

    /// Deletes webhook deliveries that are over (delivered or failed) and last changed
    /// before `before`, with their attempts, at most `limit`; returns how many. Pending
    /// ones stay, however old.
    async fn prune_deliveries(&self, before: DateTime<Utc>, limit: u32) -> Result<u64, StoreError>;

    /// Takes job `name`'s lease for `owner` until `now + ttl` if its next round is due and
    /// no other owner holds a live lease; `None` otherwise. A claim bumps the epoch.
    async fn claim_job(
        &self,
        name: &str,
        owner: &str,
        now: DateTime<Utc>,
        ttl: Duration,
    ) -> Result<Option<JobLease>, StoreError>;

    /// Ends a round under `lease`: records its report, sets the next round due at
    /// `next_round`, releases the lease. Returns whether the lease was still held (a
    /// claim after its expiry fences the report out).
    async fn finish_job(
        &self,
        lease: &JobLease,
        report: &serde_json::Value,
        now: DateTime<Utc>,
        next_round: DateTime<Utc>,
    ) -> Result<bool, StoreError>;

    /// Job `name` as the store keeps it; `None` for a job no migration made.
    async fn job_status(&self, name: &str) -> Result<Option<JobStatus>, StoreError>;
}
