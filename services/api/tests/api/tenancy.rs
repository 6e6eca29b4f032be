//! A tenant never sees, nor learns of, another's records: they answer `404 not_found`,
//! exactly like ones that do not exist, never `403`.

use crate::support::{TestApp, assert_problem, scripted_agent};
use axum::http::StatusCode;
use serde_json::json;

#[tokio::test]
async fn another_tenants_run_agent_tool_secret_and_receipt_answer_404_and_stay_untouched() {
    let app = TestApp::new().await;
    let (a, b) = (app.tenant().await, app.tenant().await);
    let tool = app.tool(&a.owner, "lookup").await;
    let mut agent = scripted_agent(json!([
        {"tool_calls": [{"name": "lookup", "arguments": {}}]},
        {"content": "found it"}
    ]));
    agent["tools"] = json!([tool]);
    let agent = app.post("/v1/agents", &a.owner, agent).await.str("/id");
    let run = app.run(&a.owner, &agent, Some("look it up")).await;
    app.wait_run(&a.owner, &run, "requires_action").await;
    let receipts = app.get(&format!("/v1/runs/{run}/receipts"), &a.owner).await;
    let receipt = receipts.str("/items/0/id");
    app.put(
        "/v1/secrets/shop_token",
        &a.owner,
        json!({"value": "a's value"}),
    )
    .await
    .expect_status(200);

    for path in [
        format!("/v1/runs/{run}"),
        format!("/v1/runs/{run}/messages"),
        format!("/v1/runs/{run}/events"),
        format!("/v1/runs/{run}/receipts"),
        format!("/v1/runs/{run}/checkpoints"),
        format!("/v1/agents/{agent}"),
        format!("/v1/tools/{tool}"),
    ] {
        let r = app.get(&path, &b.owner).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "GET {path}: {}", r.text);
        assert_problem(&r, 404, "not_found");
    }
    let writes = [
        app.post(
            &format!("/v1/runs/{run}/messages"),
            &b.owner,
            json!({"content": "hi"}),
        )
        .await,
        app.post(&format!("/v1/runs/{run}/cancel"), &b.owner, json!({}))
            .await,
        app.post(
            &format!("/v1/runs/{run}/tool-outputs"),
            &b.owner,
            json!({"tool_outputs": [{"receipt_id": receipt, "output": "b's"}]}),
        )
        .await,
        app.post(
            &format!("/v1/runs/{run}/receipts/{receipt}/resolve"),
            &b.owner,
            json!({"resolution": "skip"}),
        )
        .await,
        app.put(
            &format!("/v1/agents/{agent}"),
            &b.owner,
            scripted_agent(json!([{"content": "b's"}])),
        )
        .await,
        app.post("/v1/runs", &b.owner, json!({"agent_id": agent}))
            .await,
        app.delete("/v1/secrets/shop_token", &b.owner).await,
    ];
    for r in &writes {
        assert_problem(r, 404, "not_found");
    }
    assert_eq!(app.get("/v1/secrets", &b.owner).await.items().len(), 0);

    // A's records are as they were.
    let summary = app.wait_run(&a.owner, &run, "requires_action").await;
    assert_eq!(summary["message_count"], 1);
    let receipts = app.get(&format!("/v1/runs/{run}/receipts"), &a.owner).await;
    assert_eq!(receipts.item_fields("state"), [json!("awaiting_client")]);
    let agent = app.get(&format!("/v1/agents/{agent}"), &a.owner).await;
    assert_eq!(agent.body["version"], 1);
    let secrets = app.get("/v1/secrets", &a.owner).await;
    assert_eq!(secrets.item_fields("name"), [json!("shop_token")]);
}
