//! Schedules: their definitions and state, and the ones due to fire across tenants.

use crate::error::StoreError;
use crate::model::{AuditEntry, Schedule, WebhookMessage};
use async_trait::async_trait;
use baton_events::{AgentId, ScheduleId, TenantId};
use chrono::{DateTime, Utc};

#[async_trait]
pub trait ScheduleStore: Send + Sync {
    /// Stores a new schedule with its audit entry. An unknown tenant is `NotFound`.
    async fn create_schedule(&self, s: &Schedule, audit: &AuditEntry) -> Result<(), StoreError>;

    /// One of the tenant's schedules; another tenant's is `None`.
    async fn get_schedule(
        &self,
        tenant: TenantId,
        id: ScheduleId,
    ) -> Result<Option<Schedule>, StoreError>;

    /// The tenant's schedules newest first (of `agent` when given), older than `before`
    /// when given, at most `limit`.
    async fn list_schedules(
        &self,
        tenant: TenantId,
        agent: Option<AgentId>,
        before: Option<ScheduleId>,
        limit: u32,
    ) -> Result<Vec<Schedule>, StoreError>;

    /// Replaces the schedule by `s` (whose `version` is the new one) if its stored
    /// version is still `expected`, with `audit` when given and the deliveries of
    /// `message` when given, in one transaction; `false` when it moved or is gone
    /// (nothing written).
    async fn update_schedule(
        &self,
        s: &Schedule,
        expected: i64,
        audit: Option<&AuditEntry>,
        message: Option<&WebhookMessage>,
    ) -> Result<bool, StoreError>;

    /// Deletes the schedule with its audit entry; `false` when there was none.
    async fn delete_schedule(
        &self,
        tenant: TenantId,
        id: ScheduleId,
        audit: &AuditEntry,
    ) -> Result<bool, StoreError>;

    /// Across tenants, soonest first, at most `limit`: active schedules whose next fire
    /// time is at or before `now`, and any schedule with a fire decided and not yet
    /// recorded.
    async fn due_schedules(
        &self,
        now: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<Schedule>, StoreError>;

    /// Across tenants, the soonest next fire time of an active schedule.
    async fn next_fire_time(&self) -> Result<Option<DateTime<Utc>>, StoreError>;
}
