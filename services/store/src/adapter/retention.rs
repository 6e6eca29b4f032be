//! `RetentionStore`: the tenants' policies in `retention_policies`, the runs past them,
//! idempotency pruning and the lease of background jobs in `jobs`.
//!
//! Runs past their policy are found by one query: the fewest days in force bounds it to
//! runs at least that old (an index range), and each row's own days (the agent's, else
//! the tenant's) decide, compared in the database ([`Backend::push_older_than_days`]), so
//! the work does not grow with the number of distinct policies tenants set. The job's
//! cross-tenant reads and writes run on the `app` pool (`Scope::CrossTenant`), leaving
//! the `control` pool to lease renewal.

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

/// The fewest days in force: tenants' defaults and agents' own.
const FEWEST_DAYS: &str = "SELECT MIN(d) FROM (\
     SELECT run_days AS d FROM retention_policies WHERE run_days IS NOT NULL \
     UNION ALL SELECT run_retention_days FROM agents WHERE run_retention_days IS NOT NULL\
     ) AS days";

/// The same in one tenant (`$1`).
const FEWEST_DAYS_OF: &str = "SELECT MIN(d) FROM (\
     SELECT run_days AS d FROM retention_policies \
     WHERE run_days IS NOT NULL AND tenant_id = $1 \
     UNION ALL SELECT run_retention_days FROM agents \
     WHERE run_retention_days IS NOT NULL AND tenant_id = $1\
     ) AS days";

/// Ended runs free of a live lease (the caller binds the time in Unix milliseconds,
/// closes the parenthesis and adds the age conditions), with the policy that keeps each:
/// the agent's own days, else the tenant's.
const EXPIRED: &str = "SELECT r.tenant_id, r.id, r.version FROM runs r \
     LEFT JOIN agents a ON a.tenant_id = r.tenant_id AND a.id = r.agent_id \
     LEFT JOIN retention_policies p ON p.tenant_id = r.tenant_id \
     WHERE r.status IN ('completed', 'failed', 'cancelled') \
       AND (r.lease_owner IS NULL OR r.lease_expires_ms < ";

/// A job's row.
const JOB: &str = "SELECT owner, epoch, rounds, next_round_ms, last_round, updated_at \
     FROM jobs WHERE name = $1";

type PolicyRow = (
    Option<i64>,
    i64,
    Option<DateTime<Utc>>,
    Option<DateTime<Utc>>,
);
type ExpiredRow = (Uuid, Uuid, i64);
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
        let mut fewest = Query::new(FEWEST_DAYS);
        if let Some(t) = tenant {
            fewest = Query::new(FEWEST_DAYS_OF).bind(t.as_uuid());
        }
        let (fewest,): (Option<i64>,) = fewest.fetch_one(&mut conn).await?;
        // No policy in force, or one so long nothing can be past it.
        let Some(cutoff) = fewest
            .and_then(TimeDelta::try_days)
            .and_then(|d| now.checked_sub_signed(d))
        else {
            return Ok(Vec::new());
        };
        // Only runs older than the fewest days in force can be past their own: the
        // index on ended runs by age bounds the scan; each row's policy decides.
        let mut q = Query::new(EXPIRED);
        q.push_bind(now.timestamp_millis())
            .push(") AND r.updated_at < ")
            .push_bind(micros(cutoff));
        if let Some(t) = tenant {
            q.push(" AND r.tenant_id = ").push_bind(t.as_uuid());
        }
        B::push_older_than_days(
            &mut q,
            "r.updated_at",
            "COALESCE(a.run_retention_days, p.run_days)",
            micros(now),
        );
        q.push(" ORDER BY r.updated_at, r.id LIMIT ")
            .push_bind(i64::from(limit));
        let found: Vec<ExpiredRow> = q.fetch_all(&mut conn).await?;
        Ok(found
            .into_iter()
            .map(|(tenant, run, version)| ExpiredRun {
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

    #[tracing::instrument(name = "store.prune_deliveries", skip_all)]
    async fn prune_deliveries(&self, before: DateTime<Utc>, limit: u32) -> Result<u64> {
        let mut tx = self.pools.write(PoolKind::App, Scope::CrossTenant).await?;
        // The oldest deliveries that are over, attempts first; a delivery replayed
        // meanwhile is pending again and stays (its older attempts may go).
        const OVER: &str = "SELECT tenant_id, webhook_id, id FROM webhook_deliveries \
             WHERE state <> 'pending' AND updated_at < $1 ORDER BY updated_at LIMIT $2";
        let mut attempts = Query::new(
            "DELETE FROM webhook_attempts WHERE (tenant_id, webhook_id, delivery_id) IN (",
        );
        attempts.push(OVER).push(")");
        attempts
            .bind(micros(before))
            .bind(i64::from(limit))
            .execute(&mut tx)
            .await?;
        let mut deliveries =
            Query::new("DELETE FROM webhook_deliveries WHERE (tenant_id, webhook_id, id) IN (");
        deliveries.push(OVER).push(") AND state <> 'pending'");
        let pruned = deliveries
            .bind(micros(before))
            .bind(i64::from(limit))
            .execute(&mut tx)
            .await?;
        commit(tx).await?;
        Ok(pruned)
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
