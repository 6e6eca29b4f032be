//! `/v1/retention` and the retention job's rounds: admins set the tenant's default, an
//! agent's `limits.retention_days` overrides it for its runs, a round deletes the ended
//! runs past their policy (and nothing else), shows its progress, and prunes idempotency
//! records past their window. Ages are made by moving rows' times back in the database.

use crate::support::{TestApp, assert_problem, scripted_agent};
use baton_core::Role;
use baton_core::ports::Clock;
use baton_core::retention::Retention;
use chrono::{DateTime, TimeDelta, Utc};
use serde_json::{Value, json};
use std::sync::Arc;

/// The time `0` from now: a replica whose clock has reached the next round.
struct Later(TimeDelta);

impl Clock for Later {
    fn now(&self) -> DateTime<Utc> {
        Utc::now() + self.0
    }
}

/// Moves the run's last change `days` back.
async fn age_run(app: &TestApp, run: &str, days: i64) {
    let id: uuid::Uuid = run.parse().expect("a run id");
    let changed = sqlx::query("UPDATE runs SET updated_at = $1 WHERE id = $2")
        .bind(Utc::now() - TimeDelta::days(days))
        .bind(id)
        .execute(app.store().pool())
        .await
        .expect("age the run");
    assert_eq!(changed.rows_affected(), 1);
}

/// An agent whose one reply ends the run, keeping its runs `days` of its own if given.
async fn ending_agent(app: &TestApp, auth: &str, days: Option<u32>) -> String {
    let mut body = scripted_agent(json!([{"content": "done", "complete_run": true}]));
    if let Some(d) = days {
        body["limits"] = json!({"retention_days": d});
    }
    app.post("/v1/agents", auth, body)
        .await
        .expect_status(201)
        .str("/id")
}

/// A run of `agent` that has ended.
async fn ended_run(app: &TestApp, auth: &str, agent: &str) -> String {
    let run = app.run(auth, agent, Some("go")).await;
    app.wait_run(auth, &run, "completed").await;
    run
}

async fn retention(app: &TestApp, auth: &str) -> Value {
    app.get("/v1/retention", auth).await.expect_status(200).body
}

#[tokio::test]
async fn admins_read_and_set_the_default_and_bad_values_are_refused() {
    let (app, t) = TestApp::with_tenant().await;
    let never = retention(&app, &t.owner).await;
    assert_eq!(
        never,
        json!({"run_days": null, "deleted_runs": 0, "last_deleted_at": null,
               "updated_at": null, "due_runs": 0})
    );
    let set = app
        .put("/v1/retention", &t.owner, json!({"run_days": 30}))
        .await
        .expect_status(200);
    assert_eq!(set.body["run_days"], 30);
    assert!(set.body["updated_at"].is_string(), "{}", set.text);
    assert_eq!(retention(&app, &t.owner).await["run_days"], 30);

    for (body, says) in [
        (
            json!({"run_days": 0}),
            "run_days must be between 1 and 36500",
        ),
        (
            json!({"run_days": 36_501}),
            "run_days must be between 1 and 36500",
        ),
        (json!({"run_days": "a month"}), "run_days"),
        (json!({"run_days": 3, "runs": 1}), "runs"),
    ] {
        let r = app.put("/v1/retention", &t.owner, body.clone()).await;
        assert!(r.status.is_client_error(), "{body}: {}", r.text);
        assert!(r.text.contains(says), "{body}: {}", r.text);
    }
    assert_eq!(retention(&app, &t.owner).await["run_days"], 30, "unchanged");
    let mut bad_agent = scripted_agent(json!([{"content": "x"}]));
    bad_agent["limits"] = json!({"retention_days": 0});
    let r = app.post("/v1/agents", &t.owner, bad_agent).await;
    let detail = assert_problem(&r, 400, "invalid_request");
    assert!(detail.contains("limits.retention_days"), "{detail}");

    for role in [Role::Viewer, Role::Member] {
        let key = app.key(t.id, role).await;
        assert_problem(&app.get("/v1/retention", &key).await, 403, "forbidden");
        let r = app.put("/v1/retention", &key, json!({"run_days": 1})).await;
        assert_problem(&r, 403, "forbidden");
    }
    let other = app.tenant().await;
    assert_eq!(retention(&app, &other.owner).await["run_days"], Value::Null);
    let audit = app
        .get("/v1/audit?action=retention.set", &t.owner)
        .await
        .expect_status(200);
    assert_eq!(audit.items().len(), 1, "{}", audit.text);
    assert_eq!(audit.body["items"][0]["details"]["run_days"], 30);
}

#[tokio::test]
async fn a_round_deletes_the_ended_runs_past_their_policy_and_nothing_else() {
    let (app, t) = TestApp::with_tenant().await;
    let plain = ending_agent(&app, &t.owner, None).await;
    let daily = ending_agent(&app, &t.owner, Some(1)).await;
    let old = ended_run(&app, &t.owner, &plain).await;
    age_run(&app, &old, 40).await;
    let recent = ended_run(&app, &t.owner, &plain).await;
    let old_daily = ended_run(&app, &t.owner, &daily).await;
    age_run(&app, &old_daily, 2).await;
    // Not ended: kept whatever its age.
    let talking = app
        .post(
            "/v1/agents",
            &t.owner,
            scripted_agent(json!([{"content": "more?"}])),
        )
        .await
        .expect_status(201)
        .str("/id");
    let open = app.run(&t.owner, &talking, Some("go")).await;
    app.wait_run(&t.owner, &open, "waiting").await;
    age_run(&app, &open, 400).await;
    // Another tenant's old run, which keeps its runs.
    let other = app.tenant().await;
    let theirs_agent = ending_agent(&app, &other.owner, None).await;
    let theirs = ended_run(&app, &other.owner, &theirs_agent).await;
    age_run(&app, &theirs, 400).await;

    // No default yet: only the daily agent's run is due.
    assert_eq!(retention(&app, &t.owner).await["due_runs"], 1);
    let round = app.retention().round().await.expect("a round");
    let report = round.expect("this replica holds the job");
    assert_eq!((report.found, report.deleted_runs), (1, 1), "{report:?}");
    assert_problem(
        &app.get(&format!("/v1/runs/{old_daily}"), &t.owner).await,
        404,
        "not_found",
    );
    // The next round is a minute away, whoever asks.
    assert_eq!(app.retention().round().await.expect("asked"), None);
    let progress = retention(&app, &t.owner).await;
    assert_eq!(progress["deleted_runs"], 1, "{progress}");
    assert_eq!(progress["run_days"], Value::Null, "{progress}");
    assert!(progress["last_deleted_at"].is_string(), "{progress}");

    // A 30-day default: the old run is due, and goes at the next round.
    app.put("/v1/retention", &t.owner, json!({"run_days": 30}))
        .await
        .expect_status(200);
    assert_eq!(retention(&app, &t.owner).await["due_runs"], 1);
    let status = app
        .retention()
        .status()
        .await
        .expect("status")
        .expect("job");
    assert_eq!(status.rounds, 1);
    let later = Retention {
        clock: Arc::new(Later(TimeDelta::minutes(2))),
        ..app.retention().clone()
    };
    let round = later.round().await.expect("a round").expect("due");
    assert_eq!(round.deleted_runs, 1, "{round:?}");
    let progress = retention(&app, &t.owner).await;
    assert_eq!(
        (
            progress["deleted_runs"].clone(),
            progress["due_runs"].clone()
        ),
        (json!(2), json!(0))
    );
    for gone in [&old, &old_daily] {
        let r = app.get(&format!("/v1/runs/{gone}"), &t.owner).await;
        assert_problem(&r, 404, "not_found");
    }
    for kept in [&recent, &open] {
        app.get(&format!("/v1/runs/{kept}"), &t.owner)
            .await
            .expect_status(200);
    }
    app.get(&format!("/v1/runs/{theirs}"), &other.owner)
        .await
        .expect_status(200);
    let audit = app
        .get("/v1/audit?action=run.deleted", &t.owner)
        .await
        .expect_status(200);
    let actors: Vec<&Value> = audit.items().iter().map(|e| &e["actor"]).collect();
    assert_eq!(
        actors,
        [&json!("retention"), &json!("retention")],
        "{}",
        audit.text
    );
}

#[tokio::test]
async fn a_request_id_is_remembered_for_its_window_and_forgotten_after() {
    let (app, t) = TestApp::with_tenant().await;
    let agent = ending_agent(&app, &t.owner, None).await;
    let create = json!({"agent_id": agent, "request_id": "nightly-2026-12-01"});
    let first = app.post("/v1/runs", &t.owner, create.clone()).await;
    let first = first.expect_status(201).str("/run/id");
    let again = app.post("/v1/runs", &t.owner, create.clone()).await;
    assert_eq!(
        again.expect_status(201).str("/run/id"),
        first,
        "within the window"
    );

    // Eight days on, past the seven-day window: a round prunes the record, and the
    // same request id makes a new run.
    sqlx::query("UPDATE idempotency SET created_at = $1")
        .bind(Utc::now() - TimeDelta::days(8))
        .execute(app.store().pool())
        .await
        .expect("age the record");
    let report = app
        .retention()
        .round()
        .await
        .expect("a round")
        .expect("due");
    assert_eq!(report.idempotency_pruned, 1, "{report:?}");
    let after = app.post("/v1/runs", &t.owner, create).await;
    assert_ne!(after.expect_status(201).str("/run/id"), first);
    app.get(&format!("/v1/runs/{first}"), &t.owner)
        .await
        .expect_status(200);
}

#[tokio::test]
async fn a_full_batch_of_old_request_ids_makes_the_next_round_due_at_once() {
    let (app, t) = TestApp::with_tenant().await;
    let agent = ending_agent(&app, &t.owner, None).await;
    for id in ["one", "two", "three"] {
        let body = json!({"agent_id": agent, "request_id": id});
        app.post("/v1/runs", &t.owner, body)
            .await
            .expect_status(201);
    }
    sqlx::query("UPDATE idempotency SET created_at = $1")
        .bind(Utc::now() - TimeDelta::days(8))
        .execute(app.store().pool())
        .await
        .expect("age the records");
    let mut small = app.retention().clone();
    small.options.batch = 2;
    let first = small.round().await.expect("a round").expect("due");
    assert_eq!(
        (first.idempotency_pruned, first.more),
        (2, true),
        "{first:?}"
    );
    // Due again at once, not a minute later: the rest goes.
    let second = small.round().await.expect("a round").expect("due at once");
    assert_eq!(
        (second.idempotency_pruned, second.more),
        (1, false),
        "{second:?}"
    );
    assert_eq!(
        small.round().await.expect("asked"),
        None,
        "then a minute away"
    );
}
