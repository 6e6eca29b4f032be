//! The tenant admin's side of encryption keys: the tenant's records per key, and reseals of
//! its records run in the background, at most one per tenant at a time on a replica.

use super::{
    DEFAULT_BATCH, KeyStatus, MAX_BATCH, NAMED_UNREADABLE, Progress, ResealOptions, Resealer,
};
use crate::error::CoreError;
use crate::model::{Action, AuditAction, AuditEntry, Principal};
use crate::ports::{AuditStore, Clock};
use baton_events::TenantId;
use chrono::{DateTime, Utc};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// Where a reseal of a tenant's records stands on the replica that runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ResealState {
    Running,
    /// It went through every record of the tenant.
    Done,
    /// The replica shut down first: start it again to continue.
    Stopped,
    /// The database failed it: start it again to continue.
    Failed,
}

/// A reseal of one tenant's records, as the replica running it sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct ResealJob {
    pub state: ResealState,
    /// The key the records are re-sealed under.
    pub active_key: String,
    pub started_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub progress: Progress,
    /// The tenant's records that open under no key of the ring (`secret NAME`,
    /// `checkpoint RUN/ID`), at most 100 of them; `progress` counts them all.
    pub unreadable: Vec<String>,
}

/// The tenant's records per encryption key, and its latest reseal on this replica.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct TenantKeys {
    /// The key new records are sealed under.
    pub active_key: String,
    /// Every key of the ring and every key the tenant's records name, in key id order.
    pub keys: Vec<KeyStatus>,
    /// The latest reseal of the tenant started on this replica, if any (another replica's
    /// shows in `keys` only).
    pub reseal: Option<ResealJob>,
}

/// The tenant admin's use cases: the tenant's key usage, and reseals of its records run in
/// the background, at most one per tenant at a time on a replica. A reseal's start and end
/// go to the tenant's audit stream.
#[derive(Clone)]
pub struct EncryptionKeys {
    pub resealer: Resealer,
    pub audit: Arc<dyn AuditStore>,
    pub clock: Arc<dyn Clock>,
    jobs: Arc<Mutex<HashMap<TenantId, ResealJob>>>,
}

/// A reseal registered by [`EncryptionKeys::start_reseal`], to be run by the caller (on a
/// task of its own).
pub struct ResealTask {
    keys: EncryptionKeys,
    tenant: TenantId,
    batch: u32,
    /// The audit entry of the start, made for whoever asked.
    started: AuditEntry,
}

impl EncryptionKeys {
    pub fn new(
        resealer: Resealer,
        audit: Arc<dyn AuditStore>,
        clock: Arc<dyn Clock>,
    ) -> EncryptionKeys {
        EncryptionKeys {
            resealer,
            audit,
            clock,
            jobs: Arc::default(),
        }
    }

    /// The caller's tenant's records per key (admin).
    #[tracing::instrument(name = "keys.status", skip_all)]
    pub async fn status(&self, p: &Principal) -> Result<TenantKeys, CoreError> {
        p.require(Action::ManageEncryptionKeys)?;
        // The job first: once it shows a reseal ended, the counts read after it include
        // everything that reseal wrote.
        let reseal = self.jobs().get(&p.tenant).cloned();
        let keys = self.resealer.status(Some(p.tenant)).await?;
        Ok(TenantKeys {
            active_key: self.resealer.keyring.active_id().to_string(),
            keys,
            reseal,
        })
    }

    /// Registers a reseal of the caller's tenant (admin) in batches of `batch` (default
    /// [`DEFAULT_BATCH`]). Returns the job as it stands and the task to run, or no task
    /// when a reseal of the tenant is running on this replica already (that one goes on).
    pub fn start_reseal(
        &self,
        p: &Principal,
        batch: Option<u32>,
    ) -> Result<(ResealJob, Option<ResealTask>), CoreError> {
        p.require(Action::ManageEncryptionKeys)?;
        let batch = batch.unwrap_or(DEFAULT_BATCH);
        if !(1..=MAX_BATCH).contains(&batch) {
            return Err(CoreError::invalid(format!(
                "batch must be between 1 and {MAX_BATCH}"
            )));
        }
        let mut jobs = self.jobs();
        if let Some(job) = jobs.get(&p.tenant)
            && job.state == ResealState::Running
        {
            return Ok((job.clone(), None));
        }
        let job = ResealJob {
            state: ResealState::Running,
            active_key: self.resealer.keyring.active_id().to_string(),
            started_at: self.clock.now(),
            finished_at: None,
            progress: Progress::default(),
            unreadable: Vec::new(),
        };
        jobs.insert(p.tenant, job.clone());
        let started = AuditEntry::by(
            p,
            job.started_at,
            AuditAction::ResealStarted,
            job.active_key.clone(),
            serde_json::json!({"batch": batch}),
        );
        let task = ResealTask {
            keys: self.clone(),
            tenant: p.tenant,
            batch,
            started,
        };
        Ok((job, Some(task)))
    }

    fn jobs(&self) -> MutexGuard<'_, HashMap<TenantId, ResealJob>> {
        // A panic while holding the lock leaves a map that is still whole.
        self.jobs.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn record(&self, tenant: TenantId, entry: &AuditEntry) {
        if let Err(e) = self.audit.append_audit(tenant, entry).await {
            tracing::warn!(error = %e, action = entry.action.as_str(), "audit entry not written");
        }
    }

    /// Changes the tenant's job, if it has one, and returns what `change` returns.
    fn update<R>(&self, tenant: TenantId, change: impl FnOnce(&mut ResealJob) -> R) -> Option<R> {
        self.jobs().get_mut(&tenant).map(change)
    }
}

impl ResealTask {
    /// Runs the reseal to its end, recording its progress for [`EncryptionKeys::status`];
    /// `stop` ends it early (at a batch boundary), as a replica's shutdown does. Its start
    /// and its end are appended to the tenant's audit stream (a failed append is logged:
    /// the reseal changes no record's contents, so it goes on).
    #[tracing::instrument(name = "keys.reseal", skip_all, fields(tenant = %self.tenant))]
    pub async fn run(self, stop: impl Fn() -> bool + Send + Sync) {
        let ResealTask {
            keys,
            tenant,
            batch,
            started,
        } = self;
        keys.record(tenant, &started).await;
        let opts = ResealOptions {
            tenant: Some(tenant),
            batch,
            pause: Duration::ZERO,
        };
        let outcome = keys
            .resealer
            .reseal(
                &opts,
                |p| {
                    keys.update(tenant, |job| job.progress = *p);
                },
                stop,
            )
            .await;
        let now = keys.clock.now();
        // What the audit entry of the end says: the job as it ends.
        let ended =
            |job: &ResealJob| serde_json::json!({"state": job.state, "progress": job.progress});
        let ended = match outcome {
            Ok(report) => {
                tracing::info!(progress = %report.progress, finished = report.finished, "reseal ended");
                keys.update(tenant, |job| {
                    job.state = if report.finished {
                        ResealState::Done
                    } else {
                        ResealState::Stopped
                    };
                    job.finished_at = Some(now);
                    job.progress = report.progress;
                    job.unreadable = report
                        .unreadable
                        .iter()
                        .take(NAMED_UNREADABLE)
                        .map(|u| u.at.to_string())
                        .collect();
                    ended(job)
                })
            }
            Err(e) => {
                tracing::warn!(error = %e, "reseal failed");
                keys.update(tenant, |job| {
                    job.state = ResealState::Failed;
                    job.finished_at = Some(now);
                    ended(job)
                })
            }
        };
        if let Some(details) = ended {
            let entry = AuditEntry {
                id: uuid::Uuid::now_v7(),
                at: now,
                action: AuditAction::ResealEnded,
                details,
                ..started
            };
            keys.record(tenant, &entry).await;
        }
    }
}
