//! `LeaseStore` for both adapters: claiming runs that need driving, renewing every lease
//! of a replica in one statement, and releasing. Lease expiry is kept in Unix
//! milliseconds (`lease_expires_ms`) so both databases compare it as a number.

/// Implements `LeaseStore` for `$store`. Claims run in a transaction begun with `$begin`
/// whose candidate `SELECT` ends with `$skip_locked` (concurrent claimers skip each
/// other's rows). Renewal and batch adoption use the `$control` pool, kept apart from
/// request load; a single run's claim or release is request-path work on `app`.
macro_rules! impl_lease_store {
    ($store:ty, $db:ty, $classify:path, $begin:literal, $skip_locked:literal, $control:ident) => {
        const _: () = {
            use async_trait::async_trait;
            use baton_core::StoreError;
            use baton_core::ports::{ClaimedRun, Fence, HeldLease, LeaseStore};
            use baton_events::{LeaseReason, RunId, TenantId};
            use chrono::{DateTime, Utc};
            use std::time::Duration;
            use uuid::Uuid;

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
                    // One run's claim is request-path work (a turn starts): the app pool.
                    // Batch adoption stays on the control pool with renewal.
                    let (pool, name) = if only.is_some() {
                        (&self.app, "app")
                    } else {
                        (&self.$control, stringify!($control))
                    };
                    let mut conn = $crate::acquire(pool, name).await.map_err($classify)?;
                    let mut tx = sqlx::Connection::begin_with(&mut *conn, $begin)
                        .await
                        .map_err($classify)?;
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
                    let held: Vec<(Uuid, Uuid, i64)> = sqlx::query_as(
                        "UPDATE runs SET lease_expires_ms = $1 \
                         WHERE lease_owner = $2 AND lease_expires_ms <> 0 \
                         RETURNING tenant_id, id, lease_epoch",
                    )
                    .bind(expiry(now, ttl))
                    .bind(owner)
                    .fetch_all(&self.$control)
                    .await
                    .map_err($classify)?;
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
                    let done = sqlx::query(
                        "UPDATE runs SET lease_owner = NULL, lease_expires_ms = NULL \
                         WHERE id = $1 AND tenant_id = $2 AND lease_owner = $3 \
                           AND lease_epoch = $4",
                    )
                    .bind(run.as_uuid())
                    .bind(tenant.as_uuid())
                    .bind(&fence.owner)
                    .bind(fence.epoch)
                    .execute(&self.app)
                    .await
                    .map_err($classify)?;
                    Ok(done.rows_affected() == 1)
                }
            }
        };
    };
}
pub(crate) use impl_lease_store;
