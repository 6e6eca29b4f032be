//! Contract: a schedule round-trips whole, changes only from the version it was read at
//! (of racing writers one wins), stays in its tenant, and is found due across tenants
//! when active and past its fire time or holding a pending fire.

use crate::support::*;
use baton_core::model::{
    AuditAction, AuditEntry, MissedFires, Overlap, PendingFire, Schedule, ScheduleSpec,
    ScheduleState,
};
use baton_core::ports::{AgentStore, AuditQuery, ScheduleStore};
use baton_events::{AgentId, ScheduleId, TenantId};
use chrono::{DateTime, TimeDelta, Utc};

pub fn schedule(tenant: TenantId, agent: AgentId, next: DateTime<Utc>) -> Schedule {
    let at = now();
    Schedule {
        id: ScheduleId::new(),
        tenant,
        spec: ScheduleSpec {
            name: "nightly report".into(),
            agent_id: agent,
            message: "report for {{fire_time}}".into(),
            title: Some("Report".into()),
            metadata: [("team".to_string(), "ops".to_string())].into(),
            cron: "0 2 * * *".into(),
            timezone: "Europe/Berlin".into(),
            starts_at: None,
            ends_at: Some(at + TimeDelta::days(30)),
            missed: MissedFires::RunOnce,
            overlap: Overlap::Skip,
        },
        state: ScheduleState::Active,
        paused_reason: None,
        next_fire_at: Some(next),
        upcoming: Vec::new(),
        pending: None,
        last_fire_at: None,
        last_run_id: None,
        fires: 0,
        skipped: 0,
        owner: "key:0190f5b8-0000-7000-8000-000000000001".into(),
        version: 1,
        created_at: at,
        updated_at: at,
    }
}

fn entry(action: AuditAction) -> AuditEntry {
    AuditEntry::operator(now(), action, "schedule", serde_json::json!({}))
}

async fn with_agent<S: Store + AgentStore>(s: &S) -> (TenantId, AgentId) {
    let t = tenant(s).await;
    let a = agent(t, "reporter");
    s.create_agent(t, &a, &audited()).await.expect("agent");
    (t, a.id)
}

fn ms(t: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(t.timestamp_millis()).expect("in range")
}

pub async fn a_schedule_round_trips_and_changes_only_from_the_version_read<
    S: Store + ScheduleStore,
>(
    s: &S,
) {
    let (t, agent) = with_agent(s).await;
    let next = ms(now() + TimeDelta::hours(1));
    let mut sched = schedule(t, agent, next);
    s.create_schedule(&sched, &entry(AuditAction::ScheduleCreated))
        .await
        .expect("create");
    let got = s
        .get_schedule(t, sched.id)
        .await
        .expect("get")
        .expect("there");
    assert_eq!(got, sched);

    // A fire claimed: pending, moved on, counted.
    let mut claimed = got.clone();
    claimed.version = 2;
    claimed.next_fire_at = Some(next + TimeDelta::days(1));
    claimed.skipped = 3;
    claimed.pending = Some(PendingFire {
        at: next,
        missed: 2,
        agent_id: agent,
        title: Some("Report".into()),
        message: "report for then".into(),
        metadata: [("schedule_id".to_string(), sched.id.to_string())].into(),
        request_id: format!("schedule:{}:then", sched.id),
    });
    assert!(
        s.update_schedule(&claimed, 1, None, None)
            .await
            .expect("claim")
    );
    // A racer that read version 1 too loses, and writes nothing.
    let mut racer = got.clone();
    racer.version = 2;
    racer.state = ScheduleState::Paused;
    assert!(
        !s.update_schedule(&racer, 1, Some(&entry(AuditAction::SchedulePaused)), None)
            .await
            .expect("race")
    );
    assert_eq!(
        s.get_schedule(t, sched.id).await.expect("get"),
        Some(claimed.clone())
    );
    let paused = s
        .list_audit(
            t,
            &AuditQuery {
                action: Some(AuditAction::SchedulePaused),
                limit: 10,
                ..AuditQuery::default()
            },
        )
        .await
        .expect("audit");
    assert!(paused.is_empty(), "a lost race leaves no audit entry");

    // Recorded: the pending fire cleared, the run remembered.
    let mut recorded = claimed.clone();
    recorded.version = 3;
    recorded.pending = None;
    recorded.fires = 1;
    recorded.last_fire_at = Some(next);
    recorded.last_run_id = Some(baton_events::RunId::new());
    assert!(
        s.update_schedule(&recorded, 2, None, None)
            .await
            .expect("record")
    );
    assert_eq!(
        s.get_schedule(t, sched.id).await.expect("get"),
        Some(recorded)
    );

    // Deleted once, audited once.
    sched.version = 3;
    assert!(
        s.delete_schedule(t, sched.id, &entry(AuditAction::ScheduleDeleted))
            .await
            .expect("delete")
    );
    assert!(
        !s.delete_schedule(t, sched.id, &entry(AuditAction::ScheduleDeleted))
            .await
            .expect("again")
    );
    assert_eq!(s.get_schedule(t, sched.id).await.expect("get"), None);
}

pub async fn schedules_stay_in_their_tenant_and_page_newest_first<S: Store + ScheduleStore>(s: &S) {
    let (a, agent_a) = with_agent(s).await;
    let (b, agent_b) = with_agent(s).await;
    let other_agent = agent(a, "other");
    s.create_agent(a, &other_agent, &audited())
        .await
        .expect("agent");
    let next = ms(now() + TimeDelta::hours(1));
    let mut made = Vec::new();
    for i in 0..3 {
        let agent = if i == 1 { other_agent.id } else { agent_a };
        let sc = schedule(a, agent, next);
        s.create_schedule(&sc, &entry(AuditAction::ScheduleCreated))
            .await
            .expect("create");
        made.push(sc.id);
    }
    let theirs = schedule(b, agent_b, next);
    s.create_schedule(&theirs, &entry(AuditAction::ScheduleCreated))
        .await
        .expect("create");

    let page = s.list_schedules(a, None, None, 2).await.expect("list");
    assert_eq!(
        page.iter().map(|x| x.id).collect::<Vec<_>>(),
        [made[2], made[1]]
    );
    let rest = s
        .list_schedules(a, None, Some(made[1]), 10)
        .await
        .expect("list");
    assert_eq!(rest.iter().map(|x| x.id).collect::<Vec<_>>(), [made[0]]);
    let of_agent = s
        .list_schedules(a, Some(other_agent.id), None, 10)
        .await
        .expect("list");
    assert_eq!(of_agent.iter().map(|x| x.id).collect::<Vec<_>>(), [made[1]]);
    assert_eq!(s.get_schedule(a, theirs.id).await.expect("get"), None);
    let mut stolen = theirs.clone();
    stolen.tenant = a;
    stolen.version = 2;
    assert!(
        !s.update_schedule(&stolen, 1, None, None)
            .await
            .expect("update"),
        "another tenant's id changes nothing"
    );
    assert!(
        !s.delete_schedule(a, theirs.id, &entry(AuditAction::ScheduleDeleted))
            .await
            .expect("delete")
    );
    assert!(s.get_schedule(b, theirs.id).await.expect("get").is_some());
}

pub async fn due_schedules_are_found_across_tenants_soonest_first<S: Store + ScheduleStore>(s: &S) {
    let (a, agent_a) = with_agent(s).await;
    let (b, agent_b) = with_agent(s).await;
    let at = ms(now());
    let early = schedule(b, agent_b, at - TimeDelta::seconds(30));
    let due = schedule(a, agent_a, at - TimeDelta::seconds(5));
    let later = schedule(a, agent_a, at + TimeDelta::minutes(5));
    let mut paused = schedule(a, agent_a, at - TimeDelta::minutes(1));
    paused.state = ScheduleState::Paused;
    let mut pending = schedule(b, agent_b, at + TimeDelta::hours(1));
    pending.state = ScheduleState::Paused;
    pending.pending = Some(PendingFire {
        at,
        missed: 0,
        agent_id: agent_b,
        title: None,
        message: "go".into(),
        metadata: Default::default(),
        request_id: "schedule:x:y".into(),
    });
    for sc in [&early, &due, &later, &paused, &pending] {
        s.create_schedule(sc, &entry(AuditAction::ScheduleCreated))
            .await
            .expect("create");
    }
    let found = s.due_schedules(at, 10).await.expect("due");
    assert_eq!(
        found.iter().map(|x| x.id).collect::<Vec<_>>(),
        [early.id, due.id, pending.id],
        "active and due, soonest first, and any pending fire; not paused or later"
    );
    assert_eq!(found[0].tenant, b);
    assert_eq!(s.due_schedules(at, 1).await.expect("due").len(), 1);
    assert_eq!(
        s.next_fire_time().await.expect("next"),
        Some(early.next_fire_at.expect("set")),
        "the soonest active fire time"
    );
}
