//! Retention: a tenant's admins set how long its ended runs are kept (a default for the
//! tenant, and `limits.retention_days` on an agent for that agent's runs), and a
//! background job deletes the runs past it and prunes idempotency records and finished
//! webhook deliveries past their windows.
//!
//! Every replica offers to run the job; the store's job lease lets one at a time run a
//! round, and a round that finishes sets when the next is due, so the installation runs
//! one round per interval whatever its number of replicas. A round is bounded (`batch`
//! runs); a full one makes the next due at once. Each run goes as `DELETE
//! /v1/runs/{id}` deletes it (every row, one transaction, an audit entry by `retention`,
//! `run.deleted` published so live streams end), refused if the run moved since it was
//! found, so a run is deleted once even if two rounds overlapped after a lost lease.
//! A replica killed mid-round leaves its lease to expire; the next claim redoes the
//! round from what is left.

use crate::error::{CoreError, StoreError};
use crate::model::{Action, AuditAction, AuditEntry, MAX_RETENTION_DAYS, Principal};
use crate::ports::{Clock, EventBus, JobStatus, RetentionStore};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The job's name in the store.
pub const JOB: &str = "retention";

/// The most expired runs counted for a tenant's `due_runs`.
pub const MAX_DUE_COUNTED: u32 = 1000;

/// A new retention policy.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewRetentionPolicy {
    /// Days an ended run is kept after its last change, 1 to 36500, for agents with no
    /// `limits.retention_days`; `null` keeps ended runs until deleted.
    pub run_days: Option<u32>,
}

/// A tenant's policy, the job's progress on it, and how many of its runs are due now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct RetentionView {
    /// Days an ended run (`completed`, `failed`, `cancelled`) is kept after its last
    /// change, for agents that set no `limits.retention_days` of their own; `null`: kept
    /// until deleted.
    pub run_days: Option<u32>,
    /// Runs the retention job has deleted in the tenant.
    pub deleted_runs: u64,
    /// When it last deleted one; `null` when it never did.
    pub last_deleted_at: Option<chrono::DateTime<chrono::Utc>>,
    /// When an admin last set the policy; `null` when none ever did.
    pub updated_at: Option<chrono::DateTime<chrono::Utc>>,
    /// Ended runs past their policy now, not yet deleted (counted up to 1000): the job
    /// deletes them at its next rounds.
    pub due_runs: u32,
}

/// How the job runs.
#[derive(Debug, Clone)]
pub struct RetentionOptions {
    /// Time between rounds, across the installation.
    pub interval: Duration,
    /// Most runs deleted (and idempotency records pruned) in one round.
    pub batch: u32,
    /// How long a `request_id` is remembered: its record is pruned after.
    pub idempotency_window: Duration,
    /// How long a webhook delivery that is over (delivered or failed) is kept, with its
    /// attempts, after its last change.
    pub deliveries_window: Duration,
    /// How long a round's lease lasts: a replica killed mid-round holds the job this long.
    pub lease_ttl: Duration,
}

impl Default for RetentionOptions {
    fn default() -> Self {
        RetentionOptions {
            interval: Duration::from_secs(60),
            batch: 100,
            idempotency_window: Duration::from_secs(7 * 24 * 3600),
            deliveries_window: Duration::from_secs(30 * 24 * 3600),
            lease_ttl: Duration::from_secs(120),
        }
    }
}

/// What one round did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoundReport {
    /// Expired runs found (at most the batch).
    pub found: u32,
    pub deleted_runs: u32,
    /// Found but not deleted: moved since (a new message, a lease), or already gone.
    pub skipped_runs: u32,
    pub idempotency_pruned: u64,
    /// Webhook deliveries (delivered or failed) pruned past their window.
    #[serde(default)]
    pub deliveries_pruned: u64,
    /// A batch was full (of runs deleted, or of records pruned): more may be due, and the
    /// next round is due at once.
    pub more: bool,
    /// Why the round stopped early, if it did.
    pub error: Option<String>,
}

/// The retention use cases and the job.
#[derive(Clone)]
pub struct Retention {
    pub store: Arc<dyn RetentionStore>,
    pub bus: Arc<dyn EventBus>,
    pub clock: Arc<dyn Clock>,
    /// This replica: the job lease's owner, and the `run.deleted` events' writer.
    pub replica: String,
    pub options: RetentionOptions,
}

impl Retention {
    /// The tenant's policy, progress and due runs (admin).
    #[tracing::instrument(name = "retention.get", skip_all)]
    pub async fn get(&self, p: &Principal) -> Result<RetentionView, CoreError> {
        p.require(Action::ManageRetention)?;
        let policy = self
            .store
            .get_retention(p.tenant)
            .await?
            .unwrap_or_default();
        let due = self
            .store
            .expired_runs(Some(p.tenant), self.clock.now(), MAX_DUE_COUNTED)
            .await?;
        Ok(RetentionView {
            run_days: policy.run_days,
            deleted_runs: policy.deleted_runs,
            last_deleted_at: policy.last_deleted_at,
            updated_at: policy.updated_at,
            due_runs: u32::try_from(due.len()).unwrap_or(MAX_DUE_COUNTED),
        })
    }

    /// Sets the tenant's default (admin); the job applies it from its next round.
    #[tracing::instrument(name = "retention.set", skip_all)]
    pub async fn set(
        &self,
        p: &Principal,
        new: NewRetentionPolicy,
    ) -> Result<RetentionView, CoreError> {
        p.require(Action::ManageRetention)?;
        check_days("run_days", new.run_days)?;
        let now = self.clock.now();
        let audit = AuditEntry::by(
            p,
            now,
            AuditAction::RetentionSet,
            p.tenant.to_string(),
            serde_json::json!({"run_days": new.run_days}),
        );
        self.store
            .put_retention(p.tenant, new.run_days, now, &audit)
            .await?;
        self.get(p).await
    }

    /// The job as the store keeps it (for the operator's tools and tests).
    pub async fn status(&self) -> Result<Option<JobStatus>, CoreError> {
        Ok(self.store.job_status(JOB).await?)
    }

    /// Runs one round if this replica gets the job's lease; `None` when the round is not
    /// due or another replica holds it.
    #[tracing::instrument(name = "retention.round", skip_all)]
    pub async fn round(&self) -> Result<Option<RoundReport>, CoreError> {
        let o = &self.options;
        let now = self.clock.now();
        let Some(lease) = self
            .store
            .claim_job(JOB, &self.replica, now, o.lease_ttl)
            .await?
        else {
            return Ok(None);
        };
        let mut report = RoundReport::default();
        if let Err(e) = self.delete_expired(&mut report).await {
            report.error = Some(e.to_string());
        }
        if report.error.is_none() {
            match self.prune(now).await {
                Ok(n) => report.idempotency_pruned = n,
                Err(e) => report.error = Some(e.to_string()),
            }
        }
        if report.error.is_none() {
            match self.prune_deliveries(now).await {
                Ok(n) => report.deliveries_pruned = n,
                Err(e) => report.error = Some(e.to_string()),
            }
        }
        // A full batch of either may leave more due. Runs found but all skipped (moved
        // since) are no reason to go again at once: they would be found again.
        report.more = report.error.is_none()
            && ((report.found >= o.batch && report.deleted_runs > 0)
                || report.idempotency_pruned >= u64::from(o.batch)
                || report.deliveries_pruned >= u64::from(o.batch));
        let done = self.clock.now();
        let next = if report.more {
            done
        } else {
            done + chrono::TimeDelta::from_std(o.interval).unwrap_or(chrono::TimeDelta::MAX)
        };
        let json = serde_json::to_value(&report).unwrap_or_default();
        if !self.store.finish_job(&lease, &json, done, next).await? {
            tracing::warn!("the retention round outlived its lease; another replica took it");
        }
        metrics::counter!("baton_retention_rounds_total").increment(1);
        metrics::counter!("baton_retention_runs_deleted_total")
            .increment(u64::from(report.deleted_runs));
        metrics::counter!("baton_retention_idempotency_pruned_total")
            .increment(report.idempotency_pruned);
        metrics::counter!("baton_retention_deliveries_pruned_total")
            .increment(report.deliveries_pruned);
        if report.deleted_runs > 0
            || report.idempotency_pruned > 0
            || report.deliveries_pruned > 0
            || report.error.is_some()
        {
            tracing::info!(
                found = report.found,
                deleted_runs = report.deleted_runs,
                skipped_runs = report.skipped_runs,
                idempotency_pruned = report.idempotency_pruned,
                deliveries_pruned = report.deliveries_pruned,
                more = report.more,
                error = report.error.as_deref(),
                "retention round"
            );
        }
        Ok(Some(report))
    }

    async fn delete_expired(&self, report: &mut RoundReport) -> Result<(), StoreError> {
        let now = self.clock.now();
        let batch = self.options.batch;
        let expired = self.store.expired_runs(None, now, batch).await?;
        report.found = u32::try_from(expired.len()).unwrap_or(batch);
        for run in expired {
            let at = self.clock.now();
            let audit = AuditEntry::retention(
                at,
                AuditAction::RunDeleted,
                run.run.to_string(),
                serde_json::json!({"events": run.version}),
            );
            match self.store.delete_expired_run(&run, &audit).await {
                Ok(()) => {
                    report.deleted_runs += 1;
                    let last = crate::runs::tombstone(
                        run.tenant,
                        run.run,
                        run.version,
                        &self.replica,
                        crate::model::RETENTION,
                        at,
                    );
                    self.bus.publish(&[last]).await;
                }
                Err(StoreError::Conflict { .. } | StoreError::NotFound) => {
                    report.skipped_runs += 1;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    async fn prune_deliveries(
        &self,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<u64, StoreError> {
        let window = chrono::TimeDelta::from_std(self.options.deliveries_window)
            .unwrap_or(chrono::TimeDelta::MAX);
        let Some(before) = now.checked_sub_signed(window) else {
            return Ok(0);
        };
        self.store
            .prune_deliveries(before, self.options.batch)
            .await
    }

    async fn prune(&self, now: chrono::DateTime<chrono::Utc>) -> Result<u64, StoreError> {
        let window = chrono::TimeDelta::from_std(self.options.idempotency_window)
            .unwrap_or(chrono::TimeDelta::MAX);
        let Some(before) = now.checked_sub_signed(window) else {
            return Ok(0);
        };
        self.store
            .prune_idempotency(before, self.options.batch)
            .await
    }

    /// Offers to run a round every `interval` (at once again after a full round) until
    /// `shutdown`. Errors are logged and the next offer comes as usual.
    pub async fn run(self, shutdown: CancellationToken) {
        loop {
            let pause = match self.round().await {
                Ok(Some(r)) if r.more && r.error.is_none() => Duration::ZERO,
                Ok(_) => self.options.interval,
                Err(e) => {
                    tracing::warn!(error = %e, "the retention job could not run a round");
                    self.options.interval
                }
            };
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(pause) => {}
            }
        }
    }
}

/// A retention in days (`field`), if given, must be 1 to [`MAX_RETENTION_DAYS`].
pub fn check_days(field: &str, days: Option<u32>) -> Result<(), CoreError> {
    match days {
        Some(d) if d == 0 || d > MAX_RETENTION_DAYS => Err(CoreError::invalid(format!(
            "{field} must be between 1 and {MAX_RETENTION_DAYS} days, or null, got {d}"
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_outside_one_to_a_hundred_years_are_refused_and_null_keeps_runs() {
        assert!(check_days("run_days", None).is_ok());
        assert!(check_days("run_days", Some(1)).is_ok());
        assert!(check_days("run_days", Some(MAX_RETENTION_DAYS)).is_ok());
        for bad in [0, MAX_RETENTION_DAYS + 1] {
            let e = check_days("limits.retention_days", Some(bad)).expect_err("refused");
            assert!(
                e.to_string()
                    .contains("limits.retention_days must be between 1 and 36500"),
                "{e}"
            );
        }
    }
}
