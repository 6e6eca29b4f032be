//! `RetentionStore`: the tenants' policies in `retention_policies`, the runs past them,
//! idempotency pruning and the lease of background jobs in `jobs`.
//!
//! A policy's days are turned into a cutoff time here, one query per distinct number of
//! days in force (a handful: the tenants' defaults and the agents' own), so both
//! databases only compare timestamps. The job's cross-tenant reads and writes run on the
//! `app` pool (`Scope::CrossTenant`), leaving the `control` pool to lease renewal.

use super::Result;
use super::deletion::Counted;
use super::reads::commit;
use crate::backend::Backend;
use crate::plan::micros;
use crate::pools::{PoolKind, Scope};
use crate::query::Query;
use crate::store::Store;
use async_trait::async_trait;
use baton_core::StoreError;
use baton_core::model::{AuditEntry, ExpiredRun, RetentionPolicy};
use baton_core::ports::{JobLease, JobStatus, RetentionStore};
use baton_events::{RunId, TenantId};
use chrono::{DateTime, TimeDelta, Utc};
use sqlx::types::Json;
use std::time::Duration;
use uuid::Uuid;

/// The tenant's policy and progress.
const POLICY: &str = "SELECT run_days, deleted_runs, last_deleted_at, updated_at \
     FROM retention_policies WHERE tenant_id = $1";

/// The numbers of days in force: tenants' defaults and agents' own.
const DAYS_IN_FORCE: &str = "SELECT run_days FROM retention_policies WHERE run_days IS NOT NULL \
     UNION SELECT run_retention_days FROM agents WHERE run_retention_days IS NOT NULL";

/// Ended runs kept for `$1` days (the agent's own, else the tenant's) whose last change
/// is before `$2`.
const EXPIRED: &str = "SELECT r.tenant_id, r.id, r.version, r.updated_at FROM runs r \
     LEFT JOIN agents a ON a.tenant_id = r.tenant_id AND a.id = r.agent_id \
     LEFT JOIN retention_policies p ON p.tenant_id = r.tenant_id \
     WHERE r.status IN ('completed', 'failed', 'cancelled') AND r.updated_at < $2 \
       AND COALESCE(a.run_retention_days, p.run_days) = $1";

/// A job's row.
const JOB: &str = "SELECT owner, epoch, rounds, next_round_ms, last_round, updated_at \
     FROM jobs WHERE name = $1";

type PolicyRow = (
    Option<i64>,
    i64,
    Option<DateTime<Utc>>,
    Option<DateTime<Utc>>,
);
type ExpiredRow = (Uuid, Uuid, i64, DateTime<Utc>);
type JobRow = (
    Option<String>,
    i64,
    i64,
    i64,
    Option<Json<serde_json::Value>>,
    Option<DateTime<Utc>>,
);

fn scope(tenant: Option<TenantId>) -> Scope {
    tenant.map_or(Scope::CrossTenant, Scope::Tenant)
}

fn expiry(now: DateTime<Utc>, ttl: Duration) -> i64 {
    let ttl = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
    now.timestamp_millis().saturating_add(ttl)
}

#[async_trait]
impl<B: Backend> RetentionStore for Store<B> {
    #[tracing::instrument(name = "store.get_retention", skip_all)]
    async fn get_retention(&self, tenant: TenantId) -> Result<Option<RetentionPolicy>> {
        let mut conn = self
            .pools
            .read(PoolKind::App, Scope::Tenant(tenant))
            .await?;
        let row: Option<PolicyRow> = Query::new(POLICY)
            .bind(tenant.as_uuid())
            .fetch_optional(&mut conn)
            .await?;
        row.map(|(days, deleted, last, updated)| {
            Ok(RetentionPolicy {
                run_days: days
                    .map(u32::try_from)
                    .transpose()
                    .map_err(|_| StoreError::Unreadable(format!("a retention of {days:?} days")))?,
                deleted_runs: u64::try_from(deleted).unwrap_or(0),
                last_deleted_at: last,
                updated_at: updated,
            })
        })
        .transpose()
    }

    #[tracing::instrument(name = "store.put_retention", skip_all)]
    async fn put_retention(
        &self,
        tenant: TenantId,
        run_days: Option<u32>,
        at: DateTime<Utc>,
        audit: &AuditEntry,
    ) -> Result<()> {
        let mut change = self.audited(tenant, audit).await?;
        Query::new(
            "INSERT INTO retention_policies (tenant_id, run_days, updated_at) \
             VALUES ($1, $2, $3) ON CONFLICT (tenant_id) DO UPDATE SET \
             run_days = excluded.run_days, updated_at = excluded.updated_at",
        )
        .bind(tenant.as_uuid())
        .bind(run_days.map(i64::from))
        .bind(micros(at))
        .execute(&mut change.tx)
        .await?;
        change.commit().await
    }

    #[tracing::instrument(name = "store.expired_runs", skip_all)]
    async fn expired_runs(
        &self,
        tenant: Option<TenantId>,
        now: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<ExpiredRun>> {
        let mut conn = self.pools.read(PoolKind::App, scope(tenant)).await?;
        let mut days_q = Query::new(DAYS_IN_FORCE);
        if let Some(t) = tenant {
            // The same tenant twice: each arm of the union filters its own table.
            days_q = Query::new(
                "SELECT run_days FROM retention_policies \
                 WHERE run_days IS NOT NULL AND tenant_id = $1 \
                 UNION SELECT run_retention_days FROM agents \
                 WHERE run_retention_days IS NOT NULL AND tenant_id = $1",
            )
            .bind(t.as_uuid());
        }
        let days: Vec<(i64,)> = days_q.fetch_all(&mut conn).await?;
        let mut found: Vec<ExpiredRow> = Vec::new();
        for (d,) in days {
            let Some(cutoff) = TimeDelta::try_days(d).and_then(|d| now.checked_sub_signed(d))
            else {
                continue;
            };
            let mut q = Query::new(EXPIRED);
            if tenant.is_some() {
                q.push(" AND r.tenant_id = $4");
            }
            q.push(" ORDER BY r.updated_at LIMIT $3");
            let mut q = q.bind(d).bind(micros(cutoff)).bind(i64::from(limit));
            if let Some(t) = tenant {
                q = q.bind(t.as_uuid());
            }
            found.extend(q.fetch_all::<ExpiredRow>(&mut conn).await?);
        }
        found.sort_by_key(|r| (r.3, r.1));
        found.truncate(limit as usize);
        Ok(found
            .into_iter()
            .map(|(tenant, run, version, _)| ExpiredRun {
                tenant: TenantId(tenant),
                run: RunId(run),
                version,
            })
            .collect())
    }

    #[tracing::instrument(name = "store.delete_expired_run", skip_all)]
    async fn delete_expired_run(&self, run: &ExpiredRun, audit: &AuditEntry) -> Result<()> {
        self.delete_run_rows(
            run.tenant,
            run.run,
            run.version,
            audit,
            Counted::ByRetention,
        )
        .await
    }

    #[tracing::instrument(name = "store.prune_idempotency", skip_all)]
    async fn prune_idempotency(&self, before: DateTime<Utc>, limit: u32) -> Result<u64> {
        let q = Query::new(
            "DELETE FROM idempotency WHERE (tenant_id, request_id) IN \
             (SELECT tenant_id, request_id FROM idempotency WHERE created_at < $1 \
              ORDER BY created_at LIMIT $2)",
        )
        .bind(micros(before))
        .bind(i64::from(limit));
        self.write_one(PoolKind::App, Scope::CrossTenant, q).await
    }

    #[tracing::instrument(name = "store.claim_job", skip_all)]
    async fn claim_job(
        &self,
        name: &str,
        owner: &str,
        now: DateTime<Utc>,
        ttl: Duration,
    ) -> Result<Option<JobLease>> {
        let mut tx = self.pools.write(PoolKind::App, Scope::NoTenant).await?;
        let now_ms = now.timestamp_millis();
        let epoch: Option<(i64,)> = Query::new(
            "UPDATE jobs SET owner = $1, epoch = epoch + 1, expires_ms = $2 \
             WHERE name = $3 AND next_round_ms <= $4 \
               AND (owner IS NULL OR expires_ms < $4) \
             RETURNING epoch",
        )
        .bind(owner)
        .bind(expiry(now, ttl))
        .bind(name)
        .bind(now_ms)
        .fetch_optional(&mut tx)
        .await?;
        commit(tx).await?;
        Ok(epoch.map(|(epoch,)| JobLease {
            name: name.to_string(),
            owner: owner.to_string(),
            epoch,
        }))
    }

    #[tracing::instrument(name = "store.finish_job", skip_all)]
    async fn finish_job(
        &self,
        lease: &JobLease,
        report: &serde_json::Value,
        now: DateTime<Utc>,
        next_round: DateTime<Utc>,
    ) -> Result<bool> {
        let q = Query::new(
            "UPDATE jobs SET owner = NULL, expires_ms = NULL, next_round_ms = $1, \
             rounds = rounds + 1, last_round = $2, updated_at = $3 \
             WHERE name = $4 AND owner = $5 AND epoch = $6",
        )
        .bind(next_round.timestamp_millis())
        .bind(Json(report))
        .bind(micros(now))
        .bind(&lease.name)
        .bind(&lease.owner)
        .bind(lease.epoch);
        Ok(self.write_one(PoolKind::App, Scope::NoTenant, q).await? == 1)
    }

    async fn job_status(&self, name: &str) -> Result<Option<JobStatus>> {
        let mut conn = self.pools.read(PoolKind::App, Scope::NoTenant).await?;
        let row: Option<JobRow> = Query::new(JOB).bind(name).fetch_optional(&mut conn).await?;
        Ok(row.map(
            |(owner, epoch, rounds, next_round_ms, last_round, updated_at)| JobStatus {
                owner,
                epoch,
                rounds,
                next_round_ms,
                last_round: last_round.map(|j| j.0),
                updated_at,
            },
        ))
    }
}
