//! `LeaseStore` for both adapters: claiming runs that need driving, renewing every lease
//! of a replica in one statement, and releasing. Lease expiry is kept in Unix
//! milliseconds (`lease_expires_ms`) so both databases compare it as a number.
//!
//! A replica's leases span tenants, so batch adoption and renewal are cross-tenant by
//! nature (`Scope::CrossTenant`); a single run's claim and a release name the run's tenant
//! and are scoped to it.

/// Implements `LeaseStore` for `$store`, mapping driver errors with `$classify`. Claims
/// run in a write transaction whose candidate `SELECT` ends with `$skip_locked`
/// (concurrent claimers skip each other's rows). Renewal and batch adoption use the
/// `control` pool, kept apart from request load; a single run's claim or release is
/// request-path work on `app`.
macro_rules! impl_lease_store {
    ($store:ty, $classify:path, $skip_locked:literal) => {
        const _: () = {
            use async_trait::async_trait;
            use baton_core::StoreError;
            use baton_core::ports::{ClaimedRun, Fence, HeldLease, LeaseStore};
            use baton_events::{LeaseReason, RunId, TenantId};
            use chrono::{DateTime, Utc};
            use std::time::Duration;
            use uuid::Uuid;
            use $crate::pools::{PoolKind, Scope};

            fn expiry(now: DateTime<Utc>, ttl: Duration) -> i64 {
                let ttl = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
                now.timestamp_millis().saturating_add(ttl)
            }

            #[async_trait]
            impl LeaseStore for $store {
                async fn claim_runs(
                    &self,
                    owner: &str,
                    ttl: Duration,
                    now: DateTime<Utc>,
                    limit: u32,
                    only: Option<(TenantId, RunId)>,
                ) -> Result<Vec<ClaimedRun>, StoreError> {
                    // One run's claim is request-path work (a turn starts): the app pool,
                    // scoped to the run's tenant. Batch adoption looks at every tenant's
                    // runs, on the control pool with renewal.
                    let (kind, scope) = match only {
                        Some((tenant, _)) => (PoolKind::App, Scope::Tenant(tenant)),
                        None => (PoolKind::Control, Scope::CrossTenant),
                    };
                    let mut tx = self.pools.write(kind, scope).await?;
                    // Runs with work to do (a turn in progress or a cancel pending, as in
                    // the `runs_needing_drive` partial index of migration 0001) and a free or expired lease.
                    let q = match only {
                        None => sqlx::query_as::<_, (Uuid, Uuid, Option<String>, Option<i64>)>(concat!(
                            "SELECT tenant_id, id, lease_owner, lease_expires_ms FROM runs \
                             WHERE (status IN ('queued', 'running') \
                                OR (cancel_requested \
                                    AND status NOT IN ('completed', 'failed', 'cancelled'))) \
                               AND (lease_owner IS NULL OR lease_expires_ms < $1) \
                             ORDER BY id LIMIT $2",
                            $skip_locked
                        )),
                        Some(_) => sqlx::query_as::<_, (Uuid, Uuid, Option<String>, Option<i64>)>(concat!(
                            "SELECT tenant_id, id, lease_owner, lease_expires_ms FROM runs \
                             WHERE (status IN ('queued', 'running') \
                                OR (cancel_requested \
                                    AND status NOT IN ('completed', 'failed', 'cancelled'))) \
                               AND (lease_owner IS NULL OR lease_expires_ms < $1) \
                               AND tenant_id = $3 AND id = $4 \
                             ORDER BY id LIMIT $2",
                            $skip_locked
                        )),
                    };
                    let mut q = q.bind(now.timestamp_millis()).bind(i64::from(limit));
                    if let Some((tenant, run)) = only {
                        q = q.bind(tenant.as_uuid()).bind(run.as_uuid());
                    }
                    let candidates = q.fetch_all(&mut *tx).await.map_err($classify)?;
                    let mut claimed = Vec::with_capacity(candidates.len());
                    for (tenant, run, previous, expires) in candidates {
                        let epoch: i64 = sqlx::query_scalar(
                            "UPDATE runs SET lease_owner = $1, lease_epoch = lease_epoch + 1, \
                             lease_expires_ms = $2 WHERE id = $3 RETURNING lease_epoch",
                        )
                        .bind(owner)
                        .bind(expiry(now, ttl))
                        .bind(run)
                        .fetch_one(&mut *tx)
                        .await
                        .map_err($classify)?;
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
                    tx.commit().await.map_err($classify)?;
                    Ok(claimed)
                }

                async fn renew_leases(
                    &self,
                    owner: &str,
                    ttl: Duration,
                    now: DateTime<Utc>,
                ) -> Result<Vec<HeldLease>, StoreError> {
                    let mut tx = self
                        .pools
                        .write(PoolKind::Control, Scope::CrossTenant)
                        .await?;
                    let held: Vec<(Uuid, Uuid, i64)> = sqlx::query_as(
                        "UPDATE runs SET lease_expires_ms = $1 \
                         WHERE lease_owner = $2 AND lease_expires_ms <> 0 \
                         RETURNING tenant_id, id, lease_epoch",
                    )
                    .bind(expiry(now, ttl))
                    .bind(owner)
                    .fetch_all(&mut *tx)
                    .await
                    .map_err($classify)?;
                    tx.commit().await.map_err($classify)?;
                    Ok(held
                        .into_iter()
                        .map(|(tenant, run, epoch)| HeldLease {
                            tenant: TenantId(tenant),
                            run: RunId(run),
                            epoch,
                        })
                        .collect())
                }

                async fn release_lease(
                    &self,
                    tenant: TenantId,
                    run: RunId,
                    fence: &Fence,
                ) -> Result<bool, StoreError> {
                    let mut tx = self
                        .pools
                        .write(PoolKind::App, Scope::Tenant(tenant))
                        .await?;
                    let done = sqlx::query(
                        "UPDATE runs SET lease_owner = NULL, lease_expires_ms = NULL \
                         WHERE id = $1 AND tenant_id = $2 AND lease_owner = $3 \
                           AND lease_epoch = $4",
                    )
                    .bind(run.as_uuid())
                    .bind(tenant.as_uuid())
                    .bind(&fence.owner)
                    .bind(fence.epoch)
                    .execute(&mut *tx)
                    .await
                    .map_err($classify)?;
                    tx.commit().await.map_err($classify)?;
                    Ok(done.rows_affected() == 1)
                }
            }
        };
    };
}
pub(crate) use impl_lease_store;
