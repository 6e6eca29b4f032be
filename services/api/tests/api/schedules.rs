//! `/v1/schedules` and the schedules job: definitions are checked, the next fire times
//! shown; a due fire starts exactly one run with its labels however many looks race for
//! it; "run now" is a member's audited action; a schedule pauses itself when its agent is
//! archived or its owner loses access; and fire times follow the zone's clock changes.
//! The job is driven by the test (`look`) with a clock of its own.

use crate::support::{TestApp, assert_problem};
use baton_core::ports::Clock;
use baton_core::schedules::Schedules;
use baton_core::{Principal, Role, TenantId};
use chrono::{DateTime, TimeDelta, Utc};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

/// A clock a test sets.
struct Manual(Mutex<DateTime<Utc>>);

impl Manual {
    fn at(t: DateTime<Utc>) -> Arc<Manual> {
        Arc::new(Manual(Mutex::new(t)))
    }

    fn set(&self, t: DateTime<Utc>) {
        *self.0.lock().expect("clock") = t;
    }
}

impl Clock for Manual {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().expect("clock")
    }
}

/// The app's schedules job, reading `clock`.
fn job(app: &TestApp, clock: Arc<Manual>) -> Schedules {
    Schedules {
        clock,
        ..app.schedules().clone()
    }
}

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s)
        .expect("an RFC 3339 instant")
        .with_timezone(&Utc)
}

fn spec(agent: &str, cron: &str) -> Value {
    json!({
        "name": "nightly report",
        "agent_id": agent,
        "message": "Report for {{fire_time}} ({{fire_time_local}}), {{schedule_name}}",
        "cron": cron,
        "timezone": "Europe/Berlin",
    })
}

/// The runs a schedule started, oldest first.
async fn runs_of(app: &TestApp, auth: &str, schedule: &str) -> Vec<Value> {
    let path = format!("/v1/runs?metadata=schedule_id:{schedule}&limit=500");
    let mut runs = app
        .get(&path, auth)
        .await
        .expect_status(200)
        .items()
        .to_vec();
    runs.reverse();
    runs
}

fn fire_times(runs: &[Value]) -> Vec<String> {
    runs.iter()
        .map(|r| {
            r["metadata"]["fire_time"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .collect()
}

#[tokio::test]
async fn a_schedule_shows_its_next_fire_times_and_lists_with_its_agent() {
    let (app, t) = TestApp::with_tenant().await;
    let agent = app.agent(&t.owner, json!([{"content": "ok"}])).await;
    let other = app.agent(&t.owner, json!([{"content": "ok"}])).await;
    let made = app
        .post("/v1/schedules", &t.owner, spec(&agent, "30 2 * * *"))
        .await
        .expect_status(201);
    let id = made.str("/id");
    assert_eq!(made.body["state"], "active");
    assert_eq!(made.body["fires"], 0);
    assert_eq!(made.body["spec"]["missed"], "skip");
    assert_eq!(made.body["spec"]["overlap"], "allow");
    let next: DateTime<Utc> = made.str("/next_fire_at").parse().expect("an instant");
    assert!(next > Utc::now() && next < Utc::now() + TimeDelta::days(1) + TimeDelta::hours(1));
    let upcoming = made.body["upcoming"].as_array().expect("upcoming").clone();
    assert_eq!(upcoming.len(), 5);
    let second: DateTime<Utc> = upcoming[0]
        .as_str()
        .expect("instant")
        .parse()
        .expect("instant");
    let gap = second - next;
    assert!(
        (TimeDelta::hours(23)..=TimeDelta::hours(25)).contains(&gap),
        "a day apart (or a clock change): {gap}"
    );

    let got = app
        .get(&format!("/v1/schedules/{id}"), &t.owner)
        .await
        .expect_status(200);
    assert_eq!(got.body["next_fire_at"], made.body["next_fire_at"]);
    app.post("/v1/schedules", &t.owner, spec(&other, "0 9 * * MON-FRI"))
        .await
        .expect_status(201);
    let all = app.get("/v1/schedules", &t.owner).await.expect_status(200);
    assert_eq!(all.items().len(), 2);
    let of_agent = app
        .get(&format!("/v1/schedules?agent_id={agent}"), &t.owner)
        .await
        .expect_status(200);
    assert_eq!(of_agent.item_fields("id"), [json!(id)]);

    // Another tenant sees none of it.
    let other_tenant = app.tenant().await;
    let r = app
        .get(&format!("/v1/schedules/{id}"), &other_tenant.owner)
        .await;
    assert_problem(&r, 404, "not_found");
    let r = app
        .delete(&format!("/v1/schedules/{id}"), &other_tenant.owner)
        .await;
    assert_problem(&r, 404, "not_found");
    let r = app
        .post(
            &format!("/v1/schedules/{id}/run"),
            &other_tenant.owner,
            json!({}),
        )
        .await;
    assert_problem(&r, 404, "not_found");
}

#[tokio::test]
async fn bad_definitions_are_refused_naming_what_is_wrong() {
    let (app, t) = TestApp::with_tenant().await;
    let agent = app.agent(&t.owner, json!([{"content": "ok"}])).await;
    let stranger = app.tenant().await;
    let theirs = app.agent(&stranger.owner, json!([{"content": "ok"}])).await;
    let cases: Vec<(Value, &str)> = vec![
        (spec(&agent, "61 * * * *"), "is not valid"),
        (spec(&agent, "0 0 30 2 *"), "never fires"),
        (
            json!({"name": "x", "agent_id": agent, "message": "m", "cron": "0 9 * * *", "timezone": "Mars/Olympus"}),
            "not an IANA time zone",
        ),
        (
            json!({"name": "x", "agent_id": agent, "message": "at {{when}}", "cron": "0 9 * * *"}),
            "unknown placeholder {{when}}",
        ),
        (
            json!({"name": "x", "agent_id": agent, "message": "m", "cron": "0 9 * * *", "metadata": {"schedule_id": "mine"}}),
            "is set by the schedule",
        ),
        (
            json!({"name": "x", "agent_id": agent, "message": "m", "cron": "0 9 * * *",
                   "starts_at": "2030-01-02T00:00:00Z", "ends_at": "2030-01-01T00:00:00Z"}),
            "ends_at must come after starts_at",
        ),
        (
            json!({"name": "x", "agent_id": agent, "message": "m", "cron": "0 9 * * *",
                   "ends_at": "2020-01-01T00:00:00Z"}),
            "would never fire",
        ),
        (spec(&theirs, "0 9 * * *"), "no agent"),
        (
            json!({"name": "x", "agent_id": agent, "message": "  ", "cron": "0 9 * * *"}),
            "message",
        ),
        (
            spec(&agent, "*/30 * * * * *"),
            "closer than this installation allows",
        ),
        (
            json!({"name": " ", "agent_id": agent, "message": "m", "cron": "0 9 * * *"}),
            "name",
        ),
    ];
    for (body, why) in cases {
        let r = app.post("/v1/schedules", &t.owner, body.clone()).await;
        let detail = assert_problem(&r, 400, "invalid_request");
        assert!(detail.contains(why), "{body}: {detail}");
    }
    let r = app
        .post(
            "/v1/schedules",
            &t.owner,
            json!({"name": "x", "agent_id": agent, "message": "m", "cron": "0 9 * * *", "colour": "red"}),
        )
        .await;
    assert_problem(&r, 400, "invalid_body");
    let archived = app.agent(&t.owner, json!([{"content": "ok"}])).await;
    app.post(
        &format!("/v1/agents/{archived}/archive"),
        &t.owner,
        json!({}),
    )
    .await
    .expect_status(200);
    let r = app
        .post("/v1/schedules", &t.owner, spec(&archived, "0 9 * * *"))
        .await;
    assert_problem(&r, 409, "wrong_state");
    assert!(
        app.get("/v1/schedules", &t.owner)
            .await
            .expect_status(200)
            .items()
            .is_empty(),
        "nothing half-made"
    );
}

#[tokio::test]
async fn viewers_read_schedules_and_members_manage_them() {
    let (app, t) = TestApp::with_tenant().await;
    let agent = app.agent(&t.owner, json!([{"content": "ok"}])).await;
    let viewer = app.key(t.id, Role::Viewer).await;
    let member = app.key(t.id, Role::Member).await;
    let r = app
        .post("/v1/schedules", &viewer, spec(&agent, "0 9 * * *"))
        .await;
    assert_problem(&r, 403, "forbidden");
    let id = app
        .post("/v1/schedules", &member, spec(&agent, "0 9 * * *"))
        .await
        .expect_status(201)
        .str("/id");
    app.get(&format!("/v1/schedules/{id}"), &viewer)
        .await
        .expect_status(200);
    for path in ["pause", "run"] {
        let r = app
            .post(&format!("/v1/schedules/{id}/{path}"), &viewer, json!({}))
            .await;
        assert_problem(&r, 403, "forbidden");
    }

    let paused = app
        .post(&format!("/v1/schedules/{id}/pause"), &member, json!({}))
        .await
        .expect_status(200);
    assert_eq!(paused.body["state"], "paused");
    assert!(paused.str("/paused_reason").starts_with("paused by key:"));
    assert!(
        paused.body.get("upcoming").is_none(),
        "no fire times while paused"
    );
    let r = app
        .post(&format!("/v1/schedules/{id}/pause"), &member, json!({}))
        .await;
    assert_eq!(
        r.status, 200,
        "pausing a paused schedule changes nothing to worry about"
    );
    let resumed = app
        .post(&format!("/v1/schedules/{id}/resume"), &t.owner, json!({}))
        .await
        .expect_status(200);
    assert_eq!(resumed.body["state"], "active");
    assert_eq!(resumed.body["paused_reason"], Value::Null);
    let r = app
        .post(&format!("/v1/schedules/{id}/resume"), &t.owner, json!({}))
        .await;
    assert_problem(&r, 409, "wrong_state");

    let mut changed = spec(&agent, "15 8 * * *");
    changed["name"] = json!("morning report");
    let updated = app
        .put(&format!("/v1/schedules/{id}"), &member, changed)
        .await
        .expect_status(200);
    assert_eq!(updated.body["spec"]["cron"], "15 8 * * *");
    assert!(updated.body["version"].as_i64() > resumed.body["version"].as_i64());
    app.delete(&format!("/v1/schedules/{id}"), &member)
        .await
        .expect_status(204);
    let r = app.get(&format!("/v1/schedules/{id}"), &member).await;
    assert_problem(&r, 404, "not_found");

    let audit = app
        .get("/v1/audit?limit=50", &t.owner)
        .await
        .expect_status(200);
    let actions: Vec<Value> = audit.item_fields("action");
    for action in [
        "schedule.created",
        "schedule.paused",
        "schedule.resumed",
        "schedule.updated",
        "schedule.deleted",
    ] {
        assert!(actions.contains(&json!(action)), "{action} in {actions:?}");
    }
}

#[tokio::test]
async fn a_due_fire_starts_one_run_with_its_labels_however_many_looks_race() {
    let (app, t) = TestApp::with_tenant().await;
    let agent = app.agent(&t.owner, json!([{"content": "ok"}])).await;
    let mut body = spec(&agent, "0 * * * *");
    body["title"] = json!("Hourly {{fire_time}}");
    body["metadata"] = json!({"team": "ops"});
    let made = app
        .post("/v1/schedules", &t.owner, body)
        .await
        .expect_status(201);
    let id = made.str("/id");
    let first: DateTime<Utc> = made.str("/next_fire_at").parse().expect("instant");

    // Not due yet: nothing.
    let clock = Manual::at(first - TimeDelta::seconds(1));
    let replicas: Vec<Schedules> = (0..4).map(|_| job(&app, clock.clone())).collect();
    let look = replicas[0].look().await.expect("look");
    assert_eq!(look.fired, 0);

    // Due, and four replicas look at once: one run.
    clock.set(first + TimeDelta::milliseconds(200));
    let looks = futures::future::join_all(replicas.iter().map(Schedules::look)).await;
    let fired: u32 = looks.into_iter().map(|l| l.expect("look").fired).sum();
    assert!(fired >= 1, "some replica recorded the fire");
    let runs = runs_of(&app, &t.owner, &id).await;
    assert_eq!(runs.len(), 1, "{runs:?}");
    let run = &runs[0];
    let stamp = first.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    assert_eq!(run["metadata"]["fire_time"], stamp.as_str());
    assert_eq!(run["metadata"]["trigger"], "timetable");
    assert_eq!(run["metadata"]["team"], "ops");
    assert_eq!(run["title"], format!("Hourly {stamp}").as_str());
    let messages = app
        .get(
            &format!("/v1/runs/{}/messages", run["id"].as_str().expect("id")),
            &t.owner,
        )
        .await
        .expect_status(200);
    let text = messages.items()[0]["content"]
        .as_str()
        .expect("text")
        .to_string();
    assert!(text.starts_with(&format!("Report for {stamp} (")), "{text}");
    assert!(text.ends_with("), nightly report"), "{text}");

    let s = app
        .get(&format!("/v1/schedules/{id}"), &t.owner)
        .await
        .expect_status(200);
    assert_eq!(s.body["fires"], 1);
    assert_eq!(s.body["last_run_id"], run["id"]);
    assert_eq!(s.body["last_fire_at"], json!(stamp));
    let next: DateTime<Utc> = s.str("/next_fire_at").parse().expect("instant");
    assert_eq!(next, first + TimeDelta::hours(1));

    // Looking again at the same time starts nothing more.
    for r in &replicas {
        r.look().await.expect("look");
    }
    assert_eq!(runs_of(&app, &t.owner, &id).await.len(), 1);
}

#[tokio::test]
async fn missed_fires_are_skipped_or_run_once_and_overlaps_follow_the_policy() {
    let (app, t) = TestApp::with_tenant().await;
    // An agent whose turn takes a minute: its runs stay active.
    let slow = app
        .agent(&t.owner, json!([{"content": "slow", "delay_ms": 60_000}]))
        .await;
    let fast = app.agent(&t.owner, json!([{"content": "ok"}])).await;
    let mut skip = spec(&fast, "*/10 * * * *");
    skip["missed"] = json!("skip");
    let skip = app
        .post("/v1/schedules", &t.owner, skip)
        .await
        .expect_status(201);
    let mut once = spec(&fast, "*/10 * * * *");
    once["missed"] = json!("run_once");
    let once = app
        .post("/v1/schedules", &t.owner, once)
        .await
        .expect_status(201);
    let mut overlap = spec(&slow, "*/10 * * * *");
    overlap["overlap"] = json!("skip");
    let overlap = app
        .post("/v1/schedules", &t.owner, overlap)
        .await
        .expect_status(201);
    let first: DateTime<Utc> = skip.str("/next_fire_at").parse().expect("instant");

    // The first fire, on time.
    let clock = Manual::at(first + TimeDelta::seconds(1));
    let replica = job(&app, clock.clone());
    replica.look().await.expect("look");
    // All replicas were down for 35 minutes: three more fire times passed beyond the
    // grace (a minute).
    clock.set(first + TimeDelta::minutes(35));
    replica.look().await.expect("look");

    let skipped = runs_of(&app, &t.owner, &skip.str("/id")).await;
    assert_eq!(skipped.len(), 1, "the missed ones are skipped");
    let s = app
        .get(&format!("/v1/schedules/{}", skip.str("/id")), &t.owner)
        .await
        .expect_status(200);
    assert_eq!(s.body["skipped"], 3);
    assert_eq!(
        s.str("/next_fire_at")
            .parse::<DateTime<Utc>>()
            .expect("instant"),
        first + TimeDelta::minutes(40)
    );

    let ran = runs_of(&app, &t.owner, &once.str("/id")).await;
    assert_eq!(ran.len(), 2, "one run for all the missed");
    let last_missed =
        (first + TimeDelta::minutes(30)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    assert_eq!(ran[1]["metadata"]["fire_time"], last_missed.as_str());
    assert_eq!(ran[1]["metadata"]["missed_fires"], "3");

    // The slow agent's first run is still in its turn: with overlap skip, the missed
    // ones are skipped and so is the next on-time fire.
    clock.set(first + TimeDelta::minutes(40) + TimeDelta::seconds(1));
    replica.look().await.expect("look");
    let overlapping = runs_of(&app, &t.owner, &overlap.str("/id")).await;
    assert_eq!(overlapping.len(), 1, "{overlapping:?}");
    let s = app
        .get(&format!("/v1/schedules/{}", overlap.str("/id")), &t.owner)
        .await
        .expect_status(200);
    assert_eq!(s.body["skipped"], 4, "three missed and one overlapping");
}

#[tokio::test]
async fn run_now_is_a_members_audited_fire_with_its_own_request_id() {
    let (app, t) = TestApp::with_tenant().await;
    let agent = app.agent(&t.owner, json!([{"content": "ok"}])).await;
    let id = app
        .post("/v1/schedules", &t.owner, spec(&agent, "0 9 * * *"))
        .await
        .expect_status(201)
        .str("/id");
    let member = app.key(t.id, Role::Member).await;
    let first = app
        .post(
            &format!("/v1/schedules/{id}/run"),
            &member,
            json!({"request_id": "try-1"}),
        )
        .await
        .expect_status(201);
    assert_eq!(first.body["run"]["metadata"]["trigger"], "now");
    assert_eq!(first.body["run"]["metadata"]["schedule_id"], id.as_str());
    let again = app
        .post(
            &format!("/v1/schedules/{id}/run"),
            &member,
            json!({"request_id": "try-1"}),
        )
        .await
        .expect_status(201);
    assert_eq!(
        again.body["run"]["id"], first.body["run"]["id"],
        "idempotent"
    );
    app.post(&format!("/v1/schedules/{id}/run"), &member, json!({}))
        .await
        .expect_status(201);
    let r = app
        .post(
            &format!("/v1/schedules/{id}/run"),
            &member,
            json!({"request_id": ""}),
        )
        .await;
    assert_problem(&r, 400, "invalid_request");

    let runs = runs_of(&app, &t.owner, &id).await;
    assert_eq!(runs.len(), 2);
    let s = app
        .get(&format!("/v1/schedules/{id}"), &t.owner)
        .await
        .expect_status(200);
    assert_eq!(s.body["last_run_id"], runs[1]["id"]);
    assert!(s.body["fires"].as_u64() >= Some(2));
    let audit = app
        .get("/v1/audit?action=schedule.run_now", &t.owner)
        .await
        .expect_status(200);
    assert!(!audit.items().is_empty());
    assert!(
        audit.items()[0]["actor"]
            .as_str()
            .is_some_and(|a| a.starts_with("key:")),
        "{:?}",
        audit.items()[0]
    );
}

#[tokio::test]
async fn a_schedule_pauses_itself_when_its_agent_is_archived_or_its_owner_loses_access() {
    let (app, t) = TestApp::with_tenant().await;
    let agent = app.agent(&t.owner, json!([{"content": "ok"}])).await;
    let key = app
        .post(
            "/v1/api-keys",
            &t.owner,
            json!({"name": "scheduler bot", "role": "member"}),
        )
        .await
        .expect_status(201);
    let (token, key_id) = (key.str("/token"), key.str("/key/id"));
    let by_key = app
        .post("/v1/schedules", token.as_str(), spec(&agent, "0 * * * *"))
        .await
        .expect_status(201);
    let by_owner = app
        .post("/v1/schedules", &t.owner, spec(&agent, "0 * * * *"))
        .await
        .expect_status(201);
    app.delete(&format!("/v1/api-keys/{key_id}"), &t.owner)
        .await
        .expect_status(204);
    app.post(&format!("/v1/agents/{agent}/archive"), &t.owner, json!({}))
        .await
        .expect_status(200);

    let next: DateTime<Utc> = by_key.str("/next_fire_at").parse().expect("instant");
    let clock = Manual::at(next + TimeDelta::seconds(1));
    let look = job(&app, clock).look().await.expect("look");
    assert_eq!((look.due, look.errors), (2, 0), "{look:?}");
    let s = app
        .get(&format!("/v1/schedules/{}", by_key.str("/id")), &t.owner)
        .await
        .expect_status(200);
    assert_eq!(s.body["state"], "paused");
    // The agent is checked first: archived is what a member can undo most easily.
    assert!(
        s.str("/paused_reason").starts_with("agent_archived:"),
        "{}",
        s.body
    );
    let s = app
        .get(&format!("/v1/schedules/{}", by_owner.str("/id")), &t.owner)
        .await
        .expect_status(200);
    assert!(s.str("/paused_reason").starts_with("agent_archived:"));
    assert!(runs_of(&app, &t.owner, &by_key.str("/id")).await.is_empty());

    // Restored, the owner's schedule resumes; the revoked key's pauses again, now for
    // its owner.
    app.post(&format!("/v1/agents/{agent}/restore"), &t.owner, json!({}))
        .await
        .expect_status(200);
    let id = by_key.str("/id");
    let resumed = app
        .post(&format!("/v1/schedules/{id}/resume"), &t.owner, json!({}))
        .await
        .expect_status(200);
    assert!(
        resumed.str("/owner").starts_with("key:"),
        "resuming takes the schedule over"
    );
    assert_ne!(resumed.str("/owner"), format!("key:{key_id}"));
    // A schedule still owned by the revoked key: made through the store's own view.
    let mut s = app
        .schedules()
        .store
        .get_schedule(t.id, id.parse().expect("id"))
        .await
        .expect("read")
        .expect("there");
    let expected = s.version;
    s.version += 1;
    s.owner = format!("key:{key_id}");
    assert!(
        app.schedules()
            .store
            .update_schedule(&s, expected, None, None)
            .await
            .expect("write")
    );
    let clock = Manual::at(s.next_fire_at.expect("active") + TimeDelta::seconds(1));
    job(&app, clock).look().await.expect("look");
    let s = app
        .get(&format!("/v1/schedules/{id}"), &t.owner)
        .await
        .expect_status(200);
    assert_eq!(s.body["state"], "paused");
    assert!(
        s.str("/paused_reason").starts_with("owner_lost_access:"),
        "{}",
        s.body
    );
    assert!(runs_of(&app, &t.owner, &id).await.is_empty());
    let audit = app
        .get("/v1/audit?action=schedule.paused", &t.owner)
        .await
        .expect_status(200);
    assert!(
        audit.item_fields("actor").contains(&json!("scheduler")),
        "{:?}",
        audit.body
    );
}

/// Drives a schedule created at `start` through `expected` fire times: at each, the
/// clock is set a second past it and the job looks once; each look starts exactly one
/// run, for that fire time.
async fn fires_at(
    app: &TestApp,
    tenant: TenantId,
    auth: &str,
    cron: &str,
    start: &str,
    expected: &[&str],
) {
    let agent = app.agent(auth, json!([{"content": "ok"}])).await;
    let clock = Manual::at(at(start));
    let replica = job(app, clock.clone());
    let owner = Principal {
        tenant,
        role: Role::Owner,
        actor: "local".into(),
        source: None,
    };
    let mut body = spec(&agent, cron);
    body["timezone"] = json!("Europe/Berlin");
    let s = replica
        .create(&owner, serde_json::from_value(body).expect("a spec"))
        .await
        .expect("created");
    let id = s.id.to_string();
    for (i, when) in expected.iter().enumerate() {
        // Only this schedule fires: the others of the test were deleted.
        clock.set(at(when) + TimeDelta::seconds(1));
        let look = replica.look().await.expect("look");
        assert_eq!(look.fired, 1, "at {when}");
        let runs = runs_of(app, auth, &id).await;
        assert_eq!(fire_times(&runs)[i], *when);
        assert_eq!(runs.len(), i + 1);
    }
    replica.delete(&owner, s.id).await.expect("deleted");
}

#[tokio::test]
async fn fire_times_follow_the_zones_clock_changes() {
    let (app, t) = TestApp::with_tenant().await;
    // Berlin, 29 March 2026: 02:00 CET becomes 03:00 CEST.
    fires_at(
        &app,
        t.id,
        &t.owner,
        "30 2 * * *",
        "2026-03-27T12:00:00Z",
        &[
            "2026-03-28T01:30:00Z",
            "2026-03-29T01:00:00Z",
            "2026-03-30T00:30:00Z",
        ],
    )
    .await;
    // 25 October 2026: 03:00 CEST becomes 02:00 CET; the hour from 02:00 runs twice.
    fires_at(
        &app,
        t.id,
        &t.owner,
        "0 * * * *",
        "2026-10-24T23:30:00Z",
        &[
            "2026-10-25T00:00:00Z",
            "2026-10-25T01:00:00Z",
            "2026-10-25T02:00:00Z",
        ],
    )
    .await;
    fires_at(
        &app,
        t.id,
        &t.owner,
        "30 2 * * *",
        "2026-10-23T12:00:00Z",
        &[
            "2026-10-24T00:30:00Z",
            "2026-10-25T00:30:00Z",
            "2026-10-26T01:30:00Z",
        ],
    )
    .await;
}

#[tokio::test]
async fn a_tenant_has_at_most_the_installations_number_of_schedules() {
    let (app, t) = TestApp::with_tenant().await;
    let agent = app.agent(&t.owner, json!([{"content": "ok"}])).await;
    let capped = Schedules {
        options: baton_core::schedules::ScheduleOptions {
            max_per_tenant: 2,
            ..app.schedules().options.clone()
        },
        ..app.schedules().clone()
    };
    let owner = Principal {
        tenant: t.id,
        role: Role::Owner,
        actor: "local".into(),
        source: None,
    };
    let one = || serde_json::from_value(spec(&agent, "0 9 * * *")).expect("a spec");
    capped.create(&owner, one()).await.expect("first");
    capped.create(&owner, one()).await.expect("second");
    let e = capped.create(&owner, one()).await.expect_err("third");
    assert!(e.to_string().contains("the tenant has 2 schedules"), "{e}");
    // Another tenant's count is its own.
    let other = app.tenant().await;
    let theirs = app.agent(&other.owner, json!([{"content": "ok"}])).await;
    let p = Principal {
        tenant: other.id,
        ..owner
    };
    capped
        .create(
            &p,
            serde_json::from_value(spec(&theirs, "0 9 * * *")).expect("a spec"),
        )
        .await
        .expect("another tenant's first");
}

#[tokio::test]
async fn clients_cannot_take_the_request_ids_of_fires_or_delegations() {
    let (app, t) = TestApp::with_tenant().await;
    let agent = app.agent(&t.owner, json!([{"content": "ok"}])).await;
    for id in ["schedule:01a2:2026-12-02T10:00:00Z", "delegate:01a2"] {
        let r = app
            .post(
                "/v1/runs",
                &t.owner,
                json!({"agent_id": agent, "message": "hi", "request_id": id}),
            )
            .await;
        let detail = assert_problem(&r, 400, "invalid_request");
        assert!(
            detail.contains("must not start with schedule: or delegate:"),
            "{detail}"
        );
    }
    let run = app.run(&t.owner, &agent, None).await;
    let r = app
        .post(
            &format!("/v1/runs/{run}/messages"),
            &t.owner,
            json!({"content": "hi", "request_id": "schedule:mine"}),
        )
        .await;
    assert_problem(&r, 400, "invalid_request");
    let runs = app.get("/v1/runs", &t.owner).await.expect_status(200);
    assert_eq!(runs.items().len(), 1, "nothing made by the refusals");
}
