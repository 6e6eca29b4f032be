//! A hostile tenant against the egress policy of the team tier, with a loopback listener
//! standing in for an internal service: a tool or provider URL that names it by address is
//! refused when defined; one that names it by a host name is refused when called, without
//! a connection; the refusal names the rule (never the address), reaches the tenant's
//! audit stream and is counted. A tenant's own allowlist narrows its calls from the next
//! turn, and listing a host the operator's policy refuses opens nothing.

use crate::common::TestApp;
use baton_testkit::ToolServer;
use serde_json::json;

/// A read tool named `name` calling `url`.
fn http_tool(name: &str, url: &str) -> serde_json::Value {
    json!({"name": name, "description": "d", "effect": "read",
           "input_schema": {"type": "object"}, "kind": {"kind": "http", "url": url}})
}

/// Sets the tenant's egress allowlist to `hosts`.
async fn allow(api: &baton_testkit::api::Api, hosts: &[&str]) {
    let set = api
        .send(
            api.req(reqwest::Method::PUT, "/v1/egress-allowlist")
                .json(&json!({ "hosts": hosts })),
        )
        .await;
    assert_eq!(set.status, 200, "{}", set.body);
}

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
        let r = api.post("/v1/tools", http_tool("probe", &url)).await;
        assert_eq!(r.status, 422, "{url}: {}", r.body);
        assert_eq!(r.body["code"], "egress_denied");
    }

    // By name: accepted when defined, refused at connect time, never connected.
    let by_name = format!("http://localhost:{port}/tools/secrets");
    let tool = api.post("/v1/tools", http_tool("probe", &by_name)).await;
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
    let audit = api.get("/v1/audit?action=egress.denied").await;
    let entry = &audit.body["items"][0];
    assert_eq!(entry["target"], "localhost", "{entry}");
    assert_eq!(entry["details"]["provider"], "openai", "{entry}");
    assert_eq!(entry["details"]["rule"], "loopback", "{entry}");
    assert_eq!(entry["details"]["run"], run.as_str(), "{entry}");
}

/// Each turn of the run calls the tool once, then answers.
fn calling_agent(tool: &serde_json::Value) -> serde_json::Value {
    let turn = [
        json!({"tool_calls": [{"name": "lookup", "arguments": {}}]}),
        json!({"content": "done"}),
    ];
    let replies: Vec<serde_json::Value> = [turn.clone(), turn.clone(), turn].concat();
    json!({"name": "caller", "tools": [tool["id"]],
           "provider": {"kind": "scripted", "replies": replies}})
}

#[tokio::test]
async fn a_tenants_allowlist_narrows_its_calls_from_the_next_turn_and_never_widens_them() {
    let service = ToolServer::start().await;
    // The team tier with loopback allowed by the operator, as for an internal service.
    let app = TestApp::team().await;
    let (_, api) = app.tenant(baton_core::Role::Admin).await;
    let tool = api
        .post("/v1/tools", http_tool("lookup", &service.url("lookup")))
        .await;
    assert_eq!(tool.status, 201, "{}", tool.body);
    let agent = api.post("/v1/agents", calling_agent(&tool.body)).await;
    assert_eq!(agent.status, 201, "{}", agent.body);
    let run = api
        .run(agent.body["id"].as_str().expect("agent id"), Some("one"))
        .await;
    let turns_done =
        |n: i64| move |r: &serde_json::Value| r["turn_count"] == n && r["status"] == "waiting";
    api.wait_run(&run, "after turn 1", turns_done(1)).await;
    assert_eq!(service.calls("lookup"), 1);

    // Another host only: the tool, defined before, is refused from the next turn.
    allow(&api, &["api.example.com"]).await;
    api.message_when_idle(&run, "two").await;
    api.wait_run(&run, "after turn 2", turns_done(2)).await;
    assert_eq!(
        service.calls("lookup"),
        1,
        "a call outside the allowlist went out"
    );
    let receipts = api.get(&format!("/v1/runs/{run}/receipts")).await;
    let refused = &receipts.body["items"][1];
    assert_eq!(refused["error"]["code"], "egress_denied", "{refused}");
    assert!(
        refused
            .to_string()
            .contains("not in the tenant's egress allowlist"),
        "{refused}"
    );
    let audit = api.get("/v1/audit?action=egress.denied").await;
    assert_eq!(
        audit.body["items"][0]["details"]["rule"],
        "not in the tenant's egress allowlist"
    );

    // Its address range listed: the calls go out again.
    allow(&api, &["127.0.0.0/8"]).await;
    api.message_when_idle(&run, "three").await;
    api.wait_run(&run, "after turn 3", turns_done(3)).await;
    assert_eq!(service.calls("lookup"), 2);
    app.stop().await;

    // Under the strict policy, listing loopback gains a tenant nothing.
    let strict = TestApp::team_with(&baton_testkit::replicas::nats_url(), |c| {
        c.egress.allow.clear();
    })
    .await;
    let (_, api) = strict.tenant(baton_core::Role::Admin).await;
    allow(&api, &["127.0.0.1", "localhost"]).await;
    let r = api
        .post("/v1/tools", http_tool("lookup", &service.url("lookup")))
        .await;
    assert_eq!(r.status, 422, "{}", r.body);
    assert!(
        r.body["detail"].to_string().contains("loopback"),
        "{}",
        r.body
    );
    strict.stop().await;
}
