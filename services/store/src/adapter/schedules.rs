//! `ScheduleStore`: `schedules`, one row per schedule. Changes name the version they read
//! (`WHERE version = $expected`), so of racing writers one wins; the job's look for due
//! schedules is cross-tenant (`Scope::CrossTenant`), everything else the tenant's.

use super::Result;
use crate::backend::Backend;
use crate::plan::micros;
use crate::pools::{PoolKind, Scope};
use crate::query::Query;
use crate::rows::schedules::{ScheduleRow, schedule_columns};
use crate::rows::to_json;
use crate::store::Store;
use async_trait::async_trait;
use baton_core::model::{AuditEntry, Schedule, WebhookMessage};
use baton_core::ports::ScheduleStore;
use baton_events::{AgentId, ScheduleId, TenantId};
use chrono::{DateTime, Utc};
use sqlx::types::Json;

/// A schedule's row, by tenant and id (bound by the caller).
const SCHEDULE: &str = concat!("SELECT ", schedule_columns!(), " FROM schedules");

/// The tenant's schedules (`$1`), for a page.
const SCHEDULES_OF: &str = concat!(
    "SELECT ",
    schedule_columns!(),
    " FROM schedules WHERE tenant_id = "
);

/// Due schedules across tenants: active and due at `$1` (Unix milliseconds), or holding
/// a pending fire; soonest first, at most `$2`.
const DUE: &str = concat!(
    "SELECT ",
    schedule_columns!(),
    " FROM schedules WHERE (state = 'active' AND next_fire_ms <= $1) OR pending IS NOT NULL \
     ORDER BY next_fire_ms LIMIT $2"
);

/// The columns a change writes, in its binding order after the key.
const UPDATE: &str = "UPDATE schedules SET spec = $1, agent_id = $2, state = $3, \
     paused_reason = $4, next_fire_ms = $5, pending = $6, last_fire_at = $7, \
     last_run_id = $8, fires = $9, skipped = $10, owner = $11, version = $12, \
     updated_at = $13 WHERE tenant_id = $14 AND id = $15 AND version = $16";

/// Binds `s` as `$1` to `$15`: the columns a change writes, then the key, in the order
/// of [`UPDATE`] and of the insert.
fn bind_row<B: Backend>(q: Query<B>, s: &Schedule) -> Result<Query<B>> {
    Ok(q.bind(Json(to_json("a schedule", &s.spec)?))
        .bind(s.spec.agent_id.as_uuid())
        .bind(s.state.as_str())
        .bind(s.paused_reason.clone())
        .bind(s.next_fire_at.map(|t| t.timestamp_millis()))
        .bind(pending(s)?)
        .bind(s.last_fire_at.map(micros))
        .bind(s.last_run_id.map(|r| r.as_uuid()))
        .bind(count(s.fires))
        .bind(count(s.skipped))
        .bind(s.owner.clone())
        .bind(s.version)
        .bind(micros(s.updated_at))
        .bind(s.tenant.as_uuid())
        .bind(s.id.as_uuid()))
}

fn count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn pending(s: &Schedule) -> Result<Option<Json<serde_json::Value>>> {
    s.pending
        .as_ref()
        .map(|p| to_json("a pending fire", p).map(Json))
        .transpose()
}

#[async_trait]
impl<B: Backend> ScheduleStore for Store<B> {
    #[tracing::instrument(name = "store.create_schedule", skip_all)]
    async fn create_schedule(&self, s: &Schedule, audit: &AuditEntry) -> Result<()> {
        let mut change = self.audited(s.tenant, audit).await?;
        bind_row(
            Query::new(
                "INSERT INTO schedules (spec, agent_id, state, paused_reason, next_fire_ms, \
                 pending, last_fire_at, last_run_id, fires, skipped, owner, version, \
                 updated_at, tenant_id, id, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)",
            ),
            s,
        )?
        .bind(micros(s.created_at))
        .execute(&mut change.tx)
        .await?;
        change.commit().await
    }

    #[tracing::instrument(name = "store.get_schedule", skip_all)]
    async fn get_schedule(&self, tenant: TenantId, id: ScheduleId) -> Result<Option<Schedule>> {
        self.one_by_id::<ScheduleRow, _>(tenant, SCHEDULE, id.as_uuid())
            .await
    }

    #[tracing::instrument(name = "store.list_schedules", skip_all)]
    async fn list_schedules(
        &self,
        tenant: TenantId,
        agent: Option<AgentId>,
        before: Option<ScheduleId>,
        limit: u32,
    ) -> Result<Vec<Schedule>> {
        let mut q = Query::new(SCHEDULES_OF);
        q.push_bind(tenant.as_uuid());
        if let Some(agent) = agent {
            q.push(" AND agent_id = ").push_bind(agent.as_uuid());
        }
        if let Some(before) = before {
            q.push(" AND id < ").push_bind(before.as_uuid());
        }
        q.push(" ORDER BY id DESC LIMIT ")
            .push_bind(i64::from(limit));
        self.tenant_rows::<ScheduleRow, _>(tenant, q).await
    }

    #[tracing::instrument(name = "store.update_schedule", skip_all)]
    async fn update_schedule(
        &self,
        s: &Schedule,
        expected: i64,
        audit: Option<&AuditEntry>,
        message: Option<&WebhookMessage>,
    ) -> Result<bool> {
        let q = bind_row(Query::new(UPDATE), s)?.bind(expected);
        let Some(audit) = audit else {
            let changed = self
                .write_one(PoolKind::App, Scope::Tenant(s.tenant), q)
                .await?;
            return Ok(changed == 1);
        };
        let mut change = self.audited(s.tenant, audit).await?;
        let changed = q.execute(&mut change.tx).await?;
        if changed != 1 {
            change.rollback().await;
            return Ok(false);
        }
        if let Some(m) = message {
            super::webhooks::enqueue(&mut change.tx, s.tenant, m, s.updated_at).await?;
        }
        change.commit().await?;
        Ok(true)
    }

    #[tracing::instrument(name = "store.delete_schedule", skip_all)]
    async fn delete_schedule(
        &self,
        tenant: TenantId,
        id: ScheduleId,
        audit: &AuditEntry,
    ) -> Result<bool> {
        let mut change = self.audited(tenant, audit).await?;
        let changed = Query::new("DELETE FROM schedules WHERE tenant_id = $1 AND id = $2")
            .bind(tenant.as_uuid())
            .bind(id.as_uuid())
            .execute(&mut change.tx)
            .await?;
        change.commit_if(changed == 1).await?;
        Ok(changed == 1)
    }

    #[tracing::instrument(name = "store.due_schedules", skip_all)]
    async fn due_schedules(&self, now: DateTime<Utc>, limit: u32) -> Result<Vec<Schedule>> {
        let q = Query::new(DUE)
            .bind(now.timestamp_millis())
            .bind(i64::from(limit));
        let mut conn = self.pools.read(PoolKind::App, Scope::CrossTenant).await?;
        let rows: Vec<ScheduleRow> = q.fetch_all(&mut conn).await?;
        // One schedule this build cannot read (written by a newer one) stays out of the
        // look, and the others fire.
        Ok(rows
            .into_iter()
            .filter_map(|r| {
                Schedule::try_from(r)
                    .inspect_err(|e| tracing::warn!(error = %e, "a due schedule is unreadable"))
                    .ok()
            })
            .collect())
    }

    #[tracing::instrument(name = "store.next_fire_time", skip_all)]
    async fn next_fire_time(&self) -> Result<Option<DateTime<Utc>>> {
        let mut conn = self.pools.read(PoolKind::App, Scope::CrossTenant).await?;
        let (ms,): (Option<i64>,) =
            Query::new("SELECT MIN(next_fire_ms) FROM schedules WHERE state = 'active'")
                .fetch_one(&mut conn)
                .await?;
        Ok(ms.and_then(DateTime::from_timestamp_millis))
    }
}
