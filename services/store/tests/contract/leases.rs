//! Leases: claiming, adoption after expiry, one-statement renewal, fencing, release.

use crate::support::*;
use baton_core::StoreError;
use baton_core::model::RunSummary;
use baton_core::ports::{Fence, Release};
use baton_events::{LeaseReason, RunId, TenantId, TurnStarted};
use std::collections::HashSet;
use std::time::Duration;

const TTL: Duration = Duration::from_secs(10);

/// A run with a turn requested (it needs driving) at version 3.
async fn busy_run<S: Store>(s: &S, tenant: TenantId) -> RunId {
    let run = RunId::new();
    let events = vec![
        created(tenant),
        message(tenant, baton_events::MessageRole::User, "hi"),
        turn_requested(tenant, 1),
    ];
    append_ok(s, tenant, request(run, 0, events)).await;
    run
}

fn fenced(
    run: RunId,
    expected: i64,
    tenant: TenantId,
    fence: Fence,
) -> baton_core::ports::AppendRequest {
    let mut req = request(
        run,
        expected,
        vec![event(
            tenant,
            baton_events::RunEvent::TurnStarted(TurnStarted { turn: 1 }),
        )],
    );
    req.fence = Some(fence);
    req
}

/// A busy run of a new tenant, whose lease "a/1" claimed at the returned time; the
/// fence it holds.
async fn claimed_by_a<S: Store>(s: &S) -> (TenantId, RunId, chrono::DateTime<chrono::Utc>, Fence) {
    let tenant = tenant(s).await;
    let run = busy_run(s, tenant).await;
    let t0 = now();
    let epoch = claim_one(s, "a/1", tenant, run, t0).await.expect("claim");
    let fence = Fence {
        owner: "a/1".into(),
        epoch,
    };
    (tenant, run, t0, fence)
}

/// A busy run whose lease "a/1" claimed at the returned time and then gave up, with
/// `release`, in an append of `turn.started`; returns the fence it held.
async fn claimed_then_released<S: Store>(
    s: &S,
    release: Release,
) -> (TenantId, RunId, chrono::DateTime<chrono::Utc>, Fence) {
    let (tenant, run, t0, fence) = claimed_by_a(s).await;
    let mut req = fenced(run, 3, tenant, fence.clone());
    req.release = Some(release);
    append_ok(s, tenant, req).await;
    (tenant, run, t0, fence)
}

async fn claim_one<S: Store>(
    s: &S,
    owner: &str,
    tenant: TenantId,
    run: RunId,
    at: chrono::DateTime<chrono::Utc>,
) -> Option<i64> {
    s.claim_runs(owner, TTL, at, 10, Some((tenant, run)))
        .await
        .expect("claim")
        .first()
        .map(|c| c.epoch)
}

pub async fn only_runs_with_work_are_claimed_and_a_live_lease_is_not_taken<S: Store>(s: &S) {
    let tenant = tenant(s).await;
    let idle = new_run(s, tenant).await;
    let busy = busy_run(s, tenant).await;
    let t0 = now();
    let claimed = s
        .claim_runs("a/1", TTL, t0, 100, None)
        .await
        .expect("claim");
    let runs: Vec<RunId> = claimed.iter().map(|c| c.run).collect();
    assert!(runs.contains(&busy), "a queued run is claimed");
    assert!(!runs.contains(&idle), "an idle run holds no lease");
    let mine = claimed.iter().find(|c| c.run == busy).expect("claimed");
    assert_eq!(
        (mine.epoch, mine.reason, mine.tenant),
        (1, LeaseReason::New, tenant)
    );
    assert_eq!(
        claim_one(s, "b/2", tenant, busy, t0).await,
        None,
        "a live lease is not taken"
    );
    assert_eq!(
        claim_one(s, "a/1", tenant, busy, t0).await,
        None,
        "not even by its holder"
    );
}

pub async fn an_expired_lease_is_adopted_with_a_higher_epoch<S: Store>(s: &S) {
    let tenant = tenant(s).await;
    let run = busy_run(s, tenant).await;
    let t0 = now();
    assert_eq!(claim_one(s, "a/1", tenant, run, t0).await, Some(1));
    let later = t0 + chrono::Duration::seconds(11);
    let adopted = s
        .claim_runs("b/2", TTL, later, 10, Some((tenant, run)))
        .await
        .expect("claim");
    assert_eq!(adopted.len(), 1);
    assert_eq!(
        (adopted[0].epoch, adopted[0].reason),
        (2, LeaseReason::Adopted)
    );
}

pub async fn expired_leases_are_adopted_at_once_by_the_next_claim<S: Store>(s: &S) {
    let tenant = tenant(s).await;
    let (held, free) = (busy_run(s, tenant).await, busy_run(s, tenant).await);
    let t0 = now();
    assert_eq!(claim_one(s, "gone/1", tenant, held, t0).await, Some(1));
    // Its holder is gone, its lease still runs: nobody may take it yet.
    assert_eq!(claim_one(s, "b/2", tenant, held, t0).await, None);
    let ended = s.expire_leases(t0).await.expect("expire");
    assert!(ended >= 1, "the live lease was ended");
    assert_eq!(
        claim_one(s, "b/2", tenant, held, t0).await,
        Some(2),
        "adopted at once, under a higher epoch"
    );
    // A run without a lease is claimed as ever.
    assert_eq!(claim_one(s, "b/2", tenant, free, t0).await, Some(1));
}

pub async fn renewal_returns_exactly_the_leases_still_held<S: Store>(s: &S) {
    let tenant = tenant(s).await;
    let (r1, r2) = (busy_run(s, tenant).await, busy_run(s, tenant).await);
    let owner = format!("a/{}", uuid::Uuid::new_v4());
    let t0 = now();
    claim_one(s, &owner, tenant, r1, t0).await.expect("r1");
    claim_one(s, &owner, tenant, r2, t0).await.expect("r2");
    let held: HashSet<(TenantId, RunId, i64)> = s
        .renew_leases(&owner, TTL, t0)
        .await
        .expect("renew")
        .into_iter()
        .map(|h| (h.tenant, h.run, h.epoch))
        .collect();
    assert_eq!(held, HashSet::from([(tenant, r1, 1), (tenant, r2, 1)]));
    // r2 expires (its owner stalled) and is adopted; renewal no longer returns it.
    let later = t0 + chrono::Duration::seconds(11);
    claim_one(s, "b/2", tenant, r2, later)
        .await
        .expect("adopted");
    let held = s.renew_leases(&owner, TTL, later).await.expect("renew");
    assert_eq!(held.iter().map(|h| h.run).collect::<Vec<_>>(), vec![r1]);
    assert!(
        s.renew_leases("nobody/0", TTL, later)
            .await
            .expect("renew")
            .is_empty()
    );
}

pub async fn an_append_under_a_stale_lease_is_fenced_and_writes_nothing<S: Store>(s: &S) {
    let tenant = tenant(s).await;
    let run = busy_run(s, tenant).await;
    let t0 = now();
    let old = claim_one(s, "a/1", tenant, run, t0).await.expect("claim");
    let new = claim_one(s, "b/2", tenant, run, t0 + chrono::Duration::seconds(11))
        .await
        .expect("adopt");
    let stale = Fence {
        owner: "a/1".into(),
        epoch: old,
    };
    match s.append(tenant, fenced(run, 3, tenant, stale)).await {
        Err(StoreError::Fenced) => {}
        other => panic!("expected Fenced, got {other:?}"),
    }
    assert_eq!(
        versions(&all_events(s, tenant, run).await),
        vec![1, 2, 3],
        "nothing written"
    );
    let current = Fence {
        owner: "b/2".into(),
        epoch: new,
    };
    append_ok(s, tenant, fenced(run, 3, tenant, current)).await;
    let wrong_owner = Fence {
        owner: "a/1".into(),
        epoch: new,
    };
    assert!(matches!(
        s.append(tenant, fenced(run, 4, tenant, wrong_owner)).await,
        Err(StoreError::Fenced)
    ));
}

pub async fn an_append_can_release_its_lease_in_the_same_transaction<S: Store>(s: &S) {
    let (tenant, run, t0, fence) = claimed_then_released(s, Release::Idle).await;
    let epoch = fence.epoch;
    assert!(
        s.renew_leases("a/1", TTL, t0)
            .await
            .expect("renew")
            .is_empty(),
        "released"
    );
    // Still running (turn.started), so anyone may claim it at once, without waiting.
    assert_eq!(claim_one(s, "b/2", tenant, run, t0).await, Some(epoch + 1));
    let stale = fenced(run, 4, tenant, fence);
    assert!(matches!(
        s.append(tenant, stale).await,
        Err(StoreError::Fenced)
    ));
    let run_row = s.get_run(tenant, run).await.expect("get").expect("run");
    assert_eq!(run_row.version, 4);
}

pub async fn concurrent_claimers_never_claim_one_run_twice<S: Store>(s: &S) {
    let tenant = tenant(s).await;
    let mut runs = HashSet::new();
    for _ in 0..20 {
        runs.insert(busy_run(s, tenant).await);
    }
    let t0 = now();
    let mut tasks = Vec::new();
    for i in 0..8 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            s.claim_runs(&format!("r{i}/x"), TTL, t0, 5, None)
                .await
                .expect("claim")
        }));
    }
    let mut seen = Vec::new();
    for t in tasks {
        seen.extend(
            t.await
                .expect("task")
                .into_iter()
                .map(|c| c.run)
                .filter(|r| runs.contains(r)),
        );
    }
    let unique: HashSet<RunId> = seen.iter().copied().collect();
    assert_eq!(
        unique.len(),
        seen.len(),
        "a run was claimed twice: {seen:?}"
    );
    assert_eq!(unique, runs, "8 claimers of 5 cover all 20 runs");
}

pub async fn release_needs_the_current_epoch<S: Store>(s: &S) {
    let tenant = tenant(s).await;
    let run = busy_run(s, tenant).await;
    let t0 = now();
    let epoch = claim_one(s, "a/1", tenant, run, t0).await.expect("claim");
    let stale = Fence {
        owner: "a/1".into(),
        epoch: epoch - 1,
    };
    assert!(!s.release_lease(tenant, run, &stale).await.expect("release"));
    let other_tenant = TenantId::new();
    let fence = Fence {
        owner: "a/1".into(),
        epoch,
    };
    assert!(
        !s.release_lease(other_tenant, run, &fence)
            .await
            .expect("release")
    );
    assert!(s.release_lease(tenant, run, &fence).await.expect("release"));
    assert_eq!(
        claim_one(s, "b/2", tenant, run, t0).await,
        Some(epoch + 1),
        "free at once"
    );
}

pub async fn a_handed_off_lease_is_claimed_at_once_as_a_hand_off_and_fences_its_owner<S: Store>(
    s: &S,
) {
    let (tenant, run, t0, fence) = claimed_then_released(s, Release::HandOff).await;
    let epoch = fence.epoch;
    assert!(
        s.renew_leases("a/1", TTL, t0)
            .await
            .expect("renew")
            .is_empty(),
        "a handed-off lease is not renewed back to life"
    );
    assert!(
        matches!(
            s.append(tenant, fenced(run, 4, tenant, fence)).await,
            Err(StoreError::Fenced)
        ),
        "its owner may not write after handing off"
    );
    let claimed = s
        .claim_runs("b/2", TTL, t0, 10, Some((tenant, run)))
        .await
        .expect("claim");
    assert_eq!(claimed.len(), 1, "claimable at once, long before the TTL");
    assert_eq!(
        (claimed[0].epoch, claimed[0].reason),
        (epoch + 1, LeaseReason::Handoff)
    );
}

/// The append against a base (the run the caller decided on) has no locked read: its
/// `UPDATE` checks what the read did, and a refusal is told apart as the read told it.
pub async fn an_append_against_a_base_checks_the_version_and_the_fence_as_a_locked_one_does<
    S: Store,
>(
    s: &S,
) {
    let (tenant, run, t0, fence) = claimed_by_a(s).await;
    let at_3 = s.get_run(tenant, run).await.expect("get").expect("run");
    let with_base = |expected: i64, fence: &Fence, base: &RunSummary| {
        let mut req = fenced(run, expected, tenant, fence.clone());
        req.base = Some(Box::new(base.clone()));
        req
    };

    // Written as a locked append writes it: the run read back is the run returned.
    let (at_4, _) = append_ok(s, tenant, with_base(3, &fence, &at_3)).await;
    assert_eq!(at_4.version, 4);
    let read = s.get_run(tenant, run).await.expect("get").expect("run");
    assert_eq!(
        serde_json::to_value(&read).expect("json"),
        serde_json::to_value(&at_4).expect("json"),
        "the stored run is the one the append returned"
    );

    // A base the version has moved past: Conflict, nothing written.
    match s.append(tenant, with_base(3, &fence, &at_3)).await {
        Err(StoreError::Conflict {
            expected: 3,
            actual: 4,
        }) => {}
        other => panic!("expected Conflict 3 -> 4, got {other:?}"),
    }
    // A base that is not the run at the expected version is refused before anything.
    assert!(matches!(
        s.append(tenant, with_base(4, &fence, &at_3)).await,
        Err(StoreError::Other(_))
    ));
    // A run that is not there: NotFound.
    let mut elsewhere = at_4.clone();
    elsewhere.id = RunId::new();
    let mut req = fenced(elsewhere.id, 4, tenant, fence.clone());
    req.base = Some(Box::new(elsewhere));
    assert!(matches!(
        s.append(tenant, req).await,
        Err(StoreError::NotFound)
    ));
    assert_eq!(
        versions(&all_events(s, tenant, run).await),
        vec![1, 2, 3, 4]
    );

    // The lease taken over: the old owner is Fenced; the new one writes and hands off,
    // after which it is Fenced too.
    let new = claim_one(s, "b/2", tenant, run, t0 + chrono::Duration::seconds(11))
        .await
        .expect("adopt");
    assert!(matches!(
        s.append(tenant, with_base(4, &fence, &at_4)).await,
        Err(StoreError::Fenced)
    ));
    let current = Fence {
        owner: "b/2".into(),
        epoch: new,
    };
    let mut handing_off = with_base(4, &current, &at_4);
    handing_off.release = Some(Release::HandOff);
    let (at_5, _) = append_ok(s, tenant, handing_off).await;
    assert!(matches!(
        s.append(tenant, with_base(5, &current, &at_5)).await,
        Err(StoreError::Fenced)
    ));
    assert_eq!(
        versions(&all_events(s, tenant, run).await),
        vec![1, 2, 3, 4, 5]
    );
    // A client command (no fence) against a base.
    let mut client = request(
        run,
        5,
        vec![message(tenant, baton_events::MessageRole::User, "more")],
    );
    client.base = Some(Box::new(at_5));
    let (at_6, _) = append_ok(s, tenant, client).await;
    assert_eq!(at_6.version, 6);
}
