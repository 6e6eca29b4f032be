//! `/v1/environments` and the execution environments of workspace commands: the
//! operator's are listed read-only, a tenant's admins define their own that only narrow
//! one of them, a tool names one that exists, a networked one makes the tool's calls
//! non-repeatable, and a run's command acquires its environment only when whoever asked
//! for the turn may execute there (checked at the call, so it is a clear tool error).

use crate::support::{Tenant, TestApp, assert_problem};
use baton_core::Role;
use serde_json::{Value, json};

/// A `shell` tool in `environment`; its definition's answer.
async fn shell_in(
    app: &TestApp,
    t: &Tenant,
    name: &str,
    environment: &str,
) -> crate::support::Reply {
    app.post(
        "/v1/tools",
        &t.owner,
        json!({"name": name, "effect": "mutation", "input_schema": {},
               "kind": {"kind": "workspace", "op": "shell", "environment": environment}}),
    )
    .await
}

/// The error code of the first `tool.result` of `run`.
async fn tool_error(app: &TestApp, t: &Tenant, run: &str) -> Value {
    let results = app.events_of(&t.owner, run, "tool.result").await;
    let result = results.into_iter().next().expect("a tool.result");
    result["data"]["error"].clone()
}

#[tokio::test]
async fn the_operators_environments_are_listed_and_a_tenants_only_narrow_them() {
    let (app, t) = TestApp::with_tenant().await;
    let viewer = app.key(t.id, Role::Viewer).await;
    let member = app.key(t.id, Role::Member).await;
    let list = app
        .get("/v1/environments", &viewer)
        .await
        .expect_status(200);
    assert_eq!(list.item_fields("name"), [json!("default"), json!("wide")]);
    assert_eq!(
        list.item_fields("source"),
        [json!("operator"), json!("operator")]
    );
    assert_eq!(list.body["items"][1]["network"], true);

    let put = |name: &str, body: Value| {
        let app = &app;
        let path = format!("/v1/environments/{name}");
        let owner = t.owner.clone();
        async move { app.put(&path, &owner, body).await }
    };
    // Members may not define them.
    let r = app
        .put("/v1/environments/mine", &member, json!({"base": "default"}))
        .await;
    assert_problem(&r, 403, "forbidden");
    for (name, body, why) in [
        (
            "net",
            json!({"base": "default", "network": true}),
            "network",
        ),
        (
            "slow",
            json!({"base": "wide", "limits": {"wall_ms": 120_000}}),
            "limits.wall_ms",
        ),
        (
            "zero",
            json!({"base": "wide", "limits": {"processes": 0}}),
            "limits.processes",
        ),
        (
            "low",
            json!({"base": "default", "execute_role": "viewer"}),
            "execute_role",
        ),
        ("nobase", json!({"base": "gpu"}), "base"),
        ("Upper", json!({}), "name"),
    ] {
        let detail = assert_problem(&put(name, body).await, 400, "invalid_request");
        assert!(detail.contains(why), "{name}: {detail}");
    }
    assert_problem(&put("wide", json!({})).await, 409, "already_exists");

    let made = put(
        "scraper",
        json!({"base": "wide", "network": true, "limits": {"wall_ms": 5_000}, "execute_role": "admin"}),
    )
    .await
    .expect_status(200);
    assert_eq!(made.body["source"], "tenant");
    assert_eq!(made.body["base"], "wide");
    assert_eq!(made.body["limits"], json!({"wall_ms": 5_000}));
    let list = app
        .get("/v1/environments", &viewer)
        .await
        .expect_status(200);
    assert_eq!(
        list.item_fields("name"),
        [json!("default"), json!("wide"), json!("scraper")]
    );
    let audit = app.get("/v1/audit?action=environment.set", &t.owner).await;
    assert_eq!(audit.expect_status(200).items().len(), 1);

    // Another tenant sees none of it, and deleting its name finds nothing.
    let other = app.tenant().await;
    let theirs = app
        .get("/v1/environments", &other.owner)
        .await
        .expect_status(200);
    assert_eq!(theirs.items().len(), 2);
    let r = app.delete("/v1/environments/scraper", &other.owner).await;
    assert_problem(&r, 404, "not_found");
    app.delete("/v1/environments/scraper", &t.owner)
        .await
        .expect_status(204);
    assert_eq!(app.get("/v1/environments", &viewer).await.items().len(), 2);
}

#[tokio::test]
async fn a_tool_names_an_environment_that_exists_and_network_makes_it_unrepeatable() {
    let (app, t) = TestApp::with_tenant().await;
    let r = shell_in(&app, &t, "nowhere", "gpu").await;
    let detail = assert_problem(&r, 400, "invalid_request");
    assert!(detail.contains("kind.environment"), "{detail}");
    let r = app
        .post(
            "/v1/tools",
            &t.owner,
            json!({"name": "reader", "effect": "read", "input_schema": {},
                   "kind": {"kind": "workspace", "op": "read_file", "environment": "wide"}}),
        )
        .await;
    assert_problem(&r, 400, "invalid_request");

    let plain = shell_in(&app, &t, "plain", "default")
        .await
        .expect_status(201);
    assert_eq!(
        plain.body["idempotent"], true,
        "no network: safe to run again"
    );
    let networked = shell_in(&app, &t, "fetch", "wide").await.expect_status(201);
    assert_eq!(
        networked.body["idempotent"], false,
        "with network a cut-off call is held for a decision"
    );
    assert_eq!(networked.body["kind"]["environment"], "wide");
}

#[tokio::test]
async fn a_turn_acquires_an_environment_only_for_a_role_that_may_execute_there() {
    let (app, t) = TestApp::with_tenant().await;
    app.put(
        "/v1/environments/admins",
        &t.owner,
        json!({"base": "default", "execute_role": "admin"}),
    )
    .await
    .expect_status(200);
    let tool = shell_in(&app, &t, "shell", "admins")
        .await
        .expect_status(201)
        .str("/id");
    let replies = json!([
        {"tool_calls": [{"name": "shell", "arguments": {"command": "echo hi > out.txt"}}]},
        {"content": "done"}
    ]);
    let agent = app.agent_with_tools(&t.owner, replies, &[&tool]).await;

    // A member's turn is refused at the call, as the tool's result: the run goes on.
    let member = app.key(t.id, Role::Member).await;
    let run = app.run(&member, &agent, Some("go")).await;
    app.wait_run(&member, &run, "waiting").await;
    let error = tool_error(&app, &t, &run).await;
    assert_eq!(error["code"], "environment_denied", "{error}");
    let message = error["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("admin") && message.contains("key:"),
        "{message}"
    );

    // An admin's passes the check (this test server has no sandbox, which it says next).
    let admin = app.key(t.id, Role::Admin).await;
    let run = app.run(&admin, &agent, Some("go")).await;
    app.wait_run(&admin, &run, "waiting").await;
    let error = tool_error(&app, &t, &run).await;
    assert_eq!(error["code"], "code_tools_unavailable", "{error}");

    // The environment gone: a clear error naming it.
    app.delete("/v1/environments/admins", &t.owner)
        .await
        .expect_status(204);
    let run = app.run(&admin, &agent, Some("go")).await;
    app.wait_run(&admin, &run, "waiting").await;
    let error = tool_error(&app, &t, &run).await;
    assert_eq!(error["code"], "environment_missing", "{error}");
}
