//! `RetentionStore`: which ended runs are past their policy (the agent's own days, else
//! the tenant's), deleting one once and counting it, pruning idempotency records past a
//! time a batch at a time, and a job's lease held by one claimer at a time.

use crate::support::{
    Store, agent, append_ok, audited, created, event, message, now, record, request, tenant,
    turn_requested,
};
use baton_core::StoreError;
use baton_core::model::{AuditAction, AuditEntry, ExpiredRun};
use baton_events::{AgentId, MessageRole, RunCompleted, RunCreated, RunEvent, RunId, TenantId};
use chrono::{DateTime, TimeDelta, Utc};
use serde_json::json;
use std::time::Duration;

fn days_ago(d: i64) -> DateTime<Utc> {
    now() - TimeDelta::days(d)
}

/// An agent of `t` keeping its runs `days` (or the tenant's default).
async fn agent_keeping<S: Store>(s: &S, t: TenantId, days: Option<u32>) -> AgentId {
    let mut a = agent(t, &format!("keeps-{days:?}-{}", uuid::Uuid::new_v4()));
    a.limits.retention_days = days;
    s.create_agent(t, &a, &audited()).await.expect("agent");
    a.id
}

/// A run of `agent` whose last change was `at`: ended there when `ended`, else still in
/// its first turn. Returns the run and its version.
async fn run_at<S: Store>(
    s: &S,
    t: TenantId,
    agent: AgentId,
    at: DateTime<Utc>,
    ended: bool,
) -> ExpiredRun {
    let run = RunId::new();
    let first = event(
        t,
        RunEvent::RunCreated(RunCreated {
            agent_id: agent,
            agent_version: 1,
            title: None,
            metadata: Default::default(),
            tool_versions: Default::default(),
            parent: None,
        }),
    );
    let mut events = vec![
        first,
        message(t, MessageRole::User, "go"),
        turn_requested(t, 1),
    ];
    if ended {
        events.push(event(t, RunEvent::RunCompleted(RunCompleted {})));
    }
    let mut req = request(run, 0, events);
    req.at = at;
    let (summary, _) = append_ok(s, t, req).await;
    ExpiredRun {
        tenant: t,
        run,
        version: summary.version,
    }
}

async fn set_default<S: Store>(s: &S, t: TenantId, days: Option<u32>) {
    let audit = AuditEntry {
        action: AuditAction::RetentionSet,
        ..audited()
    };
    s.put_retention(t, days, now(), &audit)
        .await
        .expect("policy");
}

fn by_retention(run: &ExpiredRun) -> AuditEntry {
    AuditEntry::retention(
        now(),
        AuditAction::RunDeleted,
        run.run.to_string(),
        json!({}),
    )
}

pub async fn ended_runs_past_the_agents_days_else_the_tenants_are_expired<S: Store>(s: &S) {
    let t1 = tenant(s).await;
    set_default(s, t1, Some(30)).await;
    let short = agent_keeping(s, t1, Some(5)).await;
    let plain = agent_keeping(s, t1, None).await;
    let a1 = run_at(s, t1, short, days_ago(10), true).await;
    let _a2 = run_at(s, t1, short, days_ago(2), true).await;
    let b1 = run_at(s, t1, plain, days_ago(40), true).await;
    let _b2 = run_at(s, t1, plain, days_ago(10), true).await;
    let _b3 = run_at(s, t1, plain, days_ago(100), false).await;
    // Another tenant with no default: only its agent with days of its own expires runs.
    let t2 = tenant(s).await;
    let forever = agent_keeping(s, t2, None).await;
    let daily = agent_keeping(s, t2, Some(1)).await;
    let _kept = run_at(s, t2, forever, days_ago(1000), true).await;
    let c1 = run_at(s, t2, daily, days_ago(2), true).await;
    // A tenant that turned its default off keeps everything.
    let t3 = tenant(s).await;
    set_default(s, t3, Some(1)).await;
    set_default(s, t3, None).await;
    let off = agent_keeping(s, t3, None).await;
    let _old = run_at(s, t3, off, days_ago(500), true).await;

    let all = s.expired_runs(None, now(), 100).await.expect("expired");
    assert_eq!(all, vec![b1, a1, c1], "oldest first, every tenant");
    let mine = s.expired_runs(Some(t1), now(), 100).await.expect("expired");
    assert_eq!(mine, vec![b1, a1]);
    let first = s.expired_runs(Some(t1), now(), 1).await.expect("expired");
    assert_eq!(first, vec![b1], "bounded by the limit");
    let theirs = s.expired_runs(Some(t2), now(), 100).await.expect("expired");
    assert_eq!(theirs, vec![c1]);
    assert!(
        s.expired_runs(Some(t3), now(), 100)
            .await
            .expect("expired")
            .is_empty()
    );
    let policy = s.get_retention(t3).await.expect("get").expect("set once");
    assert_eq!(policy.run_days, None);
}

pub async fn an_expired_run_is_deleted_once_and_counted_in_its_tenants_progress<S: Store>(s: &S) {
    let t = tenant(s).await;
    set_default(s, t, Some(7)).await;
    let plain = agent_keeping(s, t, None).await;
    let doomed = run_at(s, t, plain, days_ago(8), true).await;
    let before = s.get_retention(t).await.expect("get").expect("policy");
    assert_eq!((before.deleted_runs, before.last_deleted_at), (0, None));

    let stale = ExpiredRun {
        version: doomed.version - 1,
        ..doomed
    };
    let refused = s.delete_expired_run(&stale, &by_retention(&stale)).await;
    assert!(
        matches!(refused, Err(StoreError::Conflict { .. })),
        "{refused:?}"
    );
    s.delete_expired_run(&doomed, &by_retention(&doomed))
        .await
        .expect("delete");
    let rows = s.rows_of_run(t, doomed.run).await;
    assert!(rows.iter().all(|(_, n)| *n == 0), "rows left: {rows:?}");
    let again = s.delete_expired_run(&doomed, &by_retention(&doomed)).await;
    assert!(matches!(again, Err(StoreError::NotFound)), "{again:?}");

    let after = s.get_retention(t).await.expect("get").expect("policy");
    assert_eq!(after.deleted_runs, 1, "counted once");
    assert!(after.last_deleted_at.is_some());
    assert_eq!(after.run_days, Some(7));
    let entries = s
        .list_audit(
            t,
            &baton_core::ports::AuditQuery {
                before: None,
                action: Some(AuditAction::RunDeleted),
                limit: 10,
            },
        )
        .await
        .expect("audit");
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].actor, "retention");
    assert_eq!(entries[0].target, doomed.run.to_string());

    // A tenant whose agent alone keeps runs for a while, with no default of its own.
    let t2 = tenant(s).await;
    let daily = agent_keeping(s, t2, Some(1)).await;
    let theirs = run_at(s, t2, daily, days_ago(2), true).await;
    assert_eq!(s.get_retention(t2).await.expect("get"), None);
    s.delete_expired_run(&theirs, &by_retention(&theirs))
        .await
        .expect("delete");
    let counted = s.get_retention(t2).await.expect("get").expect("a row now");
    assert_eq!(
        (counted.deleted_runs, counted.run_days, counted.updated_at),
        (1, None, None),
        "counted, and no policy set"
    );
}

pub async fn idempotency_records_past_their_window_are_pruned_a_batch_at_a_time<S: Store>(s: &S) {
    let t = tenant(s).await;
    let at = [days_ago(9), days_ago(8), days_ago(8), now()];
    for (i, when) in at.iter().enumerate() {
        let mut req = request(RunId::new(), 0, vec![created(t)]);
        req.at = *when;
        req.idempotency = Some(record(&format!("req-{i}"), json!({"i": i})));
        append_ok(s, t, req).await;
    }
    let week_ago = days_ago(7);
    assert_eq!(s.prune_idempotency(week_ago, 2).await.expect("prune"), 2);
    assert_eq!(s.prune_idempotency(week_ago, 2).await.expect("prune"), 1);
    assert_eq!(s.prune_idempotency(week_ago, 2).await.expect("prune"), 0);
    for i in 0..3 {
        let gone = s.find_idempotency(t, &format!("req-{i}")).await;
        assert!(gone.expect("find").is_none(), "req-{i} pruned");
    }
    assert!(
        s.find_idempotency(t, "req-3")
            .await
            .expect("find")
            .is_some()
    );
}

pub async fn a_job_is_held_by_one_claimer_until_it_finishes_or_its_lease_expires<S: Store>(s: &S) {
    let ttl = Duration::from_secs(60);
    let t0 = now();
    // Claimers racing: exactly one wins.
    let claims = futures::future::join_all((0..8).map(|i| {
        let s = s.clone();
        async move {
            s.claim_job("retention", &format!("replica-{i}"), t0, ttl)
                .await
                .expect("claim")
        }
    }))
    .await;
    let won: Vec<_> = claims.into_iter().flatten().collect();
    assert_eq!(won.len(), 1, "one holder: {won:?}");
    let first = won[0].clone();

    // Finished, the next round is due in a minute: nobody takes it before.
    let next = t0 + TimeDelta::seconds(60);
    let report = json!({"deleted_runs": 3});
    assert!(
        s.finish_job(&first, &report, t0, next)
            .await
            .expect("finish")
    );
    let early = s
        .claim_job("retention", "replica-x", t0 + TimeDelta::seconds(59), ttl)
        .await
        .expect("claim");
    assert_eq!(early, None);
    let status = s
        .job_status("retention")
        .await
        .expect("status")
        .expect("row");
    assert_eq!(status.rounds, 1);
    assert_eq!(status.owner, None);
    assert_eq!(status.last_round, Some(report));
    assert_eq!(status.next_round_ms, next.timestamp_millis());

    // Due: claimed; a holder that outlives its lease is fenced out by the next claim.
    let second = s
        .claim_job("retention", "replica-x", next, ttl)
        .await
        .expect("claim")
        .expect("due");
    assert!(second.epoch > first.epoch);
    let live = s
        .claim_job("retention", "replica-y", next + TimeDelta::seconds(30), ttl)
        .await
        .expect("claim");
    assert_eq!(live, None, "a live lease is not taken");
    let third = s
        .claim_job("retention", "replica-y", next + TimeDelta::seconds(61), ttl)
        .await
        .expect("claim")
        .expect("expired lease taken");
    assert!(third.epoch > second.epoch);
    assert!(
        !s.finish_job(&second, &json!({}), next, next)
            .await
            .expect("finish"),
        "the stale holder's report is refused"
    );
    assert!(
        s.finish_job(&third, &json!({}), next, next)
            .await
            .expect("finish")
    );
    assert_eq!(
        s.job_status("retention")
            .await
            .expect("status")
            .map(|j| j.rounds),
        Some(2)
    );
    assert_eq!(s.job_status("no-such-job").await.expect("status"), None);
}

pub async fn a_run_under_a_live_lease_waits_and_one_whose_lease_lapsed_goes<S: Store>(s: &S) {
    let t = tenant(s).await;
    set_default(s, t, Some(7)).await;
    let plain = agent_keeping(s, t, None).await;
    let held = run_at(s, t, plain, days_ago(9), true).await;
    let lapsed = run_at(s, t, plain, days_ago(8), true).await;
    // A replica holding the one, and a dead one's lease left on the other.
    let live = s
        .raw_write(
            t,
            "UPDATE runs SET lease_owner = 'alive', lease_expires_ms = 9000000000000 \
             WHERE tenant_id = $1 AND id = $2",
            held.run.as_uuid(),
        )
        .await;
    let dead = s
        .raw_write(
            t,
            "UPDATE runs SET lease_owner = 'gone', lease_expires_ms = 1 \
             WHERE tenant_id = $1 AND id = $2",
            lapsed.run.as_uuid(),
        )
        .await;
    assert_eq!((live, dead), (1, 1));
    let due = s.expired_runs(None, now(), 10).await.expect("expired");
    assert_eq!(due, vec![lapsed], "the live lease's run is not due yet");
    s.delete_expired_run(&lapsed, &by_retention(&lapsed))
        .await
        .expect("a lapsed lease holds nothing");
    let refused = s.delete_expired_run(&held, &by_retention(&held)).await;
    assert!(
        matches!(refused, Err(StoreError::Conflict { .. })),
        "{refused:?}"
    );
}
