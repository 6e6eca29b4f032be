//! `strategy` on a posted message: `enqueue` answers 202 with the message queued behind
//! the turn in progress, retried it is queued once, a full queue refuses, an agent's
//! default applies when the message names none, and `wait` covers the time in the queue.

use crate::support::{TestApp, assert_problem};
use axum::http::header;
use serde_json::{Value, json};

/// A first turn slow enough for a test to queue behind it, then quick replies.
fn replies(quick: usize) -> Value {
    replies_after(800, quick)
}

/// A first turn of `first_ms`, then quick replies.
fn replies_after(first_ms: u64, quick: usize) -> Value {
    let mut replies = vec![json!({"content": "first", "delay_ms": first_ms})];
    replies.extend((1..=quick).map(|i| json!({"content": format!("reply {i}")})));
    Value::Array(replies)
}

#[tokio::test]
async fn an_enqueued_message_answers_202_queued_and_a_retry_queues_it_once() {
    let (app, t) = TestApp::with_tenant().await;
    // The first turn outlasts every request below, however loaded the machine.
    let agent = app.agent(&t.owner, replies_after(60_000, 1)).await;
    let run = app.run(&t.owner, &agent, Some("go")).await;
    let path = format!("/v1/runs/{run}/messages");
    let body = json!({"content": "next", "strategy": "enqueue", "request_id": "next-1"});
    let queued = app
        .post(&path, &t.owner, body.clone())
        .await
        .expect_status(202);
    assert_eq!(queued.body["state"], "queued", "{}", queued.text);
    assert_eq!(queued.body["position"], 1);
    assert_eq!(queued.body["content"], "next");
    assert_eq!(queued.body["run_id"], run.as_str());
    assert_eq!(
        queued.headers[header::LOCATION].to_str().ok(),
        Some(format!("/v1/runs/{run}").as_str())
    );
    let again = app.post(&path, &t.owner, body).await.expect_status(202);
    assert_eq!(again.body, queued.body, "the original answer");
    let summary = app.get(&format!("/v1/runs/{run}"), &t.owner).await;
    assert_eq!(summary.body["queued_messages"], 1, "{}", summary.text);

    // Rejecting, or naming no strategy on an agent that rejects: 409, nothing stored.
    for body in [
        json!({"content": "no", "strategy": "reject"}),
        json!({"content": "no"}),
    ] {
        assert_problem(&app.post(&path, &t.owner, body).await, 409, "run_busy");
    }
    let unknown = json!({"content": "x", "strategy": "jump_the_queue"});
    assert_problem(
        &app.post(&path, &t.owner, unknown).await,
        400,
        "invalid_body",
    );
    let summary = app.get(&format!("/v1/runs/{run}"), &t.owner).await;
    assert_eq!(summary.body["queued_messages"], 1, "{}", summary.text);
}

#[tokio::test]
async fn the_agents_strategy_applies_and_a_full_queue_refuses_one_more() {
    let (app, t) = TestApp::with_tenant().await;
    let agent = app
        .post(
            "/v1/agents",
            &t.owner,
            json!({"name": "queues", "provider": {"kind": "scripted", "replies": replies_after(60_000, 2)},
                   "limits": {"message_strategy": "enqueue", "max_queued_messages": 2}}),
        )
        .await
        .expect_status(201);
    assert_eq!(agent.body["limits"]["message_strategy"], "enqueue");
    let run = app.run(&t.owner, &agent.str("/id"), Some("go")).await;
    let path = format!("/v1/runs/{run}/messages");
    for place in 1..=2 {
        let r = app
            .post(&path, &t.owner, json!({"content": format!("m{place}")}))
            .await
            .expect_status(202);
        assert_eq!(r.body["position"], place, "{}", r.text);
    }
    let full = app.post(&path, &t.owner, json!({"content": "m3"})).await;
    assert_problem(&full, 409, "queue_full");
    assert!(full.text.contains("max_queued_messages"), "{}", full.text);
    // A message may still refuse to wait in line.
    let r = app
        .post(
            &path,
            &t.owner,
            json!({"content": "m3", "strategy": "reject"}),
        )
        .await;
    assert_problem(&r, 409, "run_busy");

    for bad in [0, 1001] {
        let r = app
            .post(
                "/v1/agents",
                &t.owner,
                json!({"name": format!("bad{bad}"), "provider": {"kind": "scripted", "replies": [{"content": "x"}]},
                       "limits": {"max_queued_messages": bad}}),
            )
            .await;
        assert_problem(&r, 400, "invalid_request");
        assert!(r.text.contains("limits.max_queued_messages"), "{}", r.text);
    }
}

#[tokio::test]
async fn a_queued_messages_wait_covers_its_time_in_the_queue() {
    let (app, t) = TestApp::with_tenant().await;
    let agent = app.agent(&t.owner, replies(1)).await;
    let run = app.run(&t.owner, &agent, Some("go")).await;
    let path = format!("/v1/runs/{run}/messages");
    let settled = app
        .post(
            &path,
            &t.owner,
            json!({"content": "then this", "strategy": "enqueue", "wait": 10}),
        )
        .await
        .expect_status(201);
    assert_eq!(settled.body["state"], "started", "{}", settled.text);
    assert_eq!(settled.body["turn"], 2);
    assert_eq!(settled.body["message"]["content"], "then this");
    assert_eq!(settled.body["message"]["seq"], 3);
    assert_eq!(settled.body["result"]["outcome"], "completed");
    assert_eq!(settled.body["result"]["reply"]["content"], "reply 1");
    assert_eq!(settled.body["result"]["run"]["queued_messages"], 0);
}

#[tokio::test]
async fn a_queued_message_whose_wait_runs_out_answers_202_queued() {
    let (app, t) = TestApp::with_tenant().await;
    let agent = app
        .agent(
            &t.owner,
            json!([{"content": "slow", "delay_ms": 60_000}, {"content": "never"}]),
        )
        .await;
    let run = app.run(&t.owner, &agent, Some("go")).await;
    let r = app
        .post(
            &format!("/v1/runs/{run}/messages"),
            &t.owner,
            json!({"content": "later", "strategy": "enqueue", "wait": 1}),
        )
        .await
        .expect_status(202);
    assert_eq!(r.body["state"], "queued", "{}", r.text);
    assert_eq!(r.body["position"], 1);
}

#[tokio::test]
async fn an_interrupting_message_goes_first_and_the_turn_it_ends_says_so() {
    let (app, t) = TestApp::with_tenant().await;
    let agent = app
        .agent(&t.owner, json!([{"content": "slow", "delay_ms": 60_000}]))
        .await;
    let run = app.run(&t.owner, &agent, Some("go")).await;
    let path = format!("/v1/runs/{run}/messages");
    let queued = json!({"content": "after", "strategy": "enqueue"});
    app.post(&path, &t.owner, queued).await.expect_status(202);
    let stop = app
        .post(
            &path,
            &t.owner,
            json!({"content": "stop", "strategy": "rollback"}),
        )
        .await
        .expect_status(202);
    assert_eq!(stop.body["state"], "queued", "{}", stop.text);
    assert_eq!(stop.body["position"], 1, "ahead of the queue");
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    let summary = loop {
        let r = app.get(&format!("/v1/runs/{run}"), &t.owner).await;
        if r.body["turn_count"] == 2 {
            break r.body;
        }
        assert!(tokio::time::Instant::now() < deadline, "{}", r.text);
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(summary["last_turn_outcome"], "interrupted", "{summary}");
    assert_eq!(summary["interrupt_requested"], false, "{summary}");
    assert_eq!(
        summary["queued_messages"], 1,
        "the enqueued one still waits"
    );
    let messages = app.get(&path, &t.owner).await;
    let said: Vec<&str> = messages.body["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|m| m["content"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(said, ["go", "stop"]);
}
