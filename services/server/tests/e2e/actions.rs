//! What a turn waits for, over HTTP with the local chat-completions server and tool
//! endpoints: approvals, client tools, concurrent reads, cancels during a model call and
//! during a tool call, and limits — each checked in the receipts the API lists.

use crate::common::{Api, TestApp, assert_problem};
use crate::tools::{http_tool, openai_agent};
use baton_testkit::chat::{ChatResponse, ChatServer, ScriptedChat};
use baton_testkit::{Behaviour, ToolServer};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

async fn receipts(api: &Api, run: &str) -> Vec<Value> {
    let r = api.get(&format!("/v1/runs/{run}/receipts")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["items"].as_array().cloned().unwrap_or_default()
}

fn states(receipts: &[Value]) -> Vec<String> {
    receipts
        .iter()
        .map(|r| r["state"].as_str().unwrap_or("").to_string())
        .collect()
}

/// Waits until the run's receipts reach `want` states.
async fn wait_states(api: &Api, run: &str, want: &[&str]) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let got = receipts(api, run).await;
        if states(&got) == want {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "receipts never {want:?}: {got:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn calls(list: &[(&str, &str)]) -> ChatResponse {
    let with_args: Vec<(String, String, String)> = list
        .iter()
        .enumerate()
        .map(|(i, (name, q))| {
            (
                format!("c{i}"),
                name.to_string(),
                json!({"q": q}).to_string(),
            )
        })
        .collect();
    ChatResponse::Reply(ScriptedChat::tool_calls(
        with_args
            .iter()
            .map(|(a, b, c)| (a.as_str(), b.as_str(), c.as_str()))
            .collect(),
    ))
}

#[tokio::test]
async fn approve_and_deny_over_http() {
    let app = TestApp::embedded().await;
    let api = app.anonymous();
    let (chat, tools) = (ChatServer::start().await, ToolServer::start().await);
    let r = api
        .post(
            "/v1/tools",
            json!({"name": "deploy", "input_schema": {}, "effect": "mutation",
                   "requires_approval": true,
                   "kind": {"kind": "http", "url": tools.url("deploy")}}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let deploy = r.body["id"].as_str().unwrap_or_default().to_string();
    let agent = openai_agent(&api, &chat, &[deploy]).await;
    chat.push(calls(&[("deploy", "prod")]));
    chat.push(calls(&[("deploy", "staging")]));
    chat.push(ChatResponse::text("one done, one refused"));
    let run = api.run(&agent, Some("ship it")).await;
    for (approve, settled) in [(true, "ok"), (false, "denied")] {
        let summary = api.wait_status(&run, "requires_action").await;
        assert_eq!(summary["pending_actions"], 1);
        let waiting = receipts(&api, &run).await.pop().unwrap_or(Value::Null);
        assert_eq!(waiting["state"], "awaiting_approval");
        let approval = waiting["approval_id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let decided = api
            .post(
                &format!("/v1/runs/{run}/approvals/{approval}"),
                json!({"approve": approve, "reason": "change freeze"}),
            )
            .await;
        assert_eq!(decided.status, 200, "{}", decided.body);
        let again = api
            .post(
                &format!("/v1/runs/{run}/approvals/{approval}"),
                json!({"approve": approve}),
            )
            .await;
        assert_problem(&again, 409, "wrong_state");
        // By id: once the call settles, the model's next reply may add a receipt.
        let id = waiting["id"].clone();
        let deadline = Instant::now() + Duration::from_secs(15);
        while receipts(&api, &run)
            .await
            .iter()
            .find(|r| r["id"] == id)
            .map(|r| r["state"].clone())
            != Some(json!(settled))
        {
            assert!(Instant::now() < deadline, "never {settled}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    api.wait_status(&run, "waiting").await;
    assert_eq!(tools.calls("deploy"), 1, "only the approved call ran");
    // The model was told about the denial.
    let last = chat.requests().pop().map(|r| r.body).unwrap_or(Value::Null);
    let told = last["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string();
    assert!(told.contains("change freeze"), "{told}");
    app.stop().await;
}

#[tokio::test]
async fn client_tools_and_concurrent_reads_over_http() {
    let app = TestApp::embedded().await;
    let api = app.anonymous();
    let (chat, tools) = (ChatServer::start().await, ToolServer::start().await);
    let r = api
        .post(
            "/v1/tools",
            json!({"name": "ask_user", "input_schema": {}, "effect": "read",
                   "kind": {"kind": "client"}}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let ask = r.body["id"].as_str().unwrap_or_default().to_string();
    let mut ids = vec![ask];
    for name in ["a", "b", "c"] {
        tools.set(
            name,
            Behaviour {
                delay: Duration::from_millis(300),
                ..Behaviour::default()
            },
        );
        ids.push(http_tool(&api, &tools, name, "read").await);
    }
    let agent = openai_agent(&api, &chat, &ids).await;
    chat.push(calls(&[("a", "1"), ("b", "2"), ("c", "3")]));
    chat.push(calls(&[("ask_user", "which file?")]));
    chat.push(ChatResponse::text("thanks"));
    let run = api.run(&agent, Some("go")).await;
    api.wait_status(&run, "requires_action").await;
    assert_eq!(tools.max_in_flight(), 3, "the three reads ran together");
    let got = wait_states(&api, &run, &["ok", "ok", "ok", "awaiting_client"]).await;
    let receipt = got[3]["id"].as_str().unwrap_or_default().to_string();
    let posted = api
        .post(
            &format!("/v1/runs/{run}/tool-outputs"),
            json!({"tool_outputs": [{"receipt_id": receipt, "output": "notes.txt"}]}),
        )
        .await;
    assert_eq!(posted.status, 200, "{}", posted.body);
    assert_eq!(posted.body["items"][0]["state"], "ok");
    api.wait_status(&run, "waiting").await;
    let unknown = api
        .post(
            &format!("/v1/runs/{run}/tool-outputs"),
            json!({"tool_outputs": [{"receipt_id": receipt, "output": "again"}]}),
        )
        .await;
    assert_problem(&unknown, 409, "wrong_state");
    app.stop().await;
}

#[tokio::test]
async fn cancel_during_a_model_call_and_during_a_tool_call_over_http() {
    let app = TestApp::embedded().await;
    let api = app.anonymous();
    let (chat, tools) = (ChatServer::start().await, ToolServer::start().await);
    tools.set(
        "transfer",
        Behaviour {
            delay: Duration::from_secs(30),
            ..Behaviour::default()
        },
    );
    let transfer = http_tool(&api, &tools, "transfer", "mutation").await;
    let agent = openai_agent(&api, &chat, &[transfer]).await;

    // A model call that would take 30 s.
    chat.push(ChatResponse::text("too late").delayed(30_000));
    let run = api.run(&agent, Some("hi")).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while chat.request_count() == 0 {
        assert!(Instant::now() < deadline, "the model was never called");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let started = Instant::now();
    let r = api.post(&format!("/v1/runs/{run}/cancel"), json!({})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    api.wait_status(&run, "cancelled").await;
    assert!(started.elapsed() < Duration::from_secs(5), "at once");

    // A mutation in flight: it may have taken effect, so it is held uncertain.
    chat.push(calls(&[("transfer", "100")]));
    let run = api.run(&agent, Some("pay")).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while tools.calls("transfer") == 0 {
        assert!(Instant::now() < deadline, "the tool was never called");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let started = Instant::now();
    let r = api.post(&format!("/v1/runs/{run}/cancel"), json!({})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    api.wait_status(&run, "cancelled").await;
    assert!(started.elapsed() < Duration::from_secs(5), "at once");
    assert_eq!(states(&receipts(&api, &run).await), ["uncertain"]);
    app.stop().await;
}

#[tokio::test]
async fn limits_over_http() {
    let app = TestApp::embedded().await;
    let api = app.anonymous();
    let (chat, tools) = (ChatServer::start().await, ToolServer::start().await);
    let lookup = http_tool(&api, &tools, "lookup", "read").await;
    let agent = openai_agent(&api, &chat, &[lookup]).await;
    // The agent allows 4 model calls per turn; the model keeps asking for the tool.
    for _ in 0..4 {
        chat.push(calls(&[("lookup", "again")]));
    }
    let run = api.run(&agent, Some("loop")).await;
    let r = api
        .wait_run(&run, "failed its turn", |r| r.get("last_error").is_some())
        .await;
    assert_eq!(r["last_error"]["code"], "step_limit", "{r}");
    assert_eq!(chat.request_count(), 4);
    assert_eq!(tools.calls("lookup"), 4);
    app.stop().await;
}
