//! `wait` on a created run or a posted message: the answer comes when the turn settles,
//! with the outcome, the run and the model's reply, or as 202 naming the run when the
//! wait runs out; bad waits are refused with nothing written.

use crate::support::{STREAMS_PER_KEY, TestApp, assert_problem, scripted_agent};
use axum::http::header;
use serde_json::json;

#[tokio::test]
async fn a_created_run_and_a_posted_message_answer_with_their_own_turns_reply() {
    let (app, t) = TestApp::with_tenant().await;
    let agent = app
        .agent(
            &t.owner,
            json!([{"content": "first answer", "delay_ms": 50}, {"content": "second answer"}]),
        )
        .await;
    let r = app
        .run_waiting(&t.owner, &agent, "one", 10)
        .await
        .expect_status(201);
    assert_eq!(r.body["result"]["outcome"], "completed", "{}", r.text);
    assert_eq!(r.body["result"]["turn"], 1);
    assert_eq!(r.body["result"]["reply"]["role"], "assistant");
    assert_eq!(r.body["result"]["reply"]["content"], "first answer");
    assert_eq!(r.body["result"]["run"]["status"], "waiting");
    // The run as created stays what it was; the result has it as the turn left it.
    assert_eq!(r.body["run"]["status"], "queued");
    let run = r.str("/run/id");

    let posted = app
        .post(
            &format!("/v1/runs/{run}/messages"),
            &t.owner,
            json!({"content": "two", "wait": 10}),
        )
        .await
        .expect_status(201);
    assert_eq!(posted.body["turn"], 2);
    assert_eq!(posted.body["result"]["turn"], 2);
    assert_eq!(posted.body["result"]["outcome"], "completed");
    assert_eq!(posted.body["result"]["reply"]["content"], "second answer");
    assert_eq!(posted.body["result"]["reply"]["seq"], 4, "{}", posted.text);
    let (run_at, reply_at) = (
        posted.body["result"]["run"]["version"].as_i64(),
        posted.body["result"]["reply"]["version"].as_i64(),
    );
    assert!(
        run_at >= reply_at,
        "the run as the turn left it: {}",
        posted.text
    );
}

#[tokio::test]
async fn a_turn_that_fails_or_needs_an_action_settles_the_wait() {
    let (app, t) = TestApp::with_tenant().await;
    // One reply for two model calls: the second call fails its turn.
    let agent = app.agent(&t.owner, json!([{"content": "only"}])).await;
    let run = app.run(&t.owner, &agent, Some("one")).await;
    app.wait_run(&t.owner, &run, "waiting").await;
    let failed = app
        .post(
            &format!("/v1/runs/{run}/messages"),
            &t.owner,
            json!({"content": "two", "wait": 10}),
        )
        .await
        .expect_status(201);
    assert_eq!(
        failed.body["result"]["outcome"], "failed",
        "{}",
        failed.text
    );
    assert_eq!(
        failed.body["result"]["run"]["last_error"]["code"],
        "script_exhausted"
    );
    assert!(
        failed.body["result"].get("reply").is_none(),
        "no reply in a turn whose model call failed: {}",
        failed.text
    );

    let tool = app.tool(&t.owner, "lookup").await;
    let mut spec = scripted_agent(json!([
        {"content": "looking", "tool_calls": [{"name": "lookup", "arguments": {}}]},
        {"content": "found it"}
    ]));
    spec["tools"] = json!([tool]);
    let agent = app.post("/v1/agents", &t.owner, spec).await.str("/id");
    let r = app
        .run_waiting(&t.owner, &agent, "look it up", 10)
        .await
        .expect_status(201);
    assert_eq!(r.body["result"]["outcome"], "requires_action", "{}", r.text);
    assert_eq!(r.body["result"]["run"]["status"], "requires_action");
    assert_eq!(r.body["result"]["reply"]["content"], "looking");
}

#[tokio::test]
async fn a_wait_that_runs_out_answers_202_naming_the_run() {
    let (app, t) = TestApp::with_tenant().await;
    let agent = app
        .agent(&t.owner, json!([{"content": "late", "delay_ms": 60_000}]))
        .await;
    let r = app
        .run_waiting(&t.owner, &agent, "one", 1)
        .await
        .expect_status(202);
    let run = r.str("/run/id");
    assert_eq!(r.headers[header::LOCATION], format!("/v1/runs/{run}"));
    assert!(r.body.get("result").is_none(), "{}", r.text);
    assert_eq!(r.body["message"]["content"], "one");
    let now = app.get(&format!("/v1/runs/{run}"), &t.owner).await;
    assert!(
        ["queued", "running"].contains(&now.body["status"].as_str().unwrap_or_default()),
        "the turn goes on: {}",
        now.text
    );
    // The wait held a stream's place only while it lasted.
    for _ in 0..STREAMS_PER_KEY {
        let req = app.events_request(&run, &t.owner, None);
        assert_eq!(app.open(req).await.status(), 200);
    }
}

#[tokio::test]
async fn a_retried_create_with_wait_answers_the_original_run_and_its_turn() {
    let (app, t) = TestApp::with_tenant().await;
    let agent = app.agent(&t.owner, json!([{"content": "once"}])).await;
    let body = json!({"agent_id": agent, "message": "hi", "request_id": "r-1", "wait": 10});
    let first = app
        .post("/v1/runs", &t.owner, body.clone())
        .await
        .expect_status(201);
    let again = app
        .post("/v1/runs", &t.owner, body)
        .await
        .expect_status(201);
    assert_eq!(again.str("/run/id"), first.str("/run/id"));
    assert_eq!(again.body["result"]["reply"], first.body["result"]["reply"]);
    let runs = app.get("/v1/runs", &t.owner).await.expect_status(200);
    assert_eq!(runs.items().len(), 1, "{}", runs.text);
}

#[tokio::test]
async fn bad_waits_are_refused_with_nothing_written() {
    let (app, t) = TestApp::with_tenant().await;
    let agent = app.agent(&t.owner, json!([{"content": "x"}])).await;
    for (body, says) in [
        (
            json!({"agent_id": agent, "wait": 5}),
            "needs a first message",
        ),
        (
            json!({"agent_id": agent, "message": "m", "wait": 61}),
            "0 to 60",
        ),
        (
            json!({"agent_id": agent, "message": "m", "wait": -1}),
            "wait",
        ),
        (
            json!({"agent_id": agent, "message": "m", "wait": "soon"}),
            "wait",
        ),
    ] {
        let r = app.post("/v1/runs", &t.owner, body).await;
        let detail = assert_problem(&r, 400, "invalid_body");
        assert!(detail.contains(says), "{detail}");
    }
    let runs = app.get("/v1/runs", &t.owner).await.expect_status(200);
    assert!(runs.items().is_empty(), "{}", runs.text);

    let run = app.run(&t.owner, &agent, None).await;
    let r = app
        .post(
            &format!("/v1/runs/{run}/messages"),
            &t.owner,
            json!({"content": "m", "wait": 3600}),
        )
        .await;
    assert_problem(&r, 400, "invalid_body");
    let messages = app.get(&format!("/v1/runs/{run}/messages"), &t.owner).await;
    assert!(messages.items().is_empty(), "{}", messages.text);
}

#[tokio::test]
async fn a_wait_beyond_the_open_stream_limit_is_429_before_anything_is_written() {
    let (app, t) = TestApp::with_tenant().await;
    let agent = app.agent(&t.owner, json!([{"content": "x"}])).await;
    let run = app.run(&t.owner, &agent, None).await;
    let mut held = Vec::new();
    for _ in 0..STREAMS_PER_KEY {
        let res = app.open(app.events_request(&run, &t.owner, None)).await;
        assert_eq!(res.status(), 200);
        held.push(res);
    }
    let r = app
        .post(
            &format!("/v1/runs/{run}/messages"),
            &t.owner,
            json!({"content": "m", "wait": 5}),
        )
        .await;
    let detail = assert_problem(&r, 429, "rate_limited");
    assert!(detail.contains("open event streams"), "{detail}");
    let messages = app.get(&format!("/v1/runs/{run}/messages"), &t.owner).await;
    assert!(messages.items().is_empty(), "{}", messages.text);
    // Without a wait the same post needs no stream's place.
    app.post(
        &format!("/v1/runs/{run}/messages"),
        &t.owner,
        json!({"content": "m"}),
    )
    .await
    .expect_status(201);
}
