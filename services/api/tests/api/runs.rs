//! Runs and their messages and events: one turn at a time, idempotent retries, cancels,
//! pages with cursors, and the event stream.

use crate::support::{Reply, Tenant, TestApp, assert_problem};
use axum::body::Body;
use axum::http::{Method, StatusCode, header};
use serde_json::{Value, json};

/// A scripted reply that keeps its turn busy for longer than any test runs.
fn slow_reply() -> Value {
    json!([{"content": "eventually", "delay_ms": 60_000}])
}

/// An app, a tenant of it and an agent of the tenant with these scripted replies.
async fn app_with_agent(replies: Value) -> (TestApp, Tenant, String) {
    let (app, t) = TestApp::with_tenant().await;
    let agent = app.agent(&t.owner, replies).await;
    (app, t, agent)
}

/// Checks the run's messages are `expected`, as (seq, role, content).
async fn assert_messages(app: &TestApp, t: &Tenant, run: &str, expected: &[(i64, &str, &str)]) {
    let r = app
        .get(&format!("/v1/runs/{run}/messages"), &t.owner)
        .await
        .expect_status(200);
    let text = |m: &Value, f: &str| m[f].as_str().expect("a string field").to_string();
    let got: Vec<(i64, String, String)> = r
        .items()
        .iter()
        .map(|m| {
            (
                m["seq"].as_i64().expect("a seq"),
                text(m, "role"),
                text(m, "content"),
            )
        })
        .collect();
    let expected: Vec<(i64, String, String)> = expected
        .iter()
        .map(|(seq, role, content)| (*seq, role.to_string(), content.to_string()))
        .collect();
    assert_eq!(got, expected, "{}", r.text);
}

/// The run's events as a client streaming them sees them, after `last_event_id` if given.
async fn stream(app: &TestApp, t: &Tenant, run: &str, last_event_id: Option<&str>) -> Reply {
    app.send(app.events_request(run, &t.owner, last_event_id))
        .await
}

/// One SSE frame: its `id`, `event` and `data` fields.
#[derive(Debug, Default)]
struct Frame {
    id: Option<i64>,
    event: String,
    data: String,
}

/// The frames of an SSE body that carry an event (not the comments and retry hint).
fn frames(text: &str) -> Vec<Frame> {
    let mut frames = Vec::new();
    for block in text.split("\n\n") {
        let mut frame = Frame::default();
        for line in block.lines() {
            match line.split_once(": ") {
                Some(("id", id)) => frame.id = Some(id.parse().expect("a numeric id")),
                Some(("event", event)) => frame.event = event.to_string(),
                Some(("data", data)) => frame.data = data.to_string(),
                _ => {}
            }
        }
        if !frame.event.is_empty() {
            frames.push(frame);
        }
    }
    frames
}

#[tokio::test]
async fn a_run_created_with_a_first_message_runs_its_turn_and_stores_the_reply() {
    let (app, t, agent) = app_with_agent(json!([{"content": "Hello!"}])).await;
    let r = app
        .post(
            "/v1/runs",
            &t.owner,
            json!({"agent_id": agent, "title": "First", "message": "Hi"}),
        )
        .await
        .expect_status(201);
    assert_eq!(r.body["run"]["status"], "queued");
    assert_eq!(r.body["run"]["title"], "First");
    assert_eq!(r.body["run"]["agent_version"], 1);
    assert_eq!(
        (
            &r.body["message"]["seq"],
            &r.body["message"]["role"],
            &r.body["message"]["content"]
        ),
        (&json!(1), &json!("user"), &json!("Hi"))
    );
    let run = r.str("/run/id");
    let summary = app.wait_run(&t.owner, &run, "waiting").await;
    assert_eq!(
        (&summary["message_count"], &summary["turn_count"]),
        (&json!(2), &json!(1))
    );
    assert_messages(
        &app,
        &t,
        &run,
        &[(1, "user", "Hi"), (2, "assistant", "Hello!")],
    )
    .await;
}

#[tokio::test]
async fn a_second_message_while_busy_is_run_busy_and_stores_nothing() {
    let (app, t, agent) = app_with_agent(slow_reply()).await;
    let run = app.run(&t.owner, &agent, Some("first")).await;
    let r = app
        .post(
            &format!("/v1/runs/{run}/messages"),
            &t.owner,
            json!({"content": "second", "request_id": "second-1"}),
        )
        .await;
    assert_problem(&r, 409, "run_busy");
    assert_messages(&app, &t, &run, &[(1, "user", "first")]).await;
}

#[tokio::test]
async fn a_repeated_request_id_answers_the_original_message_and_stores_one() {
    let (app, t, agent) = app_with_agent(slow_reply()).await;
    let run = app.run(&t.owner, &agent, None).await;
    let path = format!("/v1/runs/{run}/messages");
    let body = json!({"content": "Thanks", "request_id": "thanks-1"});
    let first = app
        .post(&path, &t.owner, body.clone())
        .await
        .expect_status(201);
    assert_eq!(first.body["turn"], 1);
    // Repeated while the turn it started is busy: the original answer, not run_busy.
    let again = app.post(&path, &t.owner, body).await.expect_status(201);
    assert_eq!(again.body, first.body);
    let other = json!({"content": "Thanks a lot", "request_id": "thanks-1"});
    assert_problem(
        &app.post(&path, &t.owner, other).await,
        422,
        "idempotency_key_reused",
    );
    assert_messages(&app, &t, &run, &[(1, "user", "Thanks")]).await;
}

#[tokio::test]
async fn a_repeated_request_id_on_create_answers_the_original_run() {
    let (app, t, agent) = app_with_agent(slow_reply()).await;
    let body = json!({"agent_id": agent, "message": "Hi", "request_id": "create-1"});
    let first = app.post("/v1/runs", &t.owner, body.clone()).await;
    let again = app
        .post("/v1/runs", &t.owner, body)
        .await
        .expect_status(201);
    assert_eq!(again.str("/run/id"), first.str("/run/id"));
    assert_eq!(again.body["message"], first.body["message"]);
    let other = json!({"agent_id": agent, "message": "Hello", "request_id": "create-1"});
    assert_problem(
        &app.post("/v1/runs", &t.owner, other).await,
        422,
        "idempotency_key_reused",
    );
    assert_eq!(app.get("/v1/runs", &t.owner).await.items().len(), 1);
}

#[tokio::test]
async fn an_idle_run_is_cancelled_at_once_and_then_refuses_messages() {
    let (app, t, agent) = app_with_agent(json!([{"content": "hi"}])).await;
    let run = app.run(&t.owner, &agent, None).await;
    let cancel = format!("/v1/runs/{run}/cancel");
    // The body is optional.
    let req = app.request(Method::POST, &cancel, &t.owner);
    let r = app
        .send(req.body(Body::empty()).expect("a request"))
        .await
        .expect_status(200);
    assert_eq!(r.body["status"], "cancelled");
    let again = app
        .post(&cancel, &t.owner, json!({"reason": "twice"}))
        .await
        .expect_status(200);
    assert_eq!(
        again.body, r.body,
        "cancelling a cancelled run changes nothing"
    );
    let post = app
        .post(
            &format!("/v1/runs/{run}/messages"),
            &t.owner,
            json!({"content": "hi"}),
        )
        .await;
    assert_problem(&post, 409, "run_ended");
    assert_messages(&app, &t, &run, &[]).await;
}

#[tokio::test]
async fn runs_and_messages_are_listed_in_pages_with_cursors() {
    let (app, t, agent) = app_with_agent(json!([{"content": "Hello!"}])).await;
    let mut runs = Vec::new();
    for _ in 0..3 {
        runs.push(app.run(&t.owner, &agent, None).await);
    }
    let first = app.get("/v1/runs?limit=2", &t.owner).await;
    assert_eq!(
        first.item_fields("id"),
        [json!(runs[2]), json!(runs[1])],
        "newest first"
    );
    let cursor = first.str("/next_cursor");
    let second = app
        .get(&format!("/v1/runs?limit=2&cursor={cursor}"), &t.owner)
        .await;
    assert_eq!(second.item_fields("id"), [json!(runs[0])]);
    assert_eq!(second.body["next_cursor"], Value::Null);
    let waiting = app.get("/v1/runs?status=completed", &t.owner).await;
    assert_eq!(waiting.items().len(), 0, "filtered by status");

    let run = app.run(&t.owner, &agent, Some("Hi")).await;
    app.wait_run(&t.owner, &run, "waiting").await;
    let path = format!("/v1/runs/{run}/messages?limit=1");
    let next = |page: &Reply| format!("{path}&cursor={}", page.str("/next_cursor"));
    let one = app.get(&path, &t.owner).await;
    assert_eq!(one.item_fields("seq"), [json!(1)]);
    let two = app.get(&next(&one), &t.owner).await;
    assert_eq!(two.item_fields("content"), [json!("Hello!")]);
    let three = app.get(&next(&two), &t.owner).await;
    assert_eq!(
        (three.items().len(), &three.body["next_cursor"]),
        (0, &Value::Null)
    );
}

#[tokio::test]
async fn events_are_read_in_pages_after_a_version() {
    let (app, t, agent) = app_with_agent(json!([{"content": "Bye", "complete_run": true}])).await;
    let run = app.run(&t.owner, &agent, Some("Hi")).await;
    let done = app.wait_run(&t.owner, &run, "completed").await;
    let last = done["version"].as_i64().expect("a version");
    let page = app
        .get(&format!("/v1/runs/{run}/events?after=0&limit=2"), &t.owner)
        .await
        .expect_status(200);
    let events = page.body["events"].as_array().expect("events");
    let seen: Vec<_> = events
        .iter()
        .map(|e| (e["version"].clone(), e["type"].clone()))
        .collect();
    assert_eq!(
        seen,
        [
            (json!(1), json!("run.created")),
            (json!(2), json!("message.appended"))
        ]
    );
    assert_eq!(events[0]["stream"], json!(run));
    assert_eq!(page.body["next_after"], 2);
    let rest = app
        .get(
            &format!("/v1/runs/{run}/events?after=2&limit=500"),
            &t.owner,
        )
        .await;
    let rest = rest.body["events"].as_array().expect("events");
    assert_eq!(rest.first().map(|e| e["version"].clone()), Some(json!(3)));
    assert_eq!(
        rest.last().map(|e| e["type"].clone()),
        Some(json!("run.completed"))
    );
    assert_eq!(rest.len() as i64, last - 2, "no gaps");
    let past = app
        .get(&format!("/v1/runs/{run}/events?after={last}"), &t.owner)
        .await;
    assert_eq!(past.body, json!({"events": [], "next_after": last}));
    // Past the head: the same answer as the stream's (services/server/tests/e2e/sse.rs).
    let beyond = app
        .get(
            &format!("/v1/runs/{run}/events?after={}", last + 1),
            &t.owner,
        )
        .await
        .expect_status(400);
    assert_eq!(beyond.body["code"], "invalid_request", "{}", beyond.body);
    let detail = beyond.body["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("past the end"), "{detail}");
}

#[tokio::test]
async fn the_event_stream_of_a_run_that_completes_ends_after_run_completed() {
    let (app, t, agent) = app_with_agent(json!([{"content": "Bye", "complete_run": true}])).await;
    let run = app.run(&t.owner, &agent, Some("Hi")).await;
    let r = stream(&app, &t, &run, None).await.expect_status(200);
    assert_eq!(r.headers[header::CONTENT_TYPE], "text/event-stream");
    assert!(
        r.text.starts_with("retry: 1000\n"),
        "a reconnection hint first: {}",
        r.text
    );
    let frames = frames(&r.text);
    // Durable events have ids; ephemeral deltas have none and never move the cursor.
    let (durable, deltas): (Vec<_>, Vec<_>) = frames.iter().partition(|f| f.id.is_some());
    assert!(
        deltas.iter().all(|f| f.event == "message.delta"),
        "{frames:?}"
    );
    let ids: Vec<i64> = durable.iter().filter_map(|f| f.id).collect();
    assert_eq!(
        ids,
        (1..=ids.len() as i64).collect::<Vec<_>>(),
        "in order, no gaps"
    );
    assert_eq!(
        durable.first().map(|f| f.event.as_str()),
        Some("run.created")
    );
    assert_eq!(
        durable.last().map(|f| f.event.as_str()),
        Some("run.completed"),
        "{}",
        r.text
    );
    for f in &durable {
        let envelope: Value = serde_json::from_str(&f.data).expect("an envelope");
        assert_eq!(
            (&envelope["stream"], &envelope["type"]),
            (&json!(run), &json!(f.event))
        );
        assert_eq!(envelope["version"], json!(f.id));
    }
    // From the end of an ended run nothing follows; a bad cursor is named.
    let last = ids.last().expect("events").to_string();
    assert_eq!(
        stream(&app, &t, &run, Some(&last)).await.status,
        StatusCode::NO_CONTENT
    );
    let r = stream(&app, &t, &run, Some("minus one")).await;
    assert_problem(&r, 400, "invalid_last_event_id");
}

#[tokio::test]
async fn a_key_holds_only_so_many_open_streams_and_a_closed_one_frees_its_place() {
    let (app, t, agent) = app_with_agent(json!([{"content": "x"}])).await;
    // A run that waits for a message: its stream stays open.
    let run = app.run(&t.owner, &agent, None).await;
    let open = || async { app.open(app.events_request(&run, &t.owner, None)).await };
    let mut held = Vec::new();
    for _ in 0..crate::support::STREAMS_PER_KEY {
        let res = open().await;
        assert_eq!(res.status(), 200);
        held.push(res);
    }
    let refused = open().await;
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.headers()[header::RETRY_AFTER], "5");
    let reply = app.send(app.events_request(&run, &t.owner, None)).await;
    let detail = assert_problem(&reply, 429, "rate_limited");
    assert!(detail.contains("open event streams"), "{detail}");
    // Another key of the tenant has its own budget.
    let other = app.key(t.id, baton_core::Role::Viewer).await;
    let req = app.events_request(&run, &other, None);
    assert_eq!(app.open(req).await.status(), 200);
    // A client that goes away frees its place.
    drop(held.pop());
    assert_eq!(open().await.status(), 200);
}
