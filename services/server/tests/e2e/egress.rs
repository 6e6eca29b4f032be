//! A hostile tenant against the egress policy of the team tier, with a loopback listener
//! standing in for an internal service: a tool or provider URL that names it by address is
//! refused when defined; one that names it by a host name is refused when called, without
//! a connection; the refusal names the rule (never the address), reaches the tenant's
//! audit stream and is counted.

use crate::common::TestApp;
use baton_testkit::ToolServer;
use serde_json::json;

#[tokio::test]
async fn a_tenant_reaches_no_internal_service_through_a_tool_or_a_provider() {
    let internal = ToolServer::start().await;
    let port = internal
        .url("x")
        .split(':')
        .nth(2)
        .and_then(|p| p.split('/').next())
        .map(str::to_owned)
        .expect("port");
    let app = TestApp::team_with(&baton_testkit::replicas::nats_url(), |c| {
        // The team tier's default: no allowlist.
        c.egress.allow.clear();
    })
    .await;
    let (_, api) = app.tenant(baton_core::Role::Admin).await;

    // By address, in several spellings: refused when defined, naming the rule.
    for url in [
        format!("http://127.0.0.1:{port}/tools/secrets"),
        format!("http://2130706433:{port}/tools/secrets"),
        format!("http://[::ffff:127.0.0.1]:{port}/tools/secrets"),
        "http://169.254.169.254/latest/meta-data/".to_string(),
    ] {
        let r = api
            .post(
                "/v1/tools",
                json!({"name": "probe", "description": "d", "effect": "read",
                       "input_schema": {"type": "object"}, "kind": {"kind": "http", "url": url}}),
            )
            .await;
        assert_eq!(r.status, 422, "{url}: {}", r.body);
        assert_eq!(r.body["code"], "egress_denied");
    }

    // By name: accepted when defined, refused at connect time, never connected.
    let tool = api
        .post(
            "/v1/tools",
            json!({"name": "probe", "description": "d", "effect": "read",
                   "input_schema": {"type": "object"},
                   "kind": {"kind": "http", "url": format!("http://localhost:{port}/tools/secrets")}}),
        )
        .await;
    assert_eq!(tool.status, 201, "{}", tool.body);
    let agent = api
        .post(
            "/v1/agents",
            json!({"name": "prober", "tools": [tool.body["id"]],
                   "provider": {"kind": "scripted", "replies": [
                       {"tool_calls": [{"name": "probe", "arguments": {}}]},
                       {"content": "done"}]}}),
        )
        .await;
    assert_eq!(agent.status, 201, "{}", agent.body);
    let run = api
        .run(agent.body["id"].as_str().expect("agent id"), Some("go"))
        .await;
    api.wait_status(&run, "waiting").await;
    let receipts = api.get(&format!("/v1/runs/{run}/receipts")).await;
    let receipt = &receipts.body["items"][0];
    assert_eq!(receipt["error"]["code"], "egress_denied", "{receipt}");
    let shown = receipt.to_string();
    assert!(
        shown.contains("loopback") && !shown.contains("127.0.0.1"),
        "{shown}"
    );
    assert_eq!(
        internal.calls("secrets"),
        0,
        "the internal service was reached"
    );

    // The refusal is in the tenant's audit stream, without the address.
    let audit = api.get("/v1/audit?action=egress.denied").await;
    let entry = &audit.body["items"][0];
    assert_eq!(entry["actor"], "engine");
    assert_eq!(entry["target"], "localhost");
    assert_eq!(entry["details"]["rule"], "loopback");
    assert_eq!(entry["details"]["tool"], "probe");

    // A model provider named by host: the run fails, saying why, and nothing is called.
    let agent = api
        .post(
            "/v1/agents",
            json!({"name": "model", "provider": {"kind": "openai",
                   "base_url": format!("http://localhost:{port}/tools"), "model": "m",
                   "max_retries": 0}}),
        )
        .await;
    assert_eq!(agent.status, 201, "{}", agent.body);
    let run = api
        .run(agent.body["id"].as_str().expect("agent id"), Some("hi"))
        .await;
    let failed = api.wait_status(&run, "waiting").await;
    assert_eq!(failed["last_error"]["code"], "egress_denied", "{failed}");
    assert_eq!(internal.calls("chat"), 0);
}
