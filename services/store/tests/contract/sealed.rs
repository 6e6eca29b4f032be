//! Contract: the sealed records by key, for key rotation. Usage counts per key id for one
//! tenant or all; records not under a key page in primary-key order with a cursor, within
//! a tenant when asked; a batch of swaps writes exactly the rows that still hold what was
//! read, and nothing else of them.

use crate::support::*;
use baton_core::crypto::Sealed;
use baton_core::model::CheckpointMeta;
use baton_core::ports::{
    KeyUsage, SealedRecord, SealedRef, SealedStore, SealedSwap, StoredCheckpoint,
};
use baton_events::{CheckpointId, RunId, TenantId};

fn sealed(key_id: &str, fill: u8) -> Sealed {
    let mut bytes = vec![1, key_id.len() as u8];
    bytes.extend_from_slice(key_id.as_bytes());
    bytes.extend([0u8, 0xff, fill]);
    bytes.extend(std::iter::repeat_n(fill, 28));
    Sealed {
        key_id: key_id.into(),
        bytes,
    }
}

async fn put<S: Store>(s: &S, t: TenantId, name: &str, key_id: &str, fill: u8) -> SealedRef {
    s.put_secret(t, name, &sealed(key_id, fill), now(), &audited())
        .await
        .expect("put secret");
    SealedRef::Secret {
        tenant: t,
        name: name.into(),
    }
}

async fn save<S: Store>(s: &S, t: TenantId, run: RunId, key_id: &str, fill: u8) -> SealedRef {
    let id = CheckpointId::new();
    let c = StoredCheckpoint {
        meta: CheckpointMeta {
            id,
            through_version: 1,
            key_id: key_id.into(),
            size: 10,
            sha256: "ab".repeat(32),
            created_at: now(),
        },
        ciphertext: sealed(key_id, fill).bytes,
    };
    s.save_checkpoint(t, run, &c)
        .await
        .expect("save checkpoint");
    SealedRef::Checkpoint { tenant: t, run, id }
}

fn usage(key_id: &str, secrets: u64, checkpoints: u64) -> KeyUsage {
    KeyUsage {
        key_id: key_id.into(),
        secrets,
        checkpoints,
    }
}

fn refs(records: &[SealedRecord]) -> Vec<SealedRef> {
    records.iter().map(|r| r.at.clone()).collect()
}

/// Every secret of `tenant` (or all) not under `key`, paged `limit` at a time.
async fn all_secrets<S: Store + SealedStore>(
    s: &S,
    tenant: Option<TenantId>,
    key: &str,
    limit: u32,
) -> Vec<SealedRecord> {
    let mut out: Vec<SealedRecord> = Vec::new();
    loop {
        let after = match out.last().map(|r| &r.at) {
            Some(SealedRef::Secret { tenant, name }) => Some((*tenant, name.as_str())),
            _ => None,
        };
        let page = s
            .secrets_not_under(tenant, key, after, limit)
            .await
            .expect("page");
        assert!(page.len() <= limit as usize);
        let last = page.len() < limit as usize;
        out.extend(page);
        if last {
            return out;
        }
    }
}

async fn all_checkpoints<S: Store + SealedStore>(
    s: &S,
    tenant: Option<TenantId>,
    key: &str,
    limit: u32,
) -> Vec<SealedRecord> {
    let mut out: Vec<SealedRecord> = Vec::new();
    loop {
        let after = match out.last().map(|r| &r.at) {
            Some(SealedRef::Checkpoint { run, id, .. }) => Some((*run, *id)),
            _ => None,
        };
        let page = s
            .checkpoints_not_under(tenant, key, after, limit)
            .await
            .expect("page");
        let last = page.len() < limit as usize;
        out.extend(page);
        if last {
            return out;
        }
    }
}

pub async fn key_usage_counts_secrets_and_checkpoints_per_key_for_a_tenant_or_all<
    S: Store + SealedStore,
>(
    s: &S,
) {
    let (a, b) = (tenant(s).await, tenant(s).await);
    let (run_a, run_b) = (new_run(s, a).await, new_run(s, b).await);
    put(s, a, "one", "k1", 1).await;
    put(s, a, "two", "k2", 2).await;
    put(s, b, "one", "k1", 3).await;
    save(s, a, run_a, "k1", 4).await;
    save(s, a, run_a, "k1", 5).await;
    save(s, b, run_b, "k3", 6).await;

    let all = s.key_usage(None).await.expect("usage");
    assert_eq!(
        all,
        vec![usage("k1", 2, 2), usage("k2", 1, 0), usage("k3", 0, 1)]
    );
    let mine = s.key_usage(Some(a)).await.expect("usage");
    assert_eq!(mine, vec![usage("k1", 1, 2), usage("k2", 1, 0)]);
    let nobody = s.key_usage(Some(TenantId::new())).await.expect("usage");
    assert!(nobody.is_empty());
}

pub async fn records_not_under_a_key_page_in_key_order_within_a_tenant_when_asked<
    S: Store + SealedStore,
>(
    s: &S,
) {
    let (a, b) = (tenant(s).await, tenant(s).await);
    let mut expected_a = Vec::new();
    let mut expected_all = Vec::new();
    for (t, name, key) in [
        (a, "c", "old"),
        (a, "a", "old"),
        (a, "B", "old"),
        (a, "new_one", "new"),
        (b, "a", "old"),
        (b, "z", "older"),
    ] {
        let at = put(s, t, name, key, 9).await;
        if key != "new" {
            expected_all.push(at.clone());
            if t == a {
                expected_a.push(at);
            }
        }
    }
    // Byte-wise name order within a tenant ("B" before "a").
    let mine = all_secrets(s, Some(a), "new", 2).await;
    let names: Vec<SealedRef> = refs(&mine);
    let mut sorted_a = expected_a.clone();
    sorted_a.sort_by(|x, y| match (x, y) {
        (SealedRef::Secret { name: n, .. }, SealedRef::Secret { name: m, .. }) => {
            n.as_bytes().cmp(m.as_bytes())
        }
        _ => std::cmp::Ordering::Equal,
    });
    assert_eq!(names, sorted_a);
    assert!(mine.iter().all(|r| r.key_id == "old"));
    assert_eq!(
        mine[0].ciphertext,
        sealed("old", 9).bytes,
        "the whole envelope"
    );

    // Across tenants: every record once, whatever the page size.
    for limit in [1, 2, 3, 100] {
        let mut got = refs(&all_secrets(s, None, "new", limit).await);
        got.sort();
        let mut want = expected_all.clone();
        want.sort();
        assert_eq!(got, want, "limit {limit}");
    }
    assert!(all_secrets(s, Some(b), "old", 10).await.len() == 1);

    // Checkpoints, by (run, id).
    let (run1, run2) = (new_run(s, a).await, new_run(s, b).await);
    let mut want = Vec::new();
    for (t, run, key) in [
        (a, run1, "old"),
        (a, run1, "new"),
        (a, run1, "old"),
        (b, run2, "old"),
    ] {
        let at = save(s, t, run, key, 1).await;
        if key == "old" {
            want.push(at);
        }
    }
    for limit in [1, 2, 10] {
        let got = all_checkpoints(s, None, "new", limit).await;
        let mut got = refs(&got);
        got.sort();
        let mut sorted = want.clone();
        sorted.sort();
        assert_eq!(got, sorted, "limit {limit}");
    }
    let only_a = refs(&all_checkpoints(s, Some(a), "new", 1).await);
    assert_eq!(only_a.len(), 2);
    assert!(only_a.iter().all(|r| r.tenant() == a));
    let key_order: Vec<(RunId, CheckpointId)> = only_a
        .iter()
        .filter_map(|r| match r {
            SealedRef::Checkpoint { run, id, .. } => Some((*run, *id)),
            SealedRef::Secret { .. } => None,
        })
        .collect();
    let mut sorted = key_order.clone();
    sorted.sort();
    assert_eq!(key_order, sorted, "pages follow the key order");
}

pub async fn a_swap_writes_only_the_rows_that_still_hold_what_was_read<S: Store + SealedStore>(
    s: &S,
) {
    let (a, b) = (tenant(s).await, tenant(s).await);
    let run = new_run(s, a).await;
    put(s, a, "kept", "old", 1).await;
    put(s, a, "rewritten", "old", 2).await;
    put(s, a, "deleted", "old", 3).await;
    put(s, b, "kept", "old", 4).await;
    save(s, a, run, "old", 5).await;
    let before_meta = s.get_secret(a, "kept").await.expect("get").expect("secret");
    let read = [
        all_secrets(s, Some(a), "new", 10).await,
        all_checkpoints(s, Some(a), "new", 10).await,
    ]
    .concat();
    assert_eq!(read.len(), 4);

    // Between read and write: a client puts `rewritten` again, another deletes `deleted`.
    let later = sealed("old", 42);
    s.put_secret(a, "rewritten", &later, now(), &audited())
        .await
        .expect("put");
    assert!(
        s.delete_secret(a, "deleted", &audited())
            .await
            .expect("delete")
    );

    let swaps: Vec<SealedSwap> = read
        .iter()
        .map(|r| SealedSwap {
            read: r.clone(),
            sealed: sealed("new", 99),
        })
        .collect();
    let written = s.swap_sealed(&swaps).await.expect("swap");
    let by_name: Vec<(String, bool)> = read
        .iter()
        .zip(&written)
        .map(|(r, w)| (r.at.to_string(), *w))
        .collect();
    for (name, w) in &by_name {
        let expect = !(name == "secret rewritten" || name == "secret deleted");
        assert_eq!(*w, expect, "{name}: {by_name:?}");
    }

    let kept = s.get_secret(a, "kept").await.expect("get").expect("secret");
    assert_eq!(kept.meta.key_id, "new");
    assert_eq!(kept.ciphertext, sealed("new", 99).bytes);
    assert_eq!(
        kept.meta.updated_at, before_meta.meta.updated_at,
        "a reseal does not change the value, nor when it was written"
    );
    let rewritten = s
        .get_secret(a, "rewritten")
        .await
        .expect("get")
        .expect("secret");
    assert_eq!(rewritten.ciphertext, later.bytes, "the later put stays");
    assert!(s.get_secret(a, "deleted").await.expect("get").is_none());
    let theirs = s.get_secret(b, "kept").await.expect("get").expect("secret");
    assert_eq!(
        (theirs.meta.key_id.as_str(), theirs.ciphertext),
        ("old", sealed("old", 4).bytes)
    );
    let checkpoint = s.latest_checkpoints(a, run, 1).await.expect("latest");
    assert_eq!(checkpoint[0].meta.key_id, "new");
    assert_eq!(checkpoint[0].ciphertext, sealed("new", 99).bytes);
    assert_eq!(checkpoint[0].meta.sha256, "ab".repeat(32));

    // Swapping the same read again finds nothing as it was: no row is written twice.
    let again = s.swap_sealed(&swaps).await.expect("swap");
    assert!(again.iter().all(|w| !w), "{again:?}");
    assert_eq!(
        s.key_usage(Some(a)).await.expect("usage"),
        vec![usage("new", 1, 1), usage("old", 1, 0)]
    );
}
