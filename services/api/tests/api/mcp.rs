//! `/v1/mcp-servers` against real MCP servers written with the official Python SDK
//! (`services/server/tests/mcp/server.py`, started per test on loopback), in each of the
//! transports it offers: discovery, enabling with Baton's own effect, calls of a read, a
//! mutation, a tool that streams progress and one that fails, a server that requires a
//! bearer secret, a tool list that changes between discoveries, the egress policy at
//! definition and at call time, and a cancel during a slow call.

use crate::support::{Tenant, TestApp, assert_problem};
use baton_testkit::{McpMode, McpOptions, McpTestServer};
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

async fn mcp(mode: McpMode, bearer: Option<&str>) -> Option<McpTestServer> {
    let options = McpOptions {
        bearer: bearer.map(str::to_string),
        mode,
        ..McpOptions::default()
    };
    McpTestServer::start(Path::new(ROOT), options).await
}

/// Registers `url` as MCP server `name`; its id.
async fn server(app: &TestApp, t: &Tenant, name: &str, url: &str, extra: Value) -> String {
    let mut body = json!({"name": name, "url": url, "timeout_ms": 20_000});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    app.post("/v1/mcp-servers", &t.owner, body)
        .await
        .expect_status(201)
        .str("/id")
}

async fn discover(app: &TestApp, t: &Tenant, id: &str) -> Value {
    app.post(
        &format!("/v1/mcp-servers/{id}/discover"),
        &t.owner,
        json!({}),
    )
    .await
    .expect_status(200)
    .body
}

/// Enables server tool `name` with `how`; the Baton tool.
async fn enable(app: &TestApp, t: &Tenant, id: &str, name: &str, how: Value) -> Value {
    app.post(
        &format!("/v1/mcp-servers/{id}/tools/{name}/enable"),
        &t.owner,
        how,
    )
    .await
    .expect_status(200)
    .body
}

/// The server's tools, by name: status and Baton tool id.
async fn tool_states(app: &TestApp, t: &Tenant, id: &str) -> Vec<(String, String)> {
    let r = app
        .get(&format!("/v1/mcp-servers/{id}/tools"), &t.owner)
        .await
        .expect_status(200);
    let mut states: Vec<(String, String)> = r.body["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap_or_default().to_string(),
                t["status"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    states.sort();
    states
}

/// A test server in `mode` registered in a new tenant as "local" and discovered once;
/// `None` where the MCP test server is skipped.
async fn discovered(mode: McpMode) -> Option<(McpTestServer, TestApp, Tenant, String)> {
    let srv = mcp(mode, None).await?;
    let (app, t) = TestApp::with_tenant().await;
    let id = server(&app, &t, "local", &srv.url(), json!({})).await;
    discover(&app, &t, &id).await;
    Some((srv, app, t, id))
}

/// The data of the run's `tool.result` events, in order.
async fn results(app: &TestApp, t: &Tenant, run: &str) -> Vec<Value> {
    let results = app.events_of(&t.owner, run, "tool.result").await;
    results.into_iter().map(|e| e["data"].clone()).collect()
}

/// A run of a new agent that calls `tool` (the Baton tool `tool_id`) once with
/// `arguments` and then says "done", waited for; the run's `tool.result` events.
async fn call_once(
    app: &TestApp,
    t: &Tenant,
    tool_id: &str,
    tool: &str,
    arguments: Value,
) -> Vec<Value> {
    let agent = app
        .agent_with_tools(
            &t.owner,
            json!([
                {"tool_calls": [{"name": tool, "arguments": arguments}]},
                {"content": "done"}
            ]),
            &[tool_id],
        )
        .await;
    let created = app
        .run_waiting(&t.owner, &agent, "go", 30)
        .await
        .expect_status(201);
    results(app, t, &created.str("/run/id")).await
}

fn names(v: &Value) -> Vec<String> {
    let mut n: Vec<String> = v
        .as_array()
        .expect("names")
        .iter()
        .map(|s| s.as_str().unwrap_or_default().to_string())
        .collect();
    n.sort();
    n
}

/// Discovery, enabling and one run calling a read, a mutation whose annotations lie, a
/// tool reporting progress and a failing tool, through a server in `mode`, which must
/// agree on `version`.
async fn tools_work_through(mode: McpMode, version: &str) {
    let Some(srv) = mcp(mode, None).await else {
        return;
    };
    let (app, t) = TestApp::with_tenant().await;
    let id = server(&app, &t, "local", &srv.url(), json!({})).await;
    let found = discover(&app, &t, &id).await;
    assert_eq!(found["discovery"]["number"], 1);
    assert_eq!(found["discovery"]["protocol_version"], version, "{found}");
    assert_eq!(found["discovery"]["server_info"]["name"], "baton-test-mcp");
    let all = [
        "ask_client",
        "count_to",
        "fail",
        "increment",
        "lookup",
        "slow",
    ];
    assert_eq!(names(&found["changes"]["added"]), all);
    let increment = found["discovery"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .find(|t| t["name"] == "increment")
        .expect("increment listed");
    assert_eq!(
        increment["annotations"]["readOnlyHint"], true,
        "the server claims it reads"
    );
    assert!(
        tool_states(&app, &t, &id)
            .await
            .iter()
            .all(|(_, s)| s == "available"),
        "nothing is enabled by a discovery"
    );

    let lookup = enable(&app, &t, &id, "lookup", json!({"effect": "read"})).await;
    assert_eq!(lookup["kind"]["kind"], "mcp");
    assert_eq!(lookup["effect"], "read");
    // The admin's default, whatever the annotations say.
    let increment = enable(&app, &t, &id, "increment", json!({})).await;
    assert_eq!(increment["effect"], "mutation");
    assert_eq!(increment["requires_approval"], false);
    let count_to = enable(&app, &t, &id, "count_to", json!({"effect": "read"})).await;
    let fail = enable(&app, &t, &id, "fail", json!({"name": "fail_loudly"})).await;
    let ids: Vec<String> = [&lookup, &increment, &count_to, &fail]
        .iter()
        .map(|t| t["id"].as_str().expect("tool id").to_string())
        .collect();
    let agent = app
        .agent_with_tools(
            &t.owner,
            json!([
                {"tool_calls": [{"name": "lookup", "arguments": {"key": "a"}}]},
                {"tool_calls": [{"name": "increment", "arguments": {"by": 2}}]},
                {"tool_calls": [{"name": "count_to", "arguments": {"n": 3}}]},
                {"tool_calls": [{"name": "fail_loudly", "arguments": {"reason": "boom"}}]},
                {"content": "done"}
            ]),
            &ids.iter().map(String::as_str).collect::<Vec<_>>(),
        )
        .await;
    let created = app
        .run_waiting(&t.owner, &agent, "go", 30)
        .await
        .expect_status(201);
    assert_eq!(
        created.body["result"]["outcome"], "completed",
        "{}",
        created.text
    );
    let run = created.str("/run/id");
    let results = results(&app, &t, &run).await;
    let outputs: Vec<(&str, &str)> = results
        .iter()
        .map(|r| {
            (
                r["outcome"].as_str().unwrap_or_default(),
                r["output"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(outputs[0], ("ok", "value of a"), "{results:?}");
    assert_eq!(outputs[1].0, "ok");
    assert!(outputs[1].1.contains("\"count\""), "{results:?}");
    assert_eq!(outputs[2], ("ok", "counted to 3"), "{results:?}");
    assert_eq!(outputs[3].0, "error");
    assert!(outputs[3].1.contains("boom"), "{results:?}");
    assert_eq!(results[3]["error"]["code"], "tool_error");

    // The mutation was made once, with its receipt id as the idempotency key both ways.
    assert_eq!(srv.counter(), 2);
    let receipt = results[1]["receipt_id"].as_str().expect("receipt id");
    let made: Vec<_> = srv
        .executions()
        .into_iter()
        .filter(|e| e.tool == "increment" && e.event == "started")
        .collect();
    assert_eq!(made.len(), 1, "{made:?}");
    assert_eq!(made[0].idempotency_key_meta.as_deref(), Some(receipt));
    assert_eq!(made[0].idempotency_key_header.as_deref(), Some(receipt));
    assert_eq!(made[0].protocol_version.as_deref(), Some(version));
    let receipts = app
        .get(&format!("/v1/runs/{run}/receipts"), &t.owner)
        .await
        .expect_status(200);
    let kinds: Vec<&Value> = receipts.items().iter().map(|r| &r["kind"]).collect();
    assert!(kinds.iter().all(|k| *k == "mcp"), "{kinds:?}");
}

#[tokio::test]
async fn tools_work_through_a_stateful_streamable_http_server() {
    tools_work_through(McpMode::Legacy, "2025-06-18").await;
}

#[tokio::test]
async fn tools_work_through_a_server_of_the_stateless_revision() {
    tools_work_through(McpMode::Modern, "2026-07-28").await;
}

#[tokio::test]
async fn tools_work_through_a_stateless_handshake_server() {
    tools_work_through(McpMode::Stateless, "2025-06-18").await;
}

#[tokio::test]
async fn tools_work_through_a_server_answering_json() {
    tools_work_through(McpMode::Json, "2025-06-18").await;
}

#[tokio::test]
async fn a_server_asking_during_a_call_is_answered_a_ping_and_refused_the_rest() {
    let Some((_srv, app, t, id)) = discovered(McpMode::Legacy).await else {
        return;
    };
    let ask = enable(&app, &t, &id, "ask_client", json!({"effect": "read"})).await;
    let ask = ask["id"].as_str().expect("id");
    for (what, said) in [("ping", "answered"), ("roots", "refused -32601")] {
        let results = call_once(&app, &t, ask, "ask_client", json!({"what": what})).await;
        assert_eq!(
            (
                results[0]["outcome"].as_str(),
                results[0]["output"].as_str()
            ),
            (Some("ok"), Some(said)),
            "{results:?}"
        );
    }
}

#[tokio::test]
async fn a_changed_tool_list_is_shown_and_a_changed_tool_waits_for_acceptance() {
    let Some((srv, app, t, id)) = discovered(McpMode::Legacy).await else {
        return;
    };
    let lookup = enable(&app, &t, &id, "lookup", json!({"effect": "read"})).await;
    let tool = lookup["id"].as_str().expect("id").to_string();
    srv.set_variant(2);
    let second = discover(&app, &t, &id).await;
    assert_eq!(second["discovery"]["number"], 2);
    assert_eq!(names(&second["changes"]["added"]), ["extra"]);
    assert_eq!(names(&second["changes"]["removed"]), ["fail"]);
    assert_eq!(names(&second["changes"]["changed"]), ["lookup"]);
    let states = tool_states(&app, &t, &id).await;
    assert!(
        states.contains(&("lookup".into(), "changed".into())),
        "{states:?}"
    );
    assert!(states.contains(&("extra".into(), "available".into())));
    assert!(!states.iter().any(|(n, _)| n == "fail"), "{states:?}");
    // Agents keep the definition that was accepted.
    let kept = app
        .get(&format!("/v1/tools/{tool}"), &t.owner)
        .await
        .expect_status(200);
    assert_eq!(kept.body["version"], 1);
    assert!(
        kept.body["input_schema"]["properties"]
            .get("scope")
            .is_none(),
        "{}",
        kept.text
    );
    // Enabling it again accepts the change, as the tool's next version.
    let accepted = enable(&app, &t, &id, "lookup", json!({"effect": "read"})).await;
    assert_eq!(accepted["id"], tool.as_str());
    assert_eq!(accepted["version"], 2);
    assert!(
        accepted["input_schema"]["properties"]
            .get("scope")
            .is_some()
    );
    let states = tool_states(&app, &t, &id).await;
    assert!(states.contains(&("lookup".into(), "enabled".into())));
}

#[tokio::test]
async fn a_server_requiring_a_bearer_secret_gets_it_from_the_tenants_secrets() {
    let token = "t0k-9f2e";
    let Some(srv) = mcp(McpMode::Modern, Some(token)).await else {
        return;
    };
    let (app, t) = TestApp::with_tenant().await;
    let id = server(&app, &t, "guarded", &srv.url(), json!({})).await;
    let r = app
        .post(
            &format!("/v1/mcp-servers/{id}/discover"),
            &t.owner,
            json!({}),
        )
        .await;
    let detail = assert_problem(&r, 502, "upstream_failed");
    assert!(detail.contains("credentials"), "{detail}");
    let headers = json!({"secret_headers": [{"header": "Authorization", "secret": "mcp_token"}]});
    let body =
        json!({"name": "guarded", "url": srv.url(), "secret_headers": headers["secret_headers"]});
    app.put(&format!("/v1/mcp-servers/{id}"), &t.owner, body.clone())
        .await
        .expect_status(200);
    // The secret is not set yet.
    let r = app
        .post(
            &format!("/v1/mcp-servers/{id}/discover"),
            &t.owner,
            json!({}),
        )
        .await;
    assert_problem(&r, 400, "invalid_request");
    app.put(
        "/v1/secrets/mcp_token",
        &t.owner,
        json!({"value": format!("Bearer {token}")}),
    )
    .await
    .expect_status(200);
    discover(&app, &t, &id).await;
    let lookup = enable(&app, &t, &id, "lookup", json!({"effect": "read"})).await;
    let lookup = lookup["id"].as_str().expect("id");
    let results = call_once(&app, &t, lookup, "lookup", json!({"key": "k"})).await;
    assert_eq!(results[0]["output"], "value of k", "{results:?}");
    let shown = app
        .get(&format!("/v1/mcp-servers/{id}"), &t.owner)
        .await
        .expect_status(200);
    assert!(!shown.text.contains(token), "{}", shown.text);
}

#[tokio::test]
async fn a_denied_address_is_refused_at_definition_and_at_call_time() {
    let (app, t) = TestApp::with_tenant().await;
    for url in [
        "http://169.254.169.254/mcp",
        "http://10.0.0.5/mcp",
        "http://[fd00:ec2::254]/mcp",
    ] {
        let r = app
            .post(
                "/v1/mcp-servers",
                &t.owner,
                json!({"name": "meta", "url": url}),
            )
            .await;
        let detail = assert_problem(&r, 422, "egress_denied");
        assert!(detail.contains("url"), "{url}: {detail}");
    }
    let listed = app
        .get("/v1/mcp-servers", &t.owner)
        .await
        .expect_status(200);
    assert!(listed.items().is_empty(), "nothing was stored");

    let Some(srv) = mcp(McpMode::Legacy, None).await else {
        return;
    };
    let id = server(&app, &t, "local", &srv.url(), json!({})).await;
    discover(&app, &t, &id).await;
    let lookup = enable(&app, &t, &id, "lookup", json!({"effect": "read"})).await;
    // The tenant narrows its egress to a host the server is not on.
    app.put(
        "/v1/egress-allowlist",
        &t.owner,
        json!({"hosts": ["api.example.com"]}),
    )
    .await
    .expect_status(200);
    let r = app
        .post(
            &format!("/v1/mcp-servers/{id}/discover"),
            &t.owner,
            json!({}),
        )
        .await;
    assert_problem(&r, 422, "egress_denied");
    let lookup = lookup["id"].as_str().expect("id");
    let results = call_once(&app, &t, lookup, "lookup", json!({"key": "k"})).await;
    assert_eq!(results[0]["error"]["code"], "egress_denied", "{results:?}");
    assert!(srv.executions().is_empty(), "nothing reached the server");
}

#[tokio::test]
async fn definitions_roles_and_tenants_are_checked() {
    let (app, t) = TestApp::with_tenant().await;
    for (body, says) in [
        (
            json!({"name": "bad name", "url": "http://127.0.0.1:9/mcp"}),
            "name",
        ),
        (json!({"name": "ok", "url": "ftp://127.0.0.1/mcp"}), "url"),
        (
            json!({"name": "ok", "url": "http://127.0.0.1:9/mcp", "timeout_ms": 0}),
            "timeout_ms",
        ),
        (
            json!({"name": "ok", "url": "http://127.0.0.1:9/mcp",
                   "secret_headers": [{"header": "Mcp-Session-Id", "secret": "s"}]}),
            "secret_headers[0].header",
        ),
        (
            json!({"name": "ok", "url": "http://127.0.0.1:9/mcp",
                   "oauth": {"client_id": "c", "client_secret": "not a name"}}),
            "oauth.client_secret",
        ),
        (
            json!({"name": "ok", "url": "http://127.0.0.1:9/mcp",
                   "oauth": {"client_id": "c", "client_secret": "s"},
                   "secret_headers": [{"header": "Authorization", "secret": "s"}]}),
            "Authorization",
        ),
    ] {
        let r = app.post("/v1/mcp-servers", &t.owner, body).await;
        let detail = assert_problem(&r, 400, "invalid_request");
        assert!(detail.contains(says), "{says}: {detail}");
    }
    // An mcp tool is made by enabling, never by hand.
    let r = app
        .post(
            "/v1/tools",
            &t.owner,
            json!({"name": "x", "effect": "read", "input_schema": {"type": "object"},
                   "kind": {"kind": "mcp", "server_id": uuid::Uuid::now_v7(), "tool": "x"}}),
        )
        .await;
    assert_problem(&r, 400, "invalid_request");

    let id = server(&app, &t, "s", "http://127.0.0.1:9/mcp", json!({})).await;
    let r = app
        .post(
            "/v1/mcp-servers",
            &t.owner,
            json!({"name": "s", "url": "http://127.0.0.1:9/mcp"}),
        )
        .await;
    assert_problem(&r, 409, "already_exists");
    // Nothing listens there.
    let r = app
        .post(
            &format!("/v1/mcp-servers/{id}/discover"),
            &t.owner,
            json!({}),
        )
        .await;
    assert_problem(&r, 502, "upstream_failed");
    let r = app
        .post(
            &format!("/v1/mcp-servers/{id}/tools/lookup/enable"),
            &t.owner,
            json!({}),
        )
        .await;
    assert_problem(&r, 404, "not_found");

    let viewer = app.key(t.id, baton_core::Role::Viewer).await;
    let member = app.key(t.id, baton_core::Role::Member).await;
    app.get(&format!("/v1/mcp-servers/{id}"), &viewer)
        .await
        .expect_status(200);
    let r = app
        .post(
            &format!("/v1/mcp-servers/{id}/discover"),
            &viewer,
            json!({}),
        )
        .await;
    assert_problem(&r, 403, "forbidden");
    // A member may discover (here: the server is down), not register or enable.
    let r = app
        .post(
            &format!("/v1/mcp-servers/{id}/discover"),
            &member,
            json!({}),
        )
        .await;
    assert_problem(&r, 502, "upstream_failed");
    let r = app
        .post(
            "/v1/mcp-servers",
            &member,
            json!({"name": "m", "url": "http://127.0.0.1:9/mcp"}),
        )
        .await;
    assert_problem(&r, 403, "forbidden");

    // Another tenant sees nothing of it.
    let other = app.tenant().await;
    for path in [
        format!("/v1/mcp-servers/{id}"),
        format!("/v1/mcp-servers/{id}/tools"),
    ] {
        let r = app.get(&path, &other.owner).await;
        assert_problem(&r, 404, "not_found");
    }
    let r = app
        .post(
            &format!("/v1/mcp-servers/{id}/discover"),
            &other.owner,
            json!({}),
        )
        .await;
    assert_problem(&r, 404, "not_found");
    assert_eq!(
        app.delete(&format!("/v1/mcp-servers/{id}"), &other.owner)
            .await
            .status,
        404
    );
    assert_eq!(
        app.delete(&format!("/v1/mcp-servers/{id}"), &t.owner)
            .await
            .status,
        204
    );
}

#[tokio::test]
async fn a_server_with_enabled_tools_is_not_deleted() {
    let Some((_srv, app, t, id)) = discovered(McpMode::Legacy).await else {
        return;
    };
    let lookup = enable(&app, &t, &id, "lookup", json!({"effect": "read"})).await;
    let r = app.delete(&format!("/v1/mcp-servers/{id}"), &t.owner).await;
    let detail = assert_problem(&r, 409, "in_use");
    assert!(detail.contains("lookup"), "{detail}");
    let tool = lookup["id"].as_str().expect("id");
    app.post(&format!("/v1/tools/{tool}/archive"), &t.owner, json!({}))
        .await
        .expect_status(200);
    assert_eq!(
        app.delete(&format!("/v1/tools/{tool}"), &t.owner)
            .await
            .status,
        204
    );
    assert_eq!(
        app.delete(&format!("/v1/mcp-servers/{id}"), &t.owner)
            .await
            .status,
        204
    );
}

/// A cancel while a slow call runs ends the turn at once and tells the server.
async fn cancel_reaches_the_server(mode: McpMode) {
    let Some((srv, app, t, id)) = discovered(mode).await else {
        return;
    };
    let slow = enable(
        &app,
        &t,
        &id,
        "slow",
        json!({"effect": "read", "timeout_ms": 60_000}),
    )
    .await;
    let agent = app
        .agent_with_tools(
            &t.owner,
            json!([
                {"tool_calls": [{"name": "slow", "arguments": {"seconds": 30}}]},
                {"content": "done"}
            ]),
            &[slow["id"].as_str().expect("id")],
        )
        .await;
    let run = app.run(&t.owner, &agent, Some("go")).await;
    srv.wait_for_executions("slow started", Duration::from_secs(10), |e| {
        e.iter().any(|x| x.tool == "slow" && x.event == "started")
    })
    .await;
    let asked = Instant::now();
    app.post(&format!("/v1/runs/{run}/cancel"), &t.owner, json!({}))
        .await
        .expect_status(200);
    app.wait_run(&t.owner, &run, "cancelled").await;
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "the turn ended {:?} after the cancel",
        asked.elapsed()
    );
    srv.wait_for_executions("slow cancelled", Duration::from_secs(5), |e| {
        e.iter().any(|x| x.tool == "slow" && x.event == "cancelled")
    })
    .await;
}

#[tokio::test]
async fn a_cancel_during_a_slow_call_sends_the_protocols_cancellation() {
    cancel_reaches_the_server(McpMode::Legacy).await;
}

#[tokio::test]
async fn a_call_that_times_out_does_not_keep_running_at_the_server() {
    let Some((srv, app, t, id)) = discovered(McpMode::Legacy).await else {
        return;
    };
    // A mutation, so it is tried once and held uncertain, not retried.
    let slow = enable(&app, &t, &id, "slow", json!({"timeout_ms": 500})).await;
    let slow = slow["id"].as_str().expect("id");
    call_once(&app, &t, slow, "slow", json!({"seconds": 30})).await;
    srv.wait_for_executions("slow cancelled", Duration::from_secs(10), |e| {
        e.iter().any(|x| x.tool == "slow" && x.event == "cancelled")
    })
    .await;
}

#[tokio::test]
async fn a_cancel_during_a_slow_call_closes_the_stateless_request() {
    cancel_reaches_the_server(McpMode::Modern).await;
}

#[tokio::test]
async fn a_tools_progress_reaches_the_runs_live_stream() {
    let Some((_srv, app, t, id)) = discovered(McpMode::Legacy).await else {
        return;
    };
    let count_to = enable(&app, &t, &id, "count_to", json!({"effect": "read"})).await;
    let agent = app
        .agent_with_tools(
            &t.owner,
            json!([
                {"tool_calls": [{"name": "count_to", "arguments": {"n": 10}}]},
                {"content": "done", "complete_run": true}
            ]),
            &[count_to["id"].as_str().expect("id")],
        )
        .await;
    let run = app.run(&t.owner, &agent, None).await;
    // The stream is open before the message starts the turn, and ends with the run.
    let post = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        app.post(
            &format!("/v1/runs/{run}/messages"),
            &t.owner,
            json!({"content": "count"}),
        )
        .await
        .expect_status(201);
    };
    let (streamed, ()) = tokio::join!(app.send(app.events_request(&run, &t.owner, None)), post);
    let text = streamed.expect_status(200).text;
    let progress: Vec<Value> = text
        .split("\n\n")
        .filter(|frame| frame.lines().any(|l| l == "event: tool.progress"))
        .filter_map(|frame| frame.lines().find_map(|l| l.strip_prefix("data: ")))
        .map(|data| serde_json::from_str(data).expect("JSON data"))
        .collect();
    assert!(!progress.is_empty(), "no progress frame in {text}");
    let last = progress.last().expect("one");
    assert_eq!(last["tool"], "count_to", "{last}");
    assert_eq!(last["total"], 10.0);
    let step = last["progress"].as_f64().expect("a number");
    assert_eq!(last["message"], format!("step {step}"));
    assert!(
        text.split("\n\n")
            .filter(|f| f.contains("event: tool.progress"))
            .all(|f| !f.lines().any(|l| l.starts_with("id:"))),
        "progress frames carry no id"
    );
}

#[tokio::test]
async fn a_server_asking_for_oauth_gets_a_token_bought_with_client_credentials() {
    let options = McpOptions {
        oauth: Some(("baton-client".into(), "cl13nt+s3cret".into())),
        mode: McpMode::Modern,
        ..McpOptions::default()
    };
    let Some(srv) = McpTestServer::start(Path::new(ROOT), options).await else {
        return;
    };
    let (app, t) = TestApp::with_tenant().await;
    app.put(
        "/v1/secrets/mcp_client",
        &t.owner,
        json!({"value": "cl13nt+s3cret"}),
    )
    .await
    .expect_status(200);
    let oauth = json!({"oauth": {"client_id": "baton-client", "client_secret": "mcp_client",
                                 "scope": "tools"}});
    let id = server(&app, &t, "guarded", &srv.url(), oauth).await;
    let r = app
        .post(
            &format!("/v1/mcp-servers/{id}/discover"),
            &t.owner,
            json!({}),
        )
        .await;
    assert_eq!(r.status, 200, "{} {:?}", r.text, srv.token_requests());
    let found = r.body;
    assert!(
        found["discovery"]["tools"]
            .as_array()
            .is_some_and(|t| !t.is_empty()),
        "{found}"
    );
    let asked = srv.token_requests();
    assert!(
        !asked.is_empty() && asked.iter().all(|r| r.granted),
        "{asked:?}"
    );
    assert_eq!(asked[0].resource.as_deref(), Some(srv.url().as_str()));
    assert_eq!(asked[0].scope.as_deref(), Some("tools"));
    assert_eq!(asked[0].auth_method, "basic");

    let lookup = enable(&app, &t, &id, "lookup", json!({"effect": "read"})).await;
    let lookup = lookup["id"].as_str().expect("id");
    let results = call_once(&app, &t, lookup, "lookup", json!({"key": "k"})).await;
    assert_eq!(results[0]["output"], "value of k", "{results:?}");

    // An issuer pinned by the admin that the server does not name: the secret is not
    // sent anywhere; the right pin is accepted.
    let issuer = srv.url().replace("/mcp", "/auth");
    let pinned = |issuer: &str| {
        json!({"name": "guarded", "url": srv.url(), "oauth": {"client_id": "baton-client",
               "client_secret": "mcp_client", "scope": "tools", "issuer": issuer}})
    };
    app.put(
        &format!("/v1/mcp-servers/{id}"),
        &t.owner,
        pinned("http://127.0.0.1:9/elsewhere"),
    )
    .await
    .expect_status(200);
    let before = srv.token_requests().len();
    let r = app
        .post(
            &format!("/v1/mcp-servers/{id}/discover"),
            &t.owner,
            json!({}),
        )
        .await;
    let detail = assert_problem(&r, 502, "upstream_failed");
    assert!(detail.contains("pinned issuer"), "{detail}");
    assert_eq!(srv.token_requests().len(), before, "no token was asked for");
    app.put(&format!("/v1/mcp-servers/{id}"), &t.owner, pinned(&issuer))
        .await
        .expect_status(200);
    let r = app
        .post(
            &format!("/v1/mcp-servers/{id}/discover"),
            &t.owner,
            json!({}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        srv.token_requests().len(),
        before + 1,
        "a new token for the pin"
    );

    // Credentials the authorization server refuses: a clear failure, no secret shown.
    app.put(
        "/v1/secrets/mcp_client",
        &t.owner,
        json!({"value": "wrong-s3cret"}),
    )
    .await
    .expect_status(200);
    let r = app
        .post(
            &format!("/v1/mcp-servers/{id}/discover"),
            &t.owner,
            json!({}),
        )
        .await;
    let detail = assert_problem(&r, 502, "upstream_failed");
    assert!(
        detail.contains("refused the client credentials"),
        "{detail}"
    );
    assert!(!detail.contains("wrong-s3cret"), "{detail}");
    let refused = srv.token_requests();
    assert!(refused.last().is_some_and(|r| !r.granted), "{refused:?}");
}
