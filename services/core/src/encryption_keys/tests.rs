//! Re-sealing against an in-memory store: every record moves to the active key and still
//! opens, a stopped reseal continues where it stopped, a concurrent write wins over the
//! reseal, unreadable records are reported by id and left alone, a tenant's reseal stays
//! in its tenant, and the admin's use cases check the role and run one job at a time.

use super::*;
use crate::crypto::{Aad, Keyring};
use crate::error::CoreError;
use crate::error::StoreError;
use crate::model::{AuditAction, AuditEntry, Principal, Role};
use crate::ports::{
    AuditQuery, AuditStore, KeyUsage, SealedRecord, SealedRef, SealedStore, SealedSwap, SystemClock,
};
use async_trait::async_trait;
use baton_events::TenantId;
use baton_events::{CheckpointId, RunId};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

type Rows = BTreeMap<SealedRef, (String, Vec<u8>)>;
type Hook = Box<dyn FnOnce(&mut Rows) + Send>;

/// Sealed records in memory; `before_swap` runs once, inside the next swap, before it
/// compares anything (another writer getting in between read and write).
#[derive(Default)]
struct Memory {
    rows: Mutex<Rows>,
    before_swap: Mutex<Option<Hook>>,
    audit: Mutex<Vec<(TenantId, AuditEntry)>>,
}

#[async_trait]
impl AuditStore for Memory {
    async fn append_audit(&self, tenant: TenantId, entry: &AuditEntry) -> Result<(), StoreError> {
        self.audit
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((tenant, entry.clone()));
        Ok(())
    }

    async fn list_audit(
        &self,
        tenant: TenantId,
        _: &AuditQuery,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        let entries = self.audit.lock().unwrap_or_else(|e| e.into_inner());
        Ok(entries
            .iter()
            .filter(|(t, _)| *t == tenant)
            .map(|(_, e)| e.clone())
            .collect())
    }
}

impl Memory {
    fn rows(&self) -> MutexGuard<'_, Rows> {
        self.rows.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn put(&self, at: SealedRef, sealed: crate::crypto::Sealed) {
        self.rows().insert(at, (sealed.key_id, sealed.bytes));
    }

    fn key_of(&self, at: &SealedRef) -> String {
        self.rows().get(at).map(|r| r.0.clone()).unwrap_or_default()
    }

    fn page(
        &self,
        tenant: Option<TenantId>,
        key_id: &str,
        keep: impl Fn(&SealedRef) -> bool,
        order: impl Fn(&SealedRef) -> (uuid::Uuid, String),
        after: Option<(uuid::Uuid, String)>,
        limit: u32,
    ) -> Vec<SealedRecord> {
        let mut found: Vec<SealedRecord> = self
            .rows()
            .iter()
            .filter(|(at, (k, _))| {
                keep(at)
                    && k != key_id
                    && tenant.is_none_or(|t| at.tenant() == t)
                    && after.as_ref().is_none_or(|a| order(at) > *a)
            })
            .map(|(at, (k, c))| SealedRecord {
                at: at.clone(),
                key_id: k.clone(),
                ciphertext: c.clone(),
            })
            .collect();
        found.sort_by_key(|r| order(&r.at));
        found.truncate(limit as usize);
        found
    }
}

#[async_trait]
impl SealedStore for Memory {
    async fn key_usage(&self, tenant: Option<TenantId>) -> Result<Vec<KeyUsage>, StoreError> {
        let mut by_key: BTreeMap<String, KeyUsage> = BTreeMap::new();
        for (at, (k, _)) in self.rows().iter() {
            if tenant.is_some_and(|t| at.tenant() != t) {
                continue;
            }
            let u = by_key.entry(k.clone()).or_insert_with(|| KeyUsage {
                key_id: k.clone(),
                secrets: 0,
                checkpoints: 0,
            });
            match at {
                SealedRef::Secret { .. } => u.secrets += 1,
                SealedRef::Checkpoint { .. } => u.checkpoints += 1,
            }
        }
        Ok(by_key.into_values().collect())
    }

    async fn secrets_not_under(
        &self,
        tenant: Option<TenantId>,
        key_id: &str,
        after: Option<(TenantId, &str)>,
        limit: u32,
    ) -> Result<Vec<SealedRecord>, StoreError> {
        let order = |at: &SealedRef| match at {
            SealedRef::Secret { tenant, name } => (tenant.as_uuid(), name.clone()),
            SealedRef::Checkpoint { .. } => (uuid::Uuid::nil(), String::new()),
        };
        let keep = |at: &SealedRef| matches!(at, SealedRef::Secret { .. });
        let after = after.map(|(t, n)| (t.as_uuid(), n.to_string()));
        Ok(self.page(tenant, key_id, keep, order, after, limit))
    }

    async fn checkpoints_not_under(
        &self,
        tenant: Option<TenantId>,
        key_id: &str,
        after: Option<(RunId, CheckpointId)>,
        limit: u32,
    ) -> Result<Vec<SealedRecord>, StoreError> {
        let order = |at: &SealedRef| match at {
            SealedRef::Checkpoint { run, id, .. } => (run.as_uuid(), id.to_string()),
            SealedRef::Secret { .. } => (uuid::Uuid::nil(), String::new()),
        };
        let keep = |at: &SealedRef| matches!(at, SealedRef::Checkpoint { .. });
        let after = after.map(|(r, i)| (r.as_uuid(), i.to_string()));
        Ok(self.page(tenant, key_id, keep, order, after, limit))
    }

    async fn swap_sealed(&self, swaps: &[SealedSwap]) -> Result<Vec<bool>, StoreError> {
        let hook = self
            .before_swap
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let mut rows = self.rows();
        if let Some(hook) = hook {
            hook(&mut rows);
        }
        Ok(swaps
            .iter()
            .map(|s| match rows.get_mut(&s.read.at) {
                Some(row) if row.0 == s.read.key_id && row.1 == s.read.ciphertext => {
                    *row = (s.sealed.key_id.clone(), s.sealed.bytes.clone());
                    true
                }
                _ => false,
            })
            .collect())
    }
}

fn key(fill: u8) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode([fill; crate::crypto::KEY_LEN])
}

fn ring(keys: &[&str], active: &str) -> Arc<Keyring> {
    let keys: Vec<(String, String)> = keys
        .iter()
        .map(|id| {
            let fill = match *id {
                "old" => 1,
                "new" => 2,
                _ => 3,
            };
            (id.to_string(), key(fill))
        })
        .collect();
    Arc::new(Keyring::from_config(&keys, active).expect("ring"))
}

fn secret(tenant: TenantId, name: &str) -> SealedRef {
    SealedRef::Secret {
        tenant,
        name: name.to_string(),
    }
}

fn checkpoint(tenant: TenantId) -> SealedRef {
    SealedRef::Checkpoint {
        tenant,
        run: RunId::new(),
        id: CheckpointId::new(),
    }
}

fn plaintext(at: &SealedRef) -> Vec<u8> {
    format!("plaintext of {at}").into_bytes()
}

/// Seals `at` with `ring` (its active key) into the store.
fn seal(store: &Memory, ring: &Keyring, at: SealedRef) {
    let sealed = ring.seal(&at.aad(), &plaintext(&at)).expect("seal");
    store.put(at, sealed);
}

/// Two tenants' secrets and checkpoints, all under `old`.
fn world() -> (Arc<Memory>, TenantId, TenantId, Vec<SealedRef>) {
    let store = Arc::new(Memory::default());
    let old = ring(&["old"], "old");
    let (a, b) = (TenantId::new(), TenantId::new());
    let records = vec![
        secret(a, "alpha"),
        secret(a, "beta"),
        secret(b, "gamma"),
        checkpoint(a),
        checkpoint(b),
    ];
    for at in &records {
        seal(&store, &old, at.clone());
    }
    (store, a, b, records)
}

fn resealer(store: Arc<Memory>, keyring: Arc<Keyring>) -> Resealer {
    Resealer { store, keyring }
}

fn opts(tenant: Option<TenantId>, batch: u32) -> ResealOptions {
    ResealOptions {
        tenant,
        batch,
        pause: Duration::ZERO,
    }
}

/// Every record opens with a ring of the new key alone and holds what it was sealed with.
fn assert_open_with_new_only(store: &Memory, records: &[SealedRef]) {
    let new_only = ring(&["new"], "new");
    for at in records {
        let (key_id, bytes) = store.rows().get(at).cloned().expect("row");
        assert_eq!(key_id, "new", "{at}");
        let opened = new_only
            .open(&at.aad(), &bytes)
            .expect("opens with the new key");
        assert_eq!(opened, plaintext(at));
    }
}

#[tokio::test]
async fn every_record_moves_to_the_active_key_in_batches_and_still_opens() {
    let (store, _, _, records) = world();
    let r = resealer(store.clone(), ring(&["old", "new"], "new"));
    let mut seen = Vec::new();
    let report = r
        .reseal(&opts(None, 2), |p| seen.push(p.to_string()), || false)
        .await
        .expect("reseal");
    assert!(report.finished);
    assert!(report.unreadable.is_empty() && report.left.is_empty());
    assert_eq!(report.active, "new");
    assert_eq!(report.progress.secrets.resealed, 3);
    assert_eq!(report.progress.checkpoints.resealed, 2);
    assert_eq!(
        seen,
        [
            "secrets 2/3, checkpoints 0/2",
            "secrets 3/3, checkpoints 0/2",
            "secrets 3/3, checkpoints 2/2",
        ]
    );
    assert_open_with_new_only(&store, &records);

    // Again: nothing is left to do.
    let again = r
        .reseal(&opts(None, 2), |_| {}, || false)
        .await
        .expect("reseal");
    assert_eq!(again.progress, Progress::default());
    assert!(again.finished);
}

#[tokio::test]
async fn a_stopped_reseal_continues_where_it_stopped() {
    let (store, _, _, records) = world();
    let r = resealer(store.clone(), ring(&["old", "new"], "new"));
    let asked = AtomicUsize::new(0);
    // One batch of one record, then stop: what a crash after the first batch leaves.
    let first = r
        .reseal(
            &opts(None, 1),
            |_| {},
            || asked.fetch_add(1, Ordering::SeqCst) >= 1,
        )
        .await
        .expect("reseal");
    assert!(!first.finished);
    assert_eq!(first.progress.secrets.resealed, 1);
    assert_eq!(first.left_total(), 4);
    let moved = records
        .iter()
        .filter(|at| store.key_of(at) == "new")
        .count();
    assert_eq!(moved, 1);

    let rest = r
        .reseal(&opts(None, 1), |_| {}, || false)
        .await
        .expect("reseal");
    assert!(rest.finished);
    assert_eq!(
        rest.progress.secrets.resealed + rest.progress.checkpoints.resealed,
        4
    );
    assert_open_with_new_only(&store, &records);
}

#[tokio::test]
async fn a_record_rewritten_between_read_and_write_keeps_the_new_value() {
    let (store, a, _, _) = world();
    let new_ring = ring(&["old", "new"], "new");
    let r = resealer(store.clone(), new_ring.clone());
    // A client puts a new value of `alpha` (under the active key) while the batch that
    // read the old one is being re-sealed.
    let target = secret(a, "alpha");
    let written = new_ring
        .seal(&target.aad(), b"written meanwhile")
        .expect("seal");
    let put = written.clone();
    let at = target.clone();
    *store.before_swap.lock().expect("hook") = Some(Box::new(move |rows: &mut Rows| {
        rows.insert(at, (put.key_id, put.bytes));
    }));
    let report = r
        .reseal(&opts(None, 10), |_| {}, || false)
        .await
        .expect("reseal");
    assert_eq!(report.progress.secrets.changed, 1);
    assert_eq!(report.progress.secrets.resealed, 2);
    assert!(report.finished && report.left.is_empty());
    let (key_id, bytes) = store.rows().get(&target).cloned().expect("row");
    assert_eq!(key_id, "new");
    assert_eq!(bytes, written.bytes, "the later write stays");
}

#[tokio::test]
async fn a_record_written_under_an_old_key_during_the_pass_is_picked_up_again() {
    let (store, a, _, _) = world();
    let r = resealer(store.clone(), ring(&["old", "new"], "new"));
    // A replica not yet told about the new key rewrites `alpha` under `old` meanwhile.
    let old = ring(&["old"], "old");
    let target = secret(a, "alpha");
    let put = old.seal(&target.aad(), &plaintext(&target)).expect("seal");
    let at = target.clone();
    *store.before_swap.lock().expect("hook") = Some(Box::new(move |rows: &mut Rows| {
        rows.insert(at, (put.key_id, put.bytes));
    }));
    let report = r
        .reseal(&opts(None, 10), |_| {}, || false)
        .await
        .expect("reseal");
    assert!(report.finished && report.left.is_empty(), "{report:?}");
    assert_eq!(store.key_of(&target), "new");
    assert_eq!(report.progress.secrets.changed, 1);
    assert_eq!(report.progress.secrets.resealed, 3);
    assert_eq!(report.progress.to_string(), "secrets 4/4, checkpoints 2/2");
}

#[tokio::test]
async fn records_that_do_not_open_are_reported_by_id_and_left_as_they_are() {
    let (store, a, b, records) = world();
    // One under a key the ring lacks, one altered in place.
    let gone = secret(a, "orphan");
    seal(&store, &ring(&["lost"], "lost"), gone.clone());
    let tampered = records[4].clone();
    let before = {
        let mut rows = store.rows();
        let row = rows.get_mut(&tampered).expect("row");
        if let Some(last) = row.1.last_mut() {
            *last ^= 1;
        }
        row.clone()
    };
    let r = resealer(store.clone(), ring(&["old", "new"], "new"));
    let report = r
        .reseal(&opts(None, 2), |_| {}, || false)
        .await
        .expect("reseal");
    assert!(report.finished);
    let named: Vec<String> = report.unreadable.iter().map(|u| u.to_string()).collect();
    assert_eq!(named.len(), 2, "{named:?}");
    assert!(
        named[0].starts_with(&format!("secret orphan of tenant {a} (key \"lost\")"))
            && named[0].contains("not in the keyring"),
        "{named:?}"
    );
    assert!(
        named[1].starts_with(&format!("{tampered} of tenant {b} (key \"old\")"))
            && named[1].contains("does not decrypt"),
        "{named:?}"
    );
    assert!(!named.concat().contains("plaintext"), "{named:?}");
    assert_eq!(report.progress.secrets.unreadable, 1);
    assert_eq!(report.progress.checkpoints.unreadable, 1);
    assert_eq!(report.left_total(), 2);
    assert_eq!(store.key_of(&gone), "lost");
    assert_eq!(store.rows().get(&tampered), Some(&before), "untouched");
    assert_open_with_new_only(&store, &records[..4]);
}

#[tokio::test]
async fn a_tenants_reseal_leaves_other_tenants_alone() {
    let (store, a, b, records) = world();
    let r = resealer(store.clone(), ring(&["old", "new"], "new"));
    let report = r
        .reseal(&opts(Some(a), 1), |_| {}, || false)
        .await
        .expect("reseal");
    assert_eq!(report.progress.secrets.resealed, 2);
    assert_eq!(report.progress.checkpoints.resealed, 1);
    for at in &records {
        let want = if at.tenant() == a { "new" } else { "old" };
        assert_eq!(store.key_of(at), want, "{at}");
    }
    let theirs = r.status(Some(b)).await.expect("status");
    let old = theirs.iter().find(|k| k.key_id == "old").expect("old");
    assert_eq!((old.secrets, old.checkpoints), (1, 1));
}

#[tokio::test]
async fn status_lists_ring_keys_and_keys_only_records_name() {
    let (store, _, _, _) = world();
    seal(
        &store,
        &ring(&["lost"], "lost"),
        secret(TenantId::new(), "x"),
    );
    let r = resealer(store, ring(&["old", "new"], "new"));
    let status = r.status(None).await.expect("status");
    let rows: Vec<(&str, bool, bool, u64, u64)> = status
        .iter()
        .map(|k| {
            (
                k.key_id.as_str(),
                k.active,
                k.configured,
                k.secrets,
                k.checkpoints,
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("lost", false, false, 1, 0),
            ("new", true, true, 0, 0),
            ("old", false, true, 3, 2),
        ]
    );
}

fn principal(tenant: TenantId, role: Role) -> Principal {
    Principal {
        tenant,
        role,
        actor: "test".into(),
        source: None,
    }
}

#[tokio::test]
async fn admins_see_and_reseal_their_tenant_one_job_at_a_time() {
    let (store, a, _, _) = world();
    let keys = EncryptionKeys::new(
        resealer(store.clone(), ring(&["old", "new"], "new")),
        store.clone(),
        Arc::new(SystemClock),
    );
    for role in [Role::Viewer, Role::Member] {
        let p = principal(a, role);
        assert!(matches!(
            keys.status(&p).await,
            Err(CoreError::Forbidden(_))
        ));
        assert!(matches!(
            keys.start_reseal(&p, None),
            Err(CoreError::Forbidden(_))
        ));
    }
    let admin = principal(a, Role::Admin);
    for bad in [0, MAX_BATCH + 1] {
        let err = keys.start_reseal(&admin, Some(bad)).map(|_| ());
        assert!(matches!(err, Err(CoreError::Invalid(_))), "{err:?}");
    }
    let before = keys.status(&admin).await.expect("status");
    assert_eq!(before.active_key, "new");
    assert_eq!(before.reseal, None);

    let (job, task) = keys.start_reseal(&admin, Some(1)).expect("start");
    assert_eq!(job.state, ResealState::Running);
    let task = task.expect("a task to run");
    let (again, none) = keys.start_reseal(&admin, None).expect("again");
    assert!(none.is_none(), "one job per tenant at a time");
    assert_eq!(again.started_at, job.started_at);

    task.run(|| false).await;
    let after = keys.status(&admin).await.expect("status");
    let job = after.reseal.expect("the job");
    assert_eq!(job.state, ResealState::Done);
    assert_eq!(job.progress.to_string(), "secrets 2/2, checkpoints 1/1");
    assert!(job.finished_at.is_some() && job.unreadable.is_empty());
    let new = after.keys.iter().find(|k| k.key_id == "new").expect("new");
    assert_eq!((new.secrets, new.checkpoints), (2, 1));
    // The start and the end are in the tenant's audit stream, by the admin.
    let audit = store
        .list_audit(a, &AuditQuery::default())
        .await
        .expect("audit");
    let seen: Vec<_> = audit
        .iter()
        .map(|e| (e.action, e.actor.as_str(), e.target.as_str()))
        .collect();
    assert_eq!(
        seen,
        [
            (AuditAction::ResealStarted, "test", "new"),
            (AuditAction::ResealEnded, "test", "new")
        ]
    );
    assert_eq!(audit[1].details["state"], "done");
    assert_eq!(audit[1].details["progress"]["secrets"]["resealed"], 2);

    // Stopped at once: the next start is a new job.
    let (_, task) = keys.start_reseal(&admin, None).expect("start");
    task.expect("a new task").run(|| true).await;
    let stopped = keys.status(&admin).await.expect("status");
    assert_eq!(stopped.reseal.map(|j| j.state), Some(ResealState::Stopped));
}

#[test]
fn sealed_refs_name_records_without_their_contents() {
    let t = TenantId::new();
    assert_eq!(secret(t, "openai_key").to_string(), "secret openai_key");
    let run = RunId::new();
    let id = CheckpointId::new();
    let c = SealedRef::Checkpoint { tenant: t, run, id };
    assert_eq!(c.to_string(), format!("checkpoint {run}/{id}"));
    assert_eq!(c.aad(), Aad::checkpoint(t, run, id));
    assert_eq!(secret(t, "k").aad(), Aad::secret(t, "k"));
}
