//! `LeaseStore`: claiming runs that need driving, renewing every lease of a replica in one
//! statement, and releasing. Lease expiry is kept in Unix milliseconds
//! (`lease_expires_ms`) so both databases compare it as a number.
//!
//! A replica's leases span tenants, so batch adoption and renewal are cross-tenant by
//! nature (`Scope::CrossTenant`) and run on the `control` pool, kept apart from request
//! load; a single run's claim and a release are request-path work on `app`, scoped to the
//! run's tenant. Claims run in a write transaction whose candidate `SELECT` ends with the
//! backend's [`Backend::SKIP_LOCKED`], so concurrent claimers skip each other's rows.

use super::Result;
use super::reads::commit;
use crate::backend::Backend;
use crate::pools::{PoolKind, Scope};
use crate::query::Query;
use crate::store::Store;
use async_trait::async_trait;
use baton_core::ports::{ClaimedRun, Fence, HeldLease, LeaseStore};
use baton_events::{LeaseReason, RunId, TenantId};
use chrono::{DateTime, Utc};
use std::time::Duration;
use uuid::Uuid;

/// A claim candidate: tenant, run, and the lease it holds now (owner, expiry).
type Candidate = (Uuid, Uuid, Option<String>, Option<i64>);

fn expiry(now: DateTime<Utc>, ttl: Duration) -> i64 {
    let ttl = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
    now.timestamp_millis().saturating_add(ttl)
}

#[async_trait]
impl<B: Backend> LeaseStore for Store<B> {
    async fn claim_runs(
        &self,
        owner: &str,
        ttl: Duration,
        now: DateTime<Utc>,
        limit: u32,
        only: Option<(TenantId, RunId)>,
    ) -> Result<Vec<ClaimedRun>> {
        // One run's claim is request-path work (a turn starts): the app pool, scoped to
        // the run's tenant. Batch adoption looks at every tenant's runs, on the control
        // pool with renewal.
        let (kind, scope) = match only {
            Some((tenant, _)) => (PoolKind::App, Scope::Tenant(tenant)),
            None => (PoolKind::Control, Scope::CrossTenant),
        };
        let mut tx = self.pools.write(kind, scope).await?;
        // Runs with work to do (a turn in progress or a cancel pending, as in the
        // `runs_needing_drive` partial index of migration 0001) and a free or expired lease.
        let mut q = Query::new(
            "SELECT tenant_id, id, lease_owner, lease_expires_ms FROM runs \
             WHERE (status IN ('queued', 'running') \
                OR (cancel_requested \
                    AND status NOT IN ('completed', 'failed', 'cancelled'))) \
               AND (lease_owner IS NULL OR lease_expires_ms < $1)",
        );
        if only.is_some() {
            q.push(" AND tenant_id = $3 AND id = $4");
        }
        q.push(" ORDER BY id LIMIT $2").push(B::SKIP_LOCKED);
        let mut q = q.bind(now.timestamp_millis()).bind(i64::from(limit));
        if let Some((tenant, run)) = only {
            q = q.bind(tenant.as_uuid()).bind(run.as_uuid());
        }
        let candidates: Vec<Candidate> = q.fetch_all(&mut tx).await?;
        let mut claimed = Vec::with_capacity(candidates.len());
        for (tenant, run, previous, expires) in candidates {
            let (epoch,): (i64,) = Query::new(
                "UPDATE runs SET lease_owner = $1, lease_epoch = lease_epoch + 1, \
                 lease_expires_ms = $2 WHERE id = $3 RETURNING lease_epoch",
            )
            .bind(owner)
            .bind(expiry(now, ttl))
            .bind(run)
            .fetch_one(&mut tx)
            .await?;
            claimed.push(ClaimedRun {
                tenant: TenantId(tenant),
                run: RunId(run),
                epoch,
                reason: match (previous, expires) {
                    (None, _) => LeaseReason::New,
                    (Some(_), Some(0)) => LeaseReason::Handoff,
                    (Some(_), _) => LeaseReason::Adopted,
                },
            });
        }
        commit(tx).await?;
        Ok(claimed)
    }

    async fn renew_leases(
        &self,
        owner: &str,
        ttl: Duration,
        now: DateTime<Utc>,
    ) -> Result<Vec<HeldLease>> {
        let mut tx = self
            .pools
            .write(PoolKind::Control, Scope::CrossTenant)
            .await?;
        let held: Vec<(Uuid, Uuid, i64)> = Query::new(
            "UPDATE runs SET lease_expires_ms = $1 \
             WHERE lease_owner = $2 AND lease_expires_ms <> 0 \
             RETURNING tenant_id, id, lease_epoch",
        )
        .bind(expiry(now, ttl))
        .bind(owner)
        .fetch_all(&mut tx)
        .await?;
        commit(tx).await?;
        Ok(held
            .into_iter()
            .map(|(tenant, run, epoch)| HeldLease {
                tenant: TenantId(tenant),
                run: RunId(run),
                epoch,
            })
            .collect())
    }

    async fn release_lease(&self, tenant: TenantId, run: RunId, fence: &Fence) -> Result<bool> {
        let q = Query::new(
            "UPDATE runs SET lease_owner = NULL, lease_expires_ms = NULL \
             WHERE id = $1 AND tenant_id = $2 AND lease_owner = $3 \
               AND lease_epoch = $4",
        )
        .bind(run.as_uuid())
        .bind(tenant.as_uuid())
        .bind(&fence.owner)
        .bind(fence.epoch);
        let released = self
            .write_one(PoolKind::App, Scope::Tenant(tenant), q)
            .await?;
        Ok(released == 1)
    }

    async fn expire_leases(&self, now: DateTime<Utc>) -> Result<u64> {
        // Expired a millisecond before `now`, as a lapsed lease is: claims adopt it.
        let q = Query::new(
            "UPDATE runs SET lease_expires_ms = $1 \
             WHERE lease_owner IS NOT NULL AND lease_expires_ms > $1",
        )
        .bind(now.timestamp_millis() - 1);
        self.write_one(PoolKind::Control, Scope::CrossTenant, q)
            .await
    }
}
