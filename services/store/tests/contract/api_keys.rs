//! Contract: API keys keep their creator and last use, list newest first, revoke once, and
//! record a use at most once per interval, each within its own tenant.

use crate::support::*;
use baton_core::Role;
use baton_core::model::ApiKey;
use baton_core::model::ApiKeyRecord;
use baton_events::TenantId;
use chrono::{DateTime, Duration, SubsecRound, TimeZone, Utc};
use uuid::Uuid;

fn key(tenant: TenantId, name: &str, role: Role) -> ApiKey {
    ApiKey {
        id: Uuid::now_v7(),
        tenant,
        name: name.into(),
        prefix: "0123abcd".into(),
        role,
        created_at: now(),
        expires_at: None,
        revoked_at: None,
    }
}

/// A hash of its own for every key.
fn hash() -> Vec<u8> {
    Uuid::new_v4().as_bytes().repeat(2)
}

fn record(key: &ApiKey, created_by: Option<&str>) -> ApiKeyRecord {
    ApiKeyRecord {
        key: key.clone(),
        created_by: created_by.map(str::to_string),
        last_used_at: None,
    }
}

pub async fn api_keys_keep_their_creator_and_list_newest_first<S: Store>(s: &S) {
    let t = tenant(s).await;
    let bootstrap = key(t, "owner key", Role::Owner);
    let bootstrap_hash = hash();
    s.create_api_key(&bootstrap, &bootstrap_hash, &audited())
        .await
        .expect("create");
    let creator = format!("key:{}", bootstrap.id);
    let mut made = vec![record(&bootstrap, None)];
    for (name, role) in [("ci", Role::Member), ("dashboard", Role::Viewer)] {
        let k = ApiKey {
            expires_at: Some(now() + Duration::days(7)),
            ..key(t, name, role)
        };
        s.create_api_key_by(&k, &hash(), &audited_by(&creator))
            .await
            .expect("create");
        made.push(record(&k, Some(&creator)));
    }

    assert_eq!(
        s.lookup_api_key(&bootstrap_hash).await.expect("lookup"),
        Some(made[0].clone())
    );
    assert_eq!(s.lookup_api_key(&hash()).await.expect("lookup"), None);
    for r in &made {
        let got = s.get_api_key(t, r.key.id).await.expect("get");
        assert_eq!(got.as_ref(), Some(r));
    }
    assert_eq!(s.get_api_key(t, Uuid::now_v7()).await.expect("get"), None);

    let first = s.list_api_keys(t, None, 2).await.expect("list");
    assert_eq!(first, vec![made[2].clone(), made[1].clone()]);
    let rest = s
        .list_api_keys(t, Some(made[1].key.id), 2)
        .await
        .expect("list");
    assert_eq!(rest, vec![made[0].clone()]);

    // A reused hash or id is a conflict; a key of no tenant is not found.
    let dup = s
        .create_api_key_by(
            &key(t, "twin", Role::Viewer),
            &bootstrap_hash,
            &audited_by(&creator),
        )
        .await;
    assert!(
        matches!(dup, Err(baton_core::StoreError::Conflict { .. })),
        "{dup:?}"
    );
    let orphan = key(TenantId::new(), "orphan", Role::Viewer);
    let unknown = s
        .create_api_key_by(&orphan, &hash(), &audited_by(&creator))
        .await;
    assert!(
        matches!(unknown, Err(baton_core::StoreError::NotFound)),
        "{unknown:?}"
    );
}

pub async fn another_tenants_api_keys_are_invisible_and_untouchable<S: Store>(s: &S) {
    let (mine, other) = (tenant(s).await, tenant(s).await);
    let k = key(mine, "ci", Role::Admin);
    s.create_api_key_by(&k, &hash(), &audited_by("local"))
        .await
        .expect("create");
    let at = now();

    assert_eq!(s.get_api_key(other, k.id).await.expect("get"), None);
    assert!(
        s.list_api_keys(other, None, 10)
            .await
            .expect("list")
            .is_empty()
    );
    assert!(
        !s.revoke_api_key(other, k.id, at, &audited())
            .await
            .expect("revoke")
    );
    let stale = at + Duration::seconds(1);
    assert!(
        !s.touch_api_key(other, k.id, at, stale)
            .await
            .expect("touch")
    );

    let stored = s.get_api_key(mine, k.id).await.expect("get");
    assert_eq!(stored, Some(record(&k, Some("local"))));
}

pub async fn a_key_is_revoked_once_and_keeps_its_first_revocation<S: Store>(s: &S) {
    let t = tenant(s).await;
    let (k, h) = (key(t, "ci", Role::Member), hash());
    let keep = key(t, "keep", Role::Member);
    s.create_api_key_by(&k, &h, &audited_by("local"))
        .await
        .expect("create");
    s.create_api_key_by(&keep, &hash(), &audited_by("local"))
        .await
        .expect("create");

    let first = now();
    assert!(
        s.revoke_api_key(t, k.id, first, &audited())
            .await
            .expect("revoke")
    );
    let later = first + Duration::minutes(5);
    assert!(
        !s.revoke_api_key(t, k.id, later, &audited())
            .await
            .expect("again")
    );
    assert!(
        !s.revoke_api_key(t, Uuid::now_v7(), later, &audited())
            .await
            .expect("unknown")
    );

    // Authentication sees it at once.
    let found = s
        .lookup_api_key(&h)
        .await
        .expect("find")
        .map(|r| r.key)
        .expect("stored");
    assert_eq!(found.revoked_at, Some(first));
    let listed = s.list_api_keys(t, None, 10).await.expect("list");
    assert_eq!(listed.len(), 2, "revoked keys stay listed");
    assert_eq!(listed[1].key.revoked_at, Some(first));
    assert_eq!(listed[0].key.revoked_at, None, "only that key");
}

/// The key's last recorded use, as authentication reads it.
async fn last_used<S: Store>(s: &S, hash: &[u8]) -> Option<DateTime<Utc>> {
    s.lookup_api_key(hash)
        .await
        .expect("lookup")
        .expect("stored")
        .last_used_at
}

pub async fn a_use_is_recorded_only_when_the_last_one_is_stale<S: Store>(s: &S) {
    let t = tenant(s).await;
    let (k, h) = (key(t, "ci", Role::Member), hash());
    s.create_api_key_by(&k, &h, &audited_by("local"))
        .await
        .expect("create");
    assert_eq!(last_used(s, &h).await, None);

    // A whole second, then times with 3 and 6 fraction digits: however a time is written,
    // "older than" compares as time.
    let t0 = Utc
        .with_ymd_and_hms(2030, 1, 2, 3, 4, 5)
        .single()
        .expect("time");
    let minute = Duration::seconds(60);
    assert!(
        s.touch_api_key(t, k.id, t0, t0 - minute)
            .await
            .expect("touch")
    );
    assert_eq!(last_used(s, &h).await, Some(t0));
    assert!(!s.touch_api_key(t, k.id, t0, t0).await.expect("fresh"));

    let t1 = t0 + Duration::microseconds(1);
    assert!(s.touch_api_key(t, k.id, t1, t1).await.expect("1 µs older"));
    assert_eq!(last_used(s, &h).await, Some(t1));
    let t2 = t1 + Duration::milliseconds(500);
    let t2 = t2.trunc_subsecs(3);
    assert!(!s.touch_api_key(t, k.id, t2, t1).await.expect("equal"));
    assert!(s.touch_api_key(t, k.id, t2, t2).await.expect("older"));
    assert_eq!(last_used(s, &h).await, Some(t2));
    let t3 = t2 + minute + Duration::seconds(1);
    let t3 = t3.trunc_subsecs(0);
    assert!(
        !s.touch_api_key(t, k.id, t3, t2 - minute)
            .await
            .expect("fresh")
    );
    assert!(
        s.touch_api_key(t, k.id, t3, t3 - minute)
            .await
            .expect("stale")
    );
    assert_eq!(last_used(s, &h).await, Some(t3));

    // Recording a use changes nothing else.
    let got = s.get_api_key(t, k.id).await.expect("get").expect("stored");
    assert_eq!(got.key, k);
}

pub async fn racing_replicas_record_one_use<S: Store>(s: &S) {
    let t = tenant(s).await;
    let k = key(t, "busy", Role::Viewer);
    s.create_api_key_by(&k, &hash(), &audited_by("local"))
        .await
        .expect("create");
    let at: DateTime<Utc> = now();
    let mut tasks = Vec::new();
    for i in 0..8i64 {
        let s = s.clone();
        let id = k.id;
        tasks.push(tokio::spawn(async move {
            let mine = at + Duration::microseconds(i);
            s.touch_api_key(t, id, mine, at - Duration::seconds(60))
                .await
                .expect("touch")
        }));
    }
    let mut wrote = 0;
    for task in tasks {
        if task.await.expect("task") {
            wrote += 1;
        }
    }
    assert_eq!(wrote, 1, "one write however many race");
}
