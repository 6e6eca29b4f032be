//! `delegate` tools: a run's call starts a child run of another agent and answers with the
//! child's whole reply; the child names its parent and is listed under it; cancelling the
//! parent cancels the child it waits on; a chain of delegations stops at its depth limit.

use crate::support::{Tenant, TestApp, assert_problem};
use serde_json::{Value, json};

/// A delegate tool named `name` starting runs of `agent`.
async fn delegate_tool(app: &TestApp, t: &Tenant, name: &str, agent: &str) -> String {
    let body = json!({"name": name, "effect": "read", "timeout_ms": 60_000,
        "input_schema": {"type": "object", "properties": {"message": {"type": "string"}}},
        "kind": {"kind": "delegate", "agent_id": agent}});
    app.post("/v1/tools", &t.owner, body)
        .await
        .expect_status(201)
        .str("/id")
}

/// A run of `agent` whose first turn completed (within 10 s); its id.
async fn completed_run(app: &TestApp, t: &Tenant, agent: &str) -> String {
    let created = app
        .run_waiting(&t.owner, agent, "go", 10)
        .await
        .expect_status(201);
    assert_eq!(
        created.body["result"]["outcome"], "completed",
        "{}",
        created.text
    );
    created.str("/run/id")
}

/// The run's `tool.result` event.
async fn tool_result(app: &TestApp, t: &Tenant, run: &str) -> Value {
    let results = app.events_of(&t.owner, run, "tool.result").await;
    results.into_iter().next().expect("a tool.result")
}

/// The runs `parent` started.
async fn children(app: &TestApp, t: &Tenant, parent: &str) -> Vec<Value> {
    app.get(&format!("/v1/runs?parent_run_id={parent}"), &t.owner)
        .await
        .expect_status(200)
        .items()
        .to_vec()
}

#[tokio::test]
async fn a_delegate_call_answers_with_the_childs_whole_reply() {
    let (app, t) = TestApp::with_tenant().await;
    // Longer than an http tool's output cap: a delegation's answer is not cut there.
    let long = "The report. ".repeat(10_000);
    let writer = app.agent(&t.owner, json!([{"content": long}])).await;
    let tool = delegate_tool(&app, &t, "ask_writer", &writer).await;
    let read = app.get(&format!("/v1/tools/{tool}"), &t.owner).await;
    assert_eq!(
        read.expect_status(200).body["idempotent"],
        true,
        "a delegation is"
    );
    let lead = app
        .agent_with_tools(
            &t.owner,
            json!([
                {"tool_calls": [{"name": "ask_writer", "arguments": {"message": "write it"}}]},
                {"content": "done"}
            ]),
            &[&tool],
        )
        .await;
    let parent = completed_run(&app, &t, &lead).await;

    let receipts = app
        .get(&format!("/v1/runs/{parent}/receipts"), &t.owner)
        .await
        .expect_status(200);
    let receipt = &receipts.items()[0];
    assert_eq!(receipt["state"], "ok", "{receipt}");
    assert!(
        receipt["output"] == long.as_str(),
        "the whole reply, {} bytes",
        long.len()
    );

    // Linked both ways: the parent's result names the child, the child its parent.
    let kids = children(&app, &t, &parent).await;
    assert_eq!(kids.len(), 1, "{kids:?}");
    let child = kids[0]["id"].as_str().expect("an id").to_string();
    assert_eq!(kids[0]["parent_run_id"], parent.as_str());
    assert_eq!(kids[0]["agent_id"], writer.as_str());
    let result = tool_result(&app, &t, &parent).await;
    assert_eq!(result["data"]["delegated_run"], child.as_str(), "{result}");
    let messages = app
        .get(&format!("/v1/runs/{child}/messages"), &t.owner)
        .await
        .expect_status(200);
    assert_eq!(messages.items()[0]["content"], "write it");
    let created_event = app
        .get(&format!("/v1/runs/{child}/events?limit=1"), &t.owner)
        .await
        .expect_status(200);
    let link = &created_event.body["events"][0]["data"]["parent"];
    assert_eq!(link["run_id"], parent.as_str(), "{link}");
    assert_eq!(link["depth"], 1, "{link}");
    assert_eq!(link["receipt_id"], receipt["id"], "{link}");
}

#[tokio::test]
async fn cancelling_a_parent_cancels_the_child_it_waits_on() {
    let (app, t) = TestApp::with_tenant().await;
    let slow = app
        .agent(&t.owner, json!([{"content": "late", "delay_ms": 60_000}]))
        .await;
    let tool = delegate_tool(&app, &t, "ask_slow", &slow).await;
    let lead = app.agent_with_tools(&t.owner, json!([{"tool_calls": [{"name": "ask_slow", "arguments": {"message": "take your time"}}]}]),
        &[&tool],
    )
    .await;
    let parent = app.run(&t.owner, &lead, Some("go")).await;
    let deadline = tokio::time::Instant::now() + crate::support::DEADLINE;
    let child = loop {
        if let Some(c) = children(&app, &t, &parent).await.first()
            && c["status"] == "running"
        {
            break c["id"].as_str().expect("an id").to_string();
        }
        assert!(tokio::time::Instant::now() < deadline, "no child ran");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    app.post(&format!("/v1/runs/{parent}/cancel"), &t.owner, json!({}))
        .await
        .expect_status(200);
    // The child was cancelled with the parent (its turn would take a minute).
    app.wait_run(&t.owner, &child, "cancelled").await;
    app.wait_run(&t.owner, &parent, "cancelled").await;
    // Another tenant sees no child under the run.
    let other = app.tenant().await;
    let theirs = app
        .get(&format!("/v1/runs?parent_run_id={parent}"), &other.owner)
        .await
        .expect_status(200);
    assert!(theirs.items().is_empty(), "{}", theirs.text);
    let bad = app.get("/v1/runs?parent_run_id=not-a-run", &t.owner).await;
    assert_problem(&bad, 400, "invalid_query");
}

#[tokio::test]
async fn a_chain_of_delegations_stops_at_its_depth_limit() {
    let (app, t) = TestApp::with_tenant().await;
    // An agent that delegates to itself: each run's first model call delegates again.
    let tool_body = |agent: &str| {
        json!({"name": "ask_again", "effect": "read", "timeout_ms": 60_000,
            "input_schema": {"type": "object"},
            "kind": {"kind": "delegate", "agent_id": agent}})
    };
    let placeholder = app.agent(&t.owner, json!([{"content": "x"}])).await;
    let tool = app
        .post("/v1/tools", &t.owner, tool_body(&placeholder))
        .await
        .expect_status(201)
        .str("/id");
    let looping = app
        .agent_with_tools(
            &t.owner,
            json!([
                {"tool_calls": [{"name": "ask_again", "arguments": {"message": "deeper"}}]},
                {"content": "bottom reached"}
            ]),
            &[&tool],
        )
        .await;
    app.put(&format!("/v1/tools/{tool}"), &t.owner, tool_body(&looping))
        .await
        .expect_status(200);

    // Runs at depths 1, 2 and 3 below the first; the third's call was refused.
    let mut run = completed_run(&app, &t, &looping).await;
    for depth in 1..=3 {
        let kids = children(&app, &t, &run).await;
        assert_eq!(kids.len(), 1, "depth {depth}: {kids:?}");
        run = kids[0]["id"].as_str().expect("an id").to_string();
    }
    assert!(children(&app, &t, &run).await.is_empty(), "nothing deeper");
    let receipts = app
        .get(&format!("/v1/runs/{run}/receipts"), &t.owner)
        .await
        .expect_status(200);
    let refused = &receipts.items()[0];
    assert_eq!(refused["error"]["code"], "delegation_refused", "{refused}");
    assert!(
        refused["output"]
            .as_str()
            .is_some_and(|o| o.contains("at most 3 runs deep")),
        "{refused}"
    );
}

#[tokio::test]
async fn a_delegate_tool_names_an_agent_of_its_tenant() {
    let (app, t) = TestApp::with_tenant().await;
    let other = app.tenant().await;
    let theirs = app.agent(&other.owner, json!([{"content": "x"}])).await;
    let body = json!({"name": "ask_them", "effect": "read", "input_schema": {"type": "object"},
        "kind": {"kind": "delegate", "agent_id": theirs}});
    let r = app.post("/v1/tools", &t.owner, body).await;
    let detail = assert_problem(&r, 400, "invalid_request");
    assert!(detail.contains("kind.agent_id"), "{detail}");
}

#[tokio::test]
async fn one_run_starts_at_most_twenty_children_even_in_one_step() {
    let (app, t) = TestApp::with_tenant().await;
    let helper = app.agent(&t.owner, json!([{"content": "ok"}])).await;
    let tool = delegate_tool(&app, &t, "ask", &helper).await;
    let calls: Vec<Value> = (0..21)
        .map(|i| json!({"name": "ask", "arguments": {"message": format!("part {i}")}}))
        .collect();
    let lead = app
        .agent_with_tools(
            &t.owner,
            json!([{"tool_calls": calls}, {"content": "done"}]),
            &[&tool],
        )
        .await;
    let parent = completed_run(&app, &t, &lead).await;
    let path = format!("/v1/runs?parent_run_id={parent}&limit=100");
    let kids = app.get(&path, &t.owner).await.expect_status(200);
    assert_eq!(kids.items().len(), 20, "{}", kids.text);
    let receipts = app
        .get(&format!("/v1/runs/{parent}/receipts?limit=100"), &t.owner)
        .await
        .expect_status(200);
    let refused: Vec<&Value> = receipts
        .items()
        .iter()
        .filter(|r| r["error"]["code"] == "delegation_refused")
        .collect();
    assert_eq!(refused.len(), 1, "{}", receipts.text);
    assert!(
        refused[0]["output"]
            .as_str()
            .is_some_and(|o| o.contains("at most 20 runs")),
        "{}",
        refused[0]
    );
}

#[tokio::test]
async fn a_delegation_that_times_out_names_the_child_that_goes_on() {
    let (app, t) = TestApp::with_tenant().await;
    let slow = app
        .agent(&t.owner, json!([{"content": "late", "delay_ms": 60_000}]))
        .await;
    let body = json!({"name": "ask_slow", "effect": "read", "timeout_ms": 300,
        "input_schema": {"type": "object"},
        "kind": {"kind": "delegate", "agent_id": slow}});
    let tool = app
        .post("/v1/tools", &t.owner, body)
        .await
        .expect_status(201)
        .str("/id");
    let lead = app.agent_with_tools(&t.owner, json!([{"tool_calls": [{"name": "ask_slow", "arguments": {}}]}, {"content": "moved on"}]),
        &[&tool],
    )
    .await;
    // The model is told of the timeout and answers: the turn completes.
    let parent = completed_run(&app, &t, &lead).await;
    let kids = children(&app, &t, &parent).await;
    assert_eq!(kids.len(), 1, "{kids:?}");
    assert_eq!(kids[0]["status"], "running", "the child goes on");
    let result = tool_result(&app, &t, &parent).await;
    assert_eq!(result["data"]["error"]["code"], "timeout", "{result}");
    assert_eq!(result["data"]["delegated_run"], kids[0]["id"], "{result}");
}

#[tokio::test]
async fn delegations_of_one_step_run_together() {
    let (app, t) = TestApp::with_tenant().await;
    let helper = app
        .agent(&t.owner, json!([{"content": "ok", "delay_ms": 1_500}]))
        .await;
    let tool = delegate_tool(&app, &t, "ask", &helper).await;
    let calls: Vec<Value> = ["one", "two"]
        .iter()
        .map(|m| json!({"name": "ask", "arguments": {"message": m}}))
        .collect();
    let lead = app
        .agent_with_tools(
            &t.owner,
            json!([{"tool_calls": calls}, {"content": "done"}]),
            &[&tool],
        )
        .await;
    let parent = completed_run(&app, &t, &lead).await;
    let kids = children(&app, &t, &parent).await;
    assert_eq!(kids.len(), 2, "{kids:?}");
    // Each child answered 1.5 s after it started: had they run one after the other, the
    // second would have been created 1.5 s or more after the first.
    let at = |k: &Value, field: &str| {
        chrono::DateTime::parse_from_rfc3339(k[field].as_str().expect("a time")).expect("a time")
    };
    let (first, second) = if at(&kids[0], "created_at") <= at(&kids[1], "created_at") {
        (&kids[0], &kids[1])
    } else {
        (&kids[1], &kids[0])
    };
    let apart = at(second, "created_at") - at(first, "created_at");
    assert!(
        apart < chrono::TimeDelta::seconds(1),
        "the second child started {apart} after the first: {kids:?}"
    );
}
