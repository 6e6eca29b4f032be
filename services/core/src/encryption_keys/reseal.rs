//! The operator's side of encryption keys: per key, the records it seals, and re-sealing
//! every record (of one tenant or all) under the keyring's active key.

use crate::crypto::{CryptoError, Keyring};
use crate::error::StoreError;
use crate::ports::{KeyUsage, SealedRecord, SealedRef, SealedStore, SealedSwap};
use baton_events::TenantId;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Records re-sealed per transaction unless told otherwise.
pub const DEFAULT_BATCH: u32 = 100;
/// The largest batch accepted.
pub const MAX_BATCH: u32 = 1000;
/// Passes over the records at most: a pass after the first only picks up records written
/// under another key while the previous one ran (by a replica still sealing with an
/// older key).
const MAX_PASSES: usize = 3;
/// Unreadable records a job of the admin endpoint names (it counts them all).
pub(super) const NAMED_UNREADABLE: usize = 100;

/// Re-sealing under the active key: the sealed records and the ring.
#[derive(Clone)]
pub struct Resealer {
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

impl Resealer {
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
