//! `LeaseStore`: claiming runs that need driving, renewing every lease of a replica in one
//! statement, and releasing. Lease expiry is kept in Unix milliseconds
//! (`lease_expires_ms`) so both databases compare it as a number.
//!
//! A replica's leases span tenants, so batch adoption and renewal are cross-tenant by
//! nature (`Scope::CrossTenant`) and run on the `control` pool, kept apart from request
//! load; a single run's claim and a release are request-path work on `app`, scoped to the
//! run's tenant. Claims run in a write transaction whose candidate `SELECT` ends with the
//! backend's [`Backend::SKIP_LOCKED`], so concurrent claimers skip each other's rows. On
//! Postgres that `SELECT` is the `FROM` of the `UPDATE` that takes the leases, one
//! statement that returns the lease each run had (why it was claimed); SQLite's
//! `RETURNING` cannot see a `FROM`, so there the candidates are read first.

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
use sqlx::Transaction;
use std::time::Duration;
use uuid::Uuid;

/// A claimed run: tenant, run, the lease it had (owner, expiry) and its new epoch.
type Claimed = (Uuid, Uuid, Option<String>, Option<i64>, i64);

/// One `claim_runs` call: who claims, for how long, from when, how many, which run.
struct Claim<'a> {
    owner: &'a str,
    ttl: Duration,
    now: DateTime<Utc>,
    limit: u32,
    only: Option<(TenantId, RunId)>,
}

impl Claim<'_> {
    /// Appends the `SELECT` of `columns` of the runs with work to do (a turn in progress
    /// or a cancel pending, as in the `runs_needing_drive` partial index of the first
    /// migration) and a free or expired lease, at most `limit`, and only the run `only`
    /// names when it names one; concurrent claimers skip each other's rows.
    fn push_candidates<B: Backend>(&self, q: &mut Query<B>, columns: &'static str) {
        q.push("SELECT ")
            .push(columns)
            .push(
                " FROM runs \
                 WHERE (status IN ('queued', 'running') \
                    OR (cancel_requested \
                        AND status NOT IN ('completed', 'failed', 'cancelled'))) \
                   AND (lease_owner IS NULL OR lease_expires_ms < ",
            )
            .push_bind(self.now.timestamp_millis())
            .push(")");
        if let Some((tenant, run)) = self.only {
            q.push(" AND tenant_id = ")
                .push_bind(tenant.as_uuid())
                .push(" AND id = ")
                .push_bind(run.as_uuid());
        }
        q.push(" ORDER BY id LIMIT ")
            .push_bind(i64::from(self.limit))
            .push(B::SKIP_LOCKED);
    }

    /// In one statement: the candidates, locked, joined to the `UPDATE` that takes them,
    /// which returns the lease each had.
    async fn in_one<B: Backend>(&self, tx: &mut Transaction<'static, B>) -> Result<Vec<Claimed>> {
        // A CTE, evaluated once: as a subquery of the `FROM`, the planner may scan the
        // candidates again, and with `SKIP LOCKED` and `LIMIT` a second scan may pick
        // others.
        let mut q = Query::new("WITH previous AS MATERIALIZED (");
        self.push_candidates(&mut q, "id, lease_owner, lease_expires_ms");
        q.push(") UPDATE runs SET lease_owner = ")
            .push_bind(self.owner)
            .push(", lease_epoch = runs.lease_epoch + 1, lease_expires_ms = ")
            .push_bind(expiry(self.now, self.ttl))
            .push(
                " FROM previous WHERE runs.id = previous.id \
                 RETURNING runs.tenant_id, runs.id, previous.lease_owner, \
                   previous.lease_expires_ms, runs.lease_epoch",
            );
        let mut claimed: Vec<Claimed> = q.fetch_all(tx).await?;
        // `RETURNING` promises no order; the runs are claimed in id order.
        claimed.sort_by_key(|c| c.1);
        Ok(claimed)
    }

    /// With a `SELECT` of the candidates and an `UPDATE` of each.
    async fn one_by_one<B: Backend>(
        &self,
        tx: &mut Transaction<'static, B>,
    ) -> Result<Vec<Claimed>> {
        let mut q = Query::new("");
        self.push_candidates(&mut q, "tenant_id, id, lease_owner, lease_expires_ms");
        let candidates: Vec<(Uuid, Uuid, Option<String>, Option<i64>)> =
            q.fetch_all(&mut *tx).await?;
        let mut claimed = Vec::with_capacity(candidates.len());
        for (tenant, run, previous, expires) in candidates {
            let (epoch,): (i64,) = Query::new(
                "UPDATE runs SET lease_owner = $1, lease_epoch = lease_epoch + 1, \
                 lease_expires_ms = $2 WHERE id = $3 RETURNING lease_epoch",
            )
            .bind(self.owner)
            .bind(expiry(self.now, self.ttl))
            .bind(run)
            .fetch_one(&mut *tx)
            .await?;
            claimed.push((tenant, run, previous, expires, epoch));
        }
        Ok(claimed)
    }
}

/// A claimed run, and why it was claimed, from the lease it replaced.
fn claimed_run((tenant, run, previous, expires, epoch): Claimed) -> ClaimedRun {
    ClaimedRun {
        tenant: TenantId(tenant),
        run: RunId(run),
        epoch,
        reason: match (previous, expires) {
            (None, _) => LeaseReason::New,
            (Some(_), Some(0)) => LeaseReason::Handoff,
            (Some(_), _) => LeaseReason::Adopted,
        },
    }
}

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
        let claim = Claim {
            owner,
            ttl,
            now,
            limit,
            only,
        };
        let mut tx = self.pools.write(kind, scope).await?;
        let claimed = if B::RETURNING_SEES_FROM {
            claim.in_one(&mut tx).await?
        } else {
            claim.one_by_one(&mut tx).await?
        };
        commit(tx).await?;
        Ok(claimed.into_iter().map(claimed_run).collect())
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
