//! Definitions that would call where the egress policy refuses are refused when made, with
//! `422 egress_denied` naming the field and the rule, and nothing is stored.

use crate::support::{TestApp, assert_problem};
use serde_json::json;

fn http_tool(url: &str) -> serde_json::Value {
    json!({"name": "lookup", "description": "d", "effect": "read",
           "input_schema": {"type": "object"}, "kind": {"kind": "http", "url": url}})
}

fn openai_agent(base_url: &str) -> serde_json::Value {
    json!({"name": "a", "provider": {"kind": "openai", "base_url": base_url, "model": "m"}})
}

#[tokio::test]
async fn a_tool_at_a_denied_address_is_refused_naming_the_rule() {
    let (app, t) = TestApp::with_tenant().await;
    for (url, rule) in [
        ("http://169.254.169.254/latest/meta-data/", "link-local"),
        ("http://[fd00:ec2::254]/", "private"),
        ("http://10.0.0.5/internal", "private"),
        ("http://user:pw@api.example.com/", "credentials in the URL"),
    ] {
        let r = app.post("/v1/tools", &t.owner, http_tool(url)).await;
        let detail = assert_problem(&r, 422, "egress_denied");
        assert!(
            detail.contains("kind.url") && detail.contains(rule),
            "{url}: {detail}"
        );
    }
    let listed = app.get("/v1/tools", &t.owner).await.expect_status(200);
    assert!(listed.items().is_empty(), "nothing was stored");
}

#[tokio::test]
async fn a_provider_base_url_is_checked_and_may_not_choose_the_path() {
    let (app, t) = TestApp::with_tenant().await;
    let r = app
        .post(
            "/v1/agents",
            &t.owner,
            openai_agent("http://192.168.1.10:8000/v1"),
        )
        .await;
    let detail = assert_problem(&r, 422, "egress_denied");
    assert!(
        detail.contains("provider.base_url") && detail.contains("private"),
        "{detail}"
    );
    for sneaky in [
        "https://api.example.com/v1?x=/admin#",
        "https://api.example.com/v1#frag",
    ] {
        let r = app.post("/v1/agents", &t.owner, openai_agent(sneaky)).await;
        let detail = assert_problem(&r, 400, "invalid_request");
        assert!(detail.contains("query or a fragment"), "{detail}");
    }
    // A public endpoint (or loopback, in the embedded tier's policy) is fine.
    app.post(
        "/v1/agents",
        &t.owner,
        openai_agent("https://api.example.com/v1"),
    )
    .await
    .expect_status(201);
}
