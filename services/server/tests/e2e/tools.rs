//! Agent runs with a real model protocol and real tools, over HTTP: an `openai` agent
//! talks to the local chat-completions server and calls `http` tools on the local tool
//! endpoint, in both tiers.

use crate::common::{Api, TestApp, assert_problem};
use baton_core::Role;
use baton_testkit::ToolServer;
use baton_testkit::chat::{ChatResponse, ChatServer, ScriptedChat};
use serde_json::{Value, json};

/// Defines an `http` tool on `server` and returns its id.
pub async fn http_tool(api: &Api, server: &ToolServer, name: &str, effect: &str) -> String {
    let r = api
        .post(
            "/v1/tools",
            json!({
                "name": name,
                "description": format!("{name} things"),
                "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
                "effect": effect,
                "kind": {"kind": "http", "url": server.url(name)},
            }),
        )
        .await;
    assert_eq!(r.status, 201, "create tool: {}", r.body);
    r.body["id"].as_str().expect("tool id").to_string()
}

/// An `openai` agent on `chat` with these tools.
pub async fn openai_agent(api: &Api, chat: &ChatServer, tools: &[String]) -> String {
    let r = api
        .post(
            "/v1/agents",
            json!({
                "name": "assistant",
                "instructions": "Use the tools.",
                "provider": {"kind": "openai", "base_url": chat.base_url(), "model": "test-model",
                             "max_retries": 1, "retry_budget_ms": 5000},
                "tools": tools,
                "limits": {"max_steps": 4, "max_output_tokens": 256},
            }),
        )
        .await;
    assert_eq!(r.status, 201, "create agent: {}", r.body);
    r.body["id"].as_str().expect("agent id").to_string()
}

async fn a_read_and_a_mutation_then_an_answer(api: Api) {
    let chat = ChatServer::start().await;
    let tools = ToolServer::start().await;
    let lookup = http_tool(&api, &tools, "lookup", "read").await;
    let charge = http_tool(&api, &tools, "charge", "mutation").await;
    let agent = openai_agent(&api, &chat, &[lookup, charge]).await;
    chat.push(ChatResponse::Reply(ScriptedChat::tool_calls(vec![
        ("c1", "lookup", r#"{"q":"price"}"#),
        ("c2", "charge", r#"{"q":"card"}"#),
    ])));
    chat.push(ChatResponse::text("Charged you 3 euros."));
    let run = api.run(&agent, None).await;
    let mut stream = api.sse(&run, None).await.expect("stream");
    let posted = api.message(&run, "Buy it", None).await;
    assert_eq!(posted.status, 201, "{}", posted.body);
    let (durable, deltas) = read_turn(&mut stream).await;
    let done = api.wait_status(&run, "waiting").await;
    assert!(done.get("last_error").is_none(), "{done}");
    assert_eq!((tools.calls("lookup"), tools.calls("charge")), (1, 1));

    let receipts = api.get(&format!("/v1/runs/{run}/receipts")).await;
    assert_eq!(receipts.status, 200, "{}", receipts.body);
    let states: Vec<(&str, &str)> = receipts.body["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|r| {
            (
                r["tool"].as_str().unwrap_or(""),
                r["state"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(states, [("lookup", "ok"), ("charge", "ok")]);

    // The second model call saw the instructions, the user, the tool calls and both
    // outputs, in the OpenAI shape.
    let requests = chat.requests();
    assert_eq!(requests.len(), 2);
    let messages = requests[1].body["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let roles: Vec<&str> = messages.iter().filter_map(|m| m["role"].as_str()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "tool"]);
    assert_eq!(messages[3]["tool_call_id"], "c1");
    assert_eq!(requests[1].body["max_tokens"], 256);

    let last = api.messages(&run).await.pop().unwrap_or(Value::Null);
    assert_eq!(last["content"], "Charged you 3 euros.");
    // The reply streamed to the client as deltas; none of them was stored.
    let text: String = deltas
        .iter()
        .filter(|d| d["step"] == 2)
        .filter_map(|d| d["content"].as_str())
        .collect();
    assert_eq!(text, "Charged you 3 euros.");
    assert!(
        deltas
            .iter()
            .all(|d| d["attempt"] == 1 && d["run_id"] == run.as_str())
    );
    let events = api.events(&run).await;
    let stored_through_turn = events
        .iter()
        .position(|e| e["type"] == "turn.completed")
        .map(|i| i + 1);
    assert_eq!(
        stored_through_turn,
        Some(durable),
        "every stored event was streamed, and only those"
    );
    assert!(
        events.iter().all(|e| e["type"] != "message.delta"),
        "deltas are never stored"
    );
    let completed: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "model.completed")
        .collect();
    assert_eq!(completed.len(), 2, "one durable event per model reply");
    assert_eq!(completed[1]["data"]["content"], "Charged you 3 euros.");
    assert_eq!(completed[1]["data"]["usage"]["total_tokens"], 15);
}

/// Reads a run's SSE stream up to `turn.completed`: how many durable events came, and
/// the deltas.
async fn read_turn(stream: &mut baton_testkit::api::sse::Stream) -> (usize, Vec<Value>) {
    use baton_testkit::api::sse::{decode, decode_delta};
    use futures::StreamExt;
    let (mut durable, mut deltas) = (0, Vec::new());
    let read = async {
        while let Some(ev) = stream.next().await {
            let ev = ev.expect("well-formed SSE");
            if let Some(d) = decode_delta(&ev) {
                deltas.push(d);
            } else if let Some(frame) = decode(&ev) {
                durable += 1;
                if frame.event_type == "turn.completed" {
                    return;
                }
            }
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(20), read)
        .await
        .expect("the turn completes on the stream");
    (durable, deltas)
}

#[tokio::test]
async fn embedded_a_read_and_a_mutation_then_an_answer() {
    let app = TestApp::embedded().await;
    a_read_and_a_mutation_then_an_answer(app.anonymous()).await;
    app.stop().await;
}

#[tokio::test]
async fn team_a_read_and_a_mutation_then_an_answer() {
    let app = TestApp::team().await;
    let (_, owner) = app.tenant(Role::Owner).await;
    a_read_and_a_mutation_then_an_answer(owner).await;
    app.stop().await;
}

#[tokio::test]
async fn a_model_that_keeps_failing_fails_the_turn_with_its_code() {
    let app = TestApp::embedded().await;
    let api = app.anonymous();
    let chat = ChatServer::start().await;
    let agent = openai_agent(&api, &chat, &[]).await;
    chat.push(ChatResponse::status(400, "bad model name"));
    let run = api.run(&agent, Some("hi")).await;
    let r = api
        .wait_run(&run, "failed its turn", |r| r.get("last_error").is_some())
        .await;
    assert_eq!(r["last_error"]["code"], "model_rejected", "{r}");
    assert_eq!(r["status"], "waiting");
    app.stop().await;
}

#[tokio::test]
async fn tool_and_agent_definitions_are_checked() {
    let app = TestApp::embedded().await;
    let api = app.anonymous();
    let bad_schema = api
        .post(
            "/v1/tools",
            json!({"name": "x", "input_schema": {"type": 5}, "effect": "read",
                   "kind": {"kind": "client"}}),
        )
        .await;
    let msg = assert_problem(&bad_schema, 400, "invalid_request");
    assert!(msg.contains("input_schema"), "{msg}");
    let bad_effect = api
        .post(
            "/v1/tools",
            json!({"name": "x", "input_schema": {}, "effect": "delete", "kind": {"kind": "client"}}),
        )
        .await;
    assert_eq!(bad_effect.status, 400, "{}", bad_effect.body);
    let ok = api
        .post(
            "/v1/tools",
            json!({"name": "x", "input_schema": {}, "effect": "read", "kind": {"kind": "client"}}),
        )
        .await;
    assert_eq!(ok.status, 201, "{}", ok.body);
    let twice = api
        .post(
            "/v1/tools",
            json!({"name": "x", "input_schema": {}, "effect": "read", "kind": {"kind": "client"}}),
        )
        .await;
    assert_problem(&twice, 409, "already_exists");
    let unknown_tool = api
        .post(
            "/v1/agents",
            json!({"name": "a", "provider": {"kind": "scripted", "replies": [{"content": "hi"}]},
                   "tools": [uuid::Uuid::now_v7()]}),
        )
        .await;
    let msg = assert_problem(&unknown_tool, 400, "invalid_request");
    assert!(msg.contains("tools[0]"), "{msg}");
    let bad_url = api
        .post(
            "/v1/agents",
            json!({"name": "a", "provider": {"kind": "openai", "base_url": "ftp://x", "model": "m"}}),
        )
        .await;
    let msg = assert_problem(&bad_url, 400, "invalid_request");
    assert!(msg.contains("provider.base_url"), "{msg}");
    app.stop().await;
}

#[tokio::test]
async fn another_tenants_tools_and_receipts_answer_404() {
    let app = TestApp::team().await;
    let (_, a) = app.tenant(Role::Owner).await;
    let (_, b) = app.tenant(Role::Owner).await;
    let tools = ToolServer::start().await;
    let lookup = http_tool(&a, &tools, "lookup", "read").await;
    assert_problem(
        &b.get(&format!("/v1/tools/{lookup}")).await,
        404,
        "not_found",
    );
    let listed = b.get("/v1/tools").await;
    assert_eq!(listed.body["items"], json!([]));
    let agent = a.agent(&[("hi", 0, false)]).await;
    let run = a.run(&agent, None).await;
    assert_problem(
        &b.get(&format!("/v1/runs/{run}/receipts")).await,
        404,
        "not_found",
    );
    let approval = uuid::Uuid::now_v7();
    let decide = b
        .post(
            &format!("/v1/runs/{run}/approvals/{approval}"),
            json!({"approve": true}),
        )
        .await;
    assert_problem(&decide, 404, "not_found");
    // A viewer may read tools but not define them.
    let (_, viewer) = app.tenant(Role::Viewer).await;
    let refused = viewer
        .post(
            "/v1/tools",
            json!({"name": "x", "input_schema": {}, "effect": "read", "kind": {"kind": "client"}}),
        )
        .await;
    assert_problem(&refused, 403, "forbidden");
    app.stop().await;
}

#[tokio::test]
async fn a_turn_carries_the_callers_trace_context_on_every_event() {
    let app = TestApp::embedded().await;
    let api = app.anonymous();
    let tools = ToolServer::start().await;
    let lookup = http_tool(&api, &tools, "lookup", "read").await;
    let r = api
        .post(
            "/v1/agents",
            json!({"name": "a", "tools": [lookup], "provider": {"kind": "scripted", "replies": [
                {"tool_calls": [{"name": "lookup", "arguments": {"q": "x"}}]},
                {"content": "found it"}]}}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let agent = r.body["id"].as_str().unwrap_or_default().to_string();
    let run = api.run(&agent, None).await;
    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let posted = api
        .send(
            api.req(reqwest::Method::POST, &format!("/v1/runs/{run}/messages"))
                .header("traceparent", TP)
                .json(&json!({"content": "look it up"})),
        )
        .await;
    assert_eq!(posted.status, 201, "{}", posted.body);
    api.wait_status(&run, "waiting").await;
    let events = api.events(&run).await;
    let turn: Vec<(&str, &Value)> = events
        .iter()
        .skip_while(|e| e["type"] != "message.appended")
        .take_while(|e| e["type"] != "checkpoint.saved")
        .map(|e| (e["type"].as_str().unwrap_or(""), &e["meta"]["traceparent"]))
        .collect();
    assert!(turn.len() >= 8, "{turn:?}");
    for (t, tp) in &turn {
        assert_eq!(*tp, TP, "{t} carries the trace context");
    }
    // A malformed header is ignored, never stored.
    let bad = api
        .send(
            api.req(reqwest::Method::POST, &format!("/v1/runs/{run}/messages"))
                .header("traceparent", "not-a-trace")
                .json(&json!({"content": "again"})),
        )
        .await;
    assert_eq!(bad.status, 201, "{}", bad.body);
    let events = api.events(&run).await;
    let last_user = events
        .iter()
        .rev()
        .find(|e| e["type"] == "message.appended")
        .map(|e| e["meta"].get("traceparent").cloned());
    assert_eq!(last_user, Some(None));
    app.stop().await;
}
