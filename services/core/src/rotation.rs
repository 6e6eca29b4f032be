//! Key rotation: re-sealing tenant secrets and run checkpoints under the keyring's active
//! key, so that older keys can leave the keyring.
//!
//! [`Rotation::reseal`] pages through the records whose row names another key (every
//! tenant's for the operator's `baton keys rotate`, one tenant's for the admin endpoint),
//! opens each under the key it names and seals it again under the active key with the
//! same associated data, and writes each batch in one transaction that replaces a row only
//! while it still holds what was read. So a crash loses at most the batch in flight,
//! running again continues with what is left, and a secret written meanwhile is never
//! overwritten with its older value. A record that opens under no key of the ring is
//! reported (where it is and its key id, never what it holds) and left as it is.
//!
//! [`EncryptionKeys`] is the tenant admin's side: the tenant's records per key, and a
//! reseal of the tenant's records run in the background on one replica.

use crate::audit::{AuditAction, AuditEntry};
use crate::auth::{Action, Principal};
use crate::crypto::{CryptoError, Keyring};
use crate::error::{CoreError, StoreError};
use crate::ports::{AuditStore, Clock, KeyUsage, SealedRecord, SealedRef, SealedStore, SealedSwap};
use baton_events::TenantId;
use chrono::{DateTime, Utc};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

#[cfg(test)]
mod tests;

/// Records re-sealed per transaction unless told otherwise.
pub const DEFAULT_BATCH: u32 = 100;
/// The largest batch accepted.
pub const MAX_BATCH: u32 = 1000;
/// Passes over the records at most: a pass after the first only picks up records written
/// under another key while the previous one ran (by a replica still sealing with an
/// older key).
const MAX_PASSES: usize = 3;
/// Unreadable records a job of the admin endpoint names (it counts them all).
const NAMED_UNREADABLE: usize = 100;

/// Re-sealing under the active key: the sealed records and the ring.
#[derive(Clone)]
pub struct Rotation {
    pub store: Arc<dyn SealedStore>,
    pub keyring: Arc<Keyring>,
}

/// What to reseal and how fast.
#[derive(Debug, Clone)]
pub struct ResealOptions {
    /// One tenant's records, or (`None`) every tenant's.
    pub tenant: Option<TenantId>,
    /// Records per transaction, 1 to [`MAX_BATCH`].
    pub batch: u32,
    /// A pause after each batch, to spread the load on the database.
    pub pause: Duration,
}

impl Default for ResealOptions {
    fn default() -> Self {
        ResealOptions {
            tenant: None,
            batch: DEFAULT_BATCH,
            pause: Duration::ZERO,
        }
    }
}

/// How far a reseal got with one kind of record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct KindProgress {
    /// Records found under another key than the active one (it grows when a later pass
    /// finds records written under another key meanwhile).
    pub total: u64,
    /// Re-sealed under the active key.
    pub resealed: u64,
    /// Rewritten or deleted by someone else between read and write: left to that write.
    pub changed: u64,
    /// Open under no key of the ring: reported and left as they are.
    pub unreadable: u64,
}

impl KindProgress {
    /// Records dealt with, one way or another.
    pub fn done(&self) -> u64 {
        self.resealed + self.changed + self.unreadable
    }

    fn record(&mut self, written: bool) {
        if written {
            self.resealed += 1;
        } else {
            self.changed += 1;
        }
    }
}

/// How far a reseal got.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Progress {
    pub secrets: KindProgress,
    pub checkpoints: KindProgress,
}

impl Progress {
    fn kind(&mut self, kind: Kind) -> &mut KindProgress {
        match kind {
            Kind::Secrets => &mut self.secrets,
            Kind::Checkpoints => &mut self.checkpoints,
        }
    }

    fn resealed(&self) -> u64 {
        self.secrets.resealed + self.checkpoints.resealed
    }
}

/// `secrets 120/500, checkpoints 40/900`: records dealt with of those found.
impl fmt::Display for Progress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let part = |p: &KindProgress| format!("{}/{}", p.done(), p.total.max(p.done()));
        write!(
            f,
            "secrets {}, checkpoints {}",
            part(&self.secrets),
            part(&self.checkpoints)
        )
    }
}

/// A record that opens under no key of the ring.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnreadableRecord {
    pub at: SealedRef,
    /// The key id its row records.
    pub key_id: String,
    /// Why it does not open; names no key material and no content.
    pub reason: String,
}

impl fmt::Display for UnreadableRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} of tenant {} (key {:?}): {}",
            self.at,
            self.at.tenant(),
            self.key_id,
            self.reason
        )
    }
}

/// What a reseal did.
#[derive(Debug, Clone)]
pub struct ResealReport {
    /// The key everything was re-sealed under.
    pub active: String,
    pub progress: Progress,
    /// Records that open under no key of the ring, in paging order.
    pub unreadable: Vec<UnreadableRecord>,
    /// False when it was stopped before it went through every record.
    pub finished: bool,
    /// Per key id other than the active one, what its rows still seal afterwards (the
    /// unreadable records, and any written under another key during the last pass).
    pub left: Vec<KeyUsage>,
}

impl ResealReport {
    /// Records still under another key than the active one.
    pub fn left_total(&self) -> u64 {
        self.left.iter().map(|u| u.secrets + u.checkpoints).sum()
    }
}

/// One key id and the records sealed under it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct KeyStatus {
    pub key_id: String,
    /// Whether it seals new records.
    pub active: bool,
    /// Whether the keyring holds it; records under a key it lacks cannot be read.
    pub configured: bool,
    pub secrets: u64,
    pub checkpoints: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Secrets,
    Checkpoints,
}

impl Rotation {
    /// Per key id (every key of the ring, and every key id the records name), how many
    /// secrets and checkpoints it seals, of `tenant` or of every tenant.
    pub async fn status(&self, tenant: Option<TenantId>) -> Result<Vec<KeyStatus>, StoreError> {
        let active = self.keyring.active_id();
        let mut by_id: BTreeMap<String, KeyStatus> = self
            .keyring
            .ids()
            .map(|id| {
                let status = KeyStatus {
                    key_id: id.to_string(),
                    active: id == active,
                    configured: true,
                    secrets: 0,
                    checkpoints: 0,
                };
                (id.to_string(), status)
            })
            .collect();
        for u in self.store.key_usage(tenant).await? {
            let status = by_id.entry(u.key_id.clone()).or_insert_with(|| KeyStatus {
                key_id: u.key_id.clone(),
                active: false,
                configured: false,
                secrets: 0,
                checkpoints: 0,
            });
            status.secrets = u.secrets;
            status.checkpoints = u.checkpoints;
        }
        Ok(by_id.into_values().collect())
    }

    /// Re-seals every record of `opts.tenant` (or of every tenant) that is not under the
    /// active key, secrets first, then checkpoints, calling `on_batch` after each batch.
    /// `stop` is asked before each batch; when it says so the reseal ends early
    /// (`finished` is false) and a later one continues. Fails only when the store does:
    /// records that do not open are in the report.
    pub async fn reseal<P, S>(
        &self,
        opts: &ResealOptions,
        mut on_batch: P,
        stop: S,
    ) -> Result<ResealReport, StoreError>
    where
        P: FnMut(&Progress) + Send,
        S: Fn() -> bool + Send + Sync,
    {
        let active = self.keyring.active_id().to_string();
        let batch = opts.batch.clamp(1, MAX_BATCH);
        let mut progress = Progress::default();
        let mut unreadable: BTreeMap<SealedRef, UnreadableRecord> = BTreeMap::new();
        let mut left = self.left(opts.tenant, &active).await?;
        progress.secrets.total = left.iter().map(|u| u.secrets).sum();
        progress.checkpoints.total = left.iter().map(|u| u.checkpoints).sum();
        let mut finished = false;
        'passes: for pass in 0..MAX_PASSES {
            let resealed_before = progress.resealed();
            if pass > 0 {
                // Records written under another key during the previous pass: found again
                // now, beside the unreadable ones already counted.
                for kind in [Kind::Secrets, Kind::Checkpoints] {
                    let known = unreadable.keys().filter(|at| kind_of(at) == kind).count() as u64;
                    let under_others: u64 = left
                        .iter()
                        .map(|u| match kind {
                            Kind::Secrets => u.secrets,
                            Kind::Checkpoints => u.checkpoints,
                        })
                        .sum();
                    let p = progress.kind(kind);
                    p.total = p.done() + under_others.saturating_sub(known);
                }
            }
            for kind in [Kind::Secrets, Kind::Checkpoints] {
                let mut after: Option<SealedRef> = None;
                loop {
                    if stop() {
                        break 'passes;
                    }
                    let page = self
                        .page(kind, opts.tenant, &active, after.as_ref(), batch)
                        .await?;
                    let Some(last) = page.last() else {
                        break;
                    };
                    after = Some(last.at.clone());
                    let full = page.len() >= batch as usize;
                    let mut swaps = Vec::with_capacity(page.len());
                    for record in page {
                        if unreadable.contains_key(&record.at) {
                            continue;
                        }
                        match self.keyring.reseal(&record.at.aad(), &record.ciphertext) {
                            Ok(Some(sealed)) => swaps.push(SealedSwap {
                                read: record,
                                sealed,
                            }),
                            Ok(None) => {
                                let reason = format!(
                                    "its envelope names the active key {active:?} while its \
                                     row names another"
                                );
                                progress.kind(kind).unreadable += 1;
                                report_unreadable(&mut unreadable, record, reason);
                            }
                            Err(e) => {
                                progress.kind(kind).unreadable += 1;
                                report_unreadable(&mut unreadable, record, describe(&e));
                            }
                        }
                    }
                    if !swaps.is_empty() {
                        let written = self.store.swap_sealed(&swaps).await?;
                        for w in written {
                            progress.kind(kind).record(w);
                        }
                    }
                    on_batch(&progress);
                    if !full {
                        break;
                    }
                    if !opts.pause.is_zero() {
                        tokio::time::sleep(opts.pause).await;
                    }
                }
            }
            left = self.left(opts.tenant, &active).await?;
            let under_others: u64 = left.iter().map(|u| u.secrets + u.checkpoints).sum();
            // Done when only unreadable records are left, or when a pass got no further.
            if under_others <= unreadable.len() as u64 || progress.resealed() == resealed_before {
                finished = true;
                break;
            }
            finished = pass + 1 == MAX_PASSES;
        }
        if !finished {
            left = self.left(opts.tenant, &active).await?;
        }
        Ok(ResealReport {
            active,
            progress,
            unreadable: unreadable.into_values().collect(),
            finished,
            left,
        })
    }

    /// Key usage other than the active key's.
    async fn left(
        &self,
        tenant: Option<TenantId>,
        active: &str,
    ) -> Result<Vec<KeyUsage>, StoreError> {
        let mut usage = self.store.key_usage(tenant).await?;
        usage.retain(|u| u.key_id != active && u.secrets + u.checkpoints > 0);
        Ok(usage)
    }

    async fn page(
        &self,
        kind: Kind,
        tenant: Option<TenantId>,
        active: &str,
        after: Option<&SealedRef>,
        limit: u32,
    ) -> Result<Vec<SealedRecord>, StoreError> {
        match kind {
            Kind::Secrets => {
                let after = match after {
                    Some(SealedRef::Secret { tenant, name }) => Some((*tenant, name.as_str())),
                    _ => None,
                };
                self.store
                    .secrets_not_under(tenant, active, after, limit)
                    .await
            }
            Kind::Checkpoints => {
                let after = match after {
                    Some(SealedRef::Checkpoint { run, id, .. }) => Some((*run, *id)),
                    _ => None,
                };
                self.store
                    .checkpoints_not_under(tenant, active, after, limit)
                    .await
            }
        }
    }
}

fn kind_of(at: &SealedRef) -> Kind {
    match at {
        SealedRef::Secret { .. } => Kind::Secrets,
        SealedRef::Checkpoint { .. } => Kind::Checkpoints,
    }
}

fn report_unreadable(
    unreadable: &mut BTreeMap<SealedRef, UnreadableRecord>,
    record: SealedRecord,
    reason: String,
) {
    tracing::warn!(
        record = %record.at,
        tenant = %record.at.tenant(),
        key_id = %record.key_id,
        %reason,
        "a sealed record does not open; it is left as it is"
    );
    let entry = UnreadableRecord {
        at: record.at.clone(),
        key_id: record.key_id,
        reason,
    };
    unreadable.insert(record.at, entry);
}

/// Why a record does not open, in words that name no key material.
fn describe(e: &CryptoError) -> String {
    match e {
        CryptoError::UnknownKey(id) => format!("its key {id:?} is not in the keyring"),
        CryptoError::Decrypt => "it does not decrypt under its key (other key bytes under \
                                 that id, or the row was altered or moved)"
            .to_string(),
        CryptoError::Malformed => "its envelope is malformed".to_string(),
        other => other.to_string(),
    }
}

// --- The tenant admin's side -----------------------------------------------------------

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
    pub rotation: Rotation,
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
        rotation: Rotation,
        audit: Arc<dyn AuditStore>,
        clock: Arc<dyn Clock>,
    ) -> EncryptionKeys {
        EncryptionKeys {
            rotation,
            audit,
            clock,
            jobs: Arc::default(),
        }
    }

    /// The caller's tenant's records per key (admin).
    #[tracing::instrument(name = "keys.status", skip_all)]
    pub async fn status(&self, p: &Principal) -> Result<TenantKeys, CoreError> {
        p.require(Action::ManageEncryption)?;
        // The job first: once it shows a reseal ended, the counts read after it include
        // everything that reseal wrote.
        let reseal = self.jobs().get(&p.tenant).cloned();
        let keys = self.rotation.status(Some(p.tenant)).await?;
        Ok(TenantKeys {
            active_key: self.rotation.keyring.active_id().to_string(),
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
        p.require(Action::ManageEncryption)?;
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
            active_key: self.rotation.keyring.active_id().to_string(),
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
            .rotation
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
