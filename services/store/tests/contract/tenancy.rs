//! Contract: tenant isolation, run listing, and the engine's work list.

use crate::support::*;
use baton_core::StoreError;
use baton_core::model::RunStatus;
use baton_core::ports::{RunFilter, RunListQuery};
use baton_events::{
    MessageRole, RunCancelRequested, RunCancelled, RunCompleted, RunEvent, RunId, TenantId,
    TurnStarted,
};
use serde_json::json;

pub async fn another_tenants_data_is_invisible<S: Store>(s: &S) {
    let (owner, other) = (tenant(s).await, tenant(s).await);
    let run = RunId::new();
    let mut req = request(
        run,
        0,
        vec![created(owner), message(owner, MessageRole::User, "secret")],
    );
    req.idempotency = Some(record("req-owner", json!(1)));
    append_ok(s, owner, req).await;
    let agent = agent(owner, "private");
    s.create_agent(owner, &agent, &audited())
        .await
        .expect("agent");

    assert_eq!(s.get_run(other, run).await.expect("get"), None);
    assert!(
        s.read_stream(other, run, 0, 100)
            .await
            .expect("read")
            .is_empty()
    );
    assert!(
        s.list_messages(other, run, 0, 100)
            .await
            .expect("msgs")
            .is_empty()
    );
    let all = RunListQuery {
        limit: 100,
        ..Default::default()
    };
    assert!(s.list_runs(other, &all).await.expect("list").is_empty());
    assert_eq!(
        s.find_idempotency(other, "req-owner").await.expect("find"),
        None
    );
    assert_eq!(s.get_agent(other, agent.id).await.expect("agent"), None);
    assert!(
        s.list_agents(other, false, None, 100)
            .await
            .expect("agents")
            .is_empty()
    );

    let foreign = s
        .append(
            other,
            request(run, 2, vec![message(other, MessageRole::User, "x")]),
        )
        .await;
    assert!(matches!(foreign, Err(StoreError::NotFound)), "{foreign:?}");
    // Events must name the tenant they are appended for.
    let mislabelled = s
        .append(
            owner,
            request(run, 2, vec![message(other, MessageRole::User, "x")]),
        )
        .await;
    assert!(matches!(mislabelled, Err(StoreError::Other(_))));
    assert_eq!(versions(&all_events(s, owner, run).await), vec![1, 2]);
    assert_eq!(
        s.list_messages(owner, run, 0, 100)
            .await
            .expect("msgs")
            .len(),
        1
    );
}

pub async fn list_runs_filters_by_status_and_pages_with_a_cursor<S: Store>(s: &S) {
    let t = tenant(s).await;
    let mut ids = Vec::new();
    for i in 0..5 {
        let run = new_run(s, t).await;
        if i % 2 == 0 {
            let events = vec![message(t, MessageRole::User, "go"), turn_requested(t, 1)];
            append_ok(s, t, request(run, 1, events)).await;
        }
        ids.push(run);
    }
    let _noise = new_run(s, tenant(s).await).await;
    let newest_first: Vec<RunId> = ids.iter().rev().copied().collect();

    let mut pages = Vec::new();
    let mut before = None;
    loop {
        let q = RunListQuery {
            filter: RunFilter::default(),
            before,
            limit: 2,
        };
        let page = s.list_runs(t, &q).await.expect("list");
        if page.is_empty() {
            break;
        }
        assert!(page.len() <= 2);
        before = page.last().map(|r| r.id);
        pages.extend(page.into_iter().map(|r| r.id));
    }
    assert_eq!(pages, newest_first);

    let queued = RunListQuery {
        filter: RunFilter {
            status: Some(RunStatus::Queued),
            ..RunFilter::default()
        },
        before: None,
        limit: 100,
    };
    let found: Vec<RunId> = s
        .list_runs(t, &queued)
        .await
        .expect("list")
        .iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(found, vec![ids[4], ids[2], ids[0]]);
    let page = RunListQuery {
        before: Some(ids[4]),
        limit: 1,
        ..queued
    };
    let next: Vec<RunId> = s
        .list_runs(t, &page)
        .await
        .expect("list")
        .iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(next, vec![ids[2]]);
    let waiting = RunListQuery {
        filter: RunFilter {
            status: Some(RunStatus::Waiting),
            ..RunFilter::default()
        },
        before: None,
        limit: 100,
    };
    assert_eq!(s.list_runs(t, &waiting).await.expect("list").len(), 2);
}

/// Runs with work (a turn in progress or a cancel pending), across tenants, oldest first,
/// are what lease claims pick up; idle and ended runs are never claimed.
pub async fn runs_with_work_are_claimed_across_tenants_oldest_first<S: Store>(s: &S) {
    let (a, b) = (tenant(s).await, tenant(s).await);
    let busy = |t: TenantId| vec![message(t, MessageRole::User, "go"), turn_requested(t, 1)];
    let idle = new_run(s, a).await;
    let queued_b = new_run(s, b).await;
    append_ok(s, b, request(queued_b, 1, busy(b))).await;
    let running_a = new_run(s, a).await;
    let mut events = busy(a);
    events.push(event(a, RunEvent::TurnStarted(TurnStarted { turn: 1 })));
    append_ok(s, a, request(running_a, 1, events)).await;
    let cancelling = new_run(s, b).await;
    let cancel = RunEvent::RunCancelRequested(RunCancelRequested { reason: None });
    append_ok(s, b, request(cancelling, 1, vec![event(b, cancel.clone())])).await;
    let cancelled = new_run(s, a).await;
    let events = vec![
        event(a, cancel),
        event(a, RunEvent::RunCancelled(RunCancelled { reason: None })),
    ];
    append_ok(s, a, request(cancelled, 1, events)).await;
    let completed = new_run(s, b).await;
    let mut events = busy(b);
    events.push(event(b, RunEvent::RunCompleted(RunCompleted {})));
    append_ok(s, b, request(completed, 1, events)).await;

    let expected = [(b, queued_b), (a, running_a), (b, cancelling)];
    let claim = |owner: &'static str, limit| async move {
        let ttl = std::time::Duration::from_secs(10);
        s.claim_runs(owner, ttl, now(), limit, None)
            .await
            .expect("claim")
            .into_iter()
            .map(|c| (c.tenant, c.run))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        claim("x/1", 2).await,
        expected[..2],
        "oldest first, bounded"
    );
    assert_eq!(
        claim("y/2", 100).await,
        expected[2..],
        "the rest, never a live lease"
    );
    let _ = idle;
}

pub async fn ping_answers<S: Store>(s: &S) {
    s.ping().await.expect("ping");
}
