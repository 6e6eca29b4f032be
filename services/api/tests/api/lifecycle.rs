//! Agent and tool lifecycle: an archived agent takes no new runs and no new versions, its
//! runs go on; an archived tool is named by no new agent version, the versions that name it
//! keep calling it; both leave their list for the archived list and can be restored; each
//! change is audited once, and only admins make it. A tool update is a new version that
//! runs created before it do not see; an archived agent or tool is deleted only when no
//! live run (nor, for a tool, an agent in use) uses it.

use crate::support::{TestApp, assert_problem, scripted_agent};
use serde_json::json;

fn ids(r: &crate::support::Reply) -> Vec<&str> {
    r.items().iter().filter_map(|i| i["id"].as_str()).collect()
}

#[tokio::test]
async fn an_archived_agent_takes_no_new_runs_and_its_runs_go_on() {
    let (app, t) = TestApp::with_tenant().await;
    let agent = app
        .agent(&t.owner, json!([{"content": "one"}, {"content": "two"}]))
        .await;
    let run = app.run(&t.owner, &agent, Some("hi")).await;
    app.wait_run(&t.owner, &run, "waiting").await;

    let archived = app
        .post(&format!("/v1/agents/{agent}/archive"), &t.owner, json!({}))
        .await
        .expect_status(200);
    assert!(
        archived.body["archived_at"].is_string(),
        "{}",
        archived.text
    );
    // Again: nothing changes, the first time stays.
    let again = app
        .post(&format!("/v1/agents/{agent}/archive"), &t.owner, json!({}))
        .await
        .expect_status(200);
    assert_eq!(again.body["archived_at"], archived.body["archived_at"]);

    let refused = app
        .post(
            "/v1/runs",
            &t.owner,
            json!({"agent_id": agent, "message": "new"}),
        )
        .await;
    let detail = assert_problem(&refused, 409, "wrong_state");
    assert!(detail.contains("archived"), "{detail}");
    let mut spec = scripted_agent(json!([{"content": "x"}]));
    spec["name"] = json!("renamed");
    let r = app
        .put(&format!("/v1/agents/{agent}"), &t.owner, spec)
        .await;
    assert_problem(&r, 409, "wrong_state");

    // The run it has goes on.
    app.post(
        &format!("/v1/runs/{run}/messages"),
        &t.owner,
        json!({"content": "more", "wait": 10}),
    )
    .await
    .expect_status(201);
    assert_eq!(
        app.get(&format!("/v1/runs/{run}"), &t.owner).await.body["turn_count"],
        2
    );

    let listed = app.get("/v1/agents", &t.owner).await.expect_status(200);
    assert!(!ids(&listed).contains(&agent.as_str()), "{}", listed.text);
    let listed = app.get("/v1/agents?archived=true", &t.owner).await;
    assert_eq!(ids(&listed), vec![agent.as_str()]);
    app.get(&format!("/v1/agents/{agent}"), &t.owner)
        .await
        .expect_status(200);

    let restored = app
        .post(&format!("/v1/agents/{agent}/restore"), &t.owner, json!({}))
        .await
        .expect_status(200);
    assert!(
        restored.body.get("archived_at").is_none(),
        "{}",
        restored.text
    );
    app.post("/v1/runs", &t.owner, json!({"agent_id": agent}))
        .await
        .expect_status(201);

    let audit = app.get("/v1/audit", &t.owner).await.expect_status(200);
    let actions: Vec<&str> = audit
        .items()
        .iter()
        .filter_map(|e| e["action"].as_str())
        .filter(|a| a.starts_with("agent.") && *a != "agent.created")
        .collect();
    assert_eq!(
        actions,
        vec!["agent.restored", "agent.archived"],
        "{}",
        audit.text
    );
}

#[tokio::test]
async fn only_admins_archive_and_other_tenants_get_404() {
    let app = TestApp::new().await;
    let (a, b) = (app.tenant().await, app.tenant().await);
    let agent = app.agent(&a.owner, json!([{"content": "x"}])).await;
    let member = app.key(a.id, baton_core::Role::Member).await;
    let r = app
        .post(&format!("/v1/agents/{agent}/archive"), &member, json!({}))
        .await;
    assert_problem(&r, 403, "forbidden");
    let r = app
        .post(&format!("/v1/agents/{agent}/archive"), &b.owner, json!({}))
        .await;
    assert_problem(&r, 404, "not_found");
    let r = app.get(&format!("/v1/agents/{agent}"), &a.owner).await;
    assert!(r.body.get("archived_at").is_none(), "{}", r.text);
}

#[tokio::test]
async fn an_archived_tool_is_named_by_no_new_agent_version_and_still_called_by_the_old() {
    let (app, t) = TestApp::with_tenant().await;
    let tool = app.tool(&t.owner, "lookup").await;
    let spec = |replies: serde_json::Value| {
        let mut s = scripted_agent(replies);
        s["tools"] = json!([tool]);
        s
    };
    let agent = app
        .post(
            "/v1/agents",
            &t.owner,
            spec(json!([{"tool_calls": [{"name": "lookup", "arguments": {}}]}, {"content": "ok"}])),
        )
        .await
        .expect_status(201)
        .str("/id");

    let archived = app
        .post(&format!("/v1/tools/{tool}/archive"), &t.owner, json!({}))
        .await
        .expect_status(200);
    assert!(
        archived.body["archived_at"].is_string(),
        "{}",
        archived.text
    );
    let r = app
        .post("/v1/agents", &t.owner, spec(json!([{"content": "x"}])))
        .await;
    let detail = assert_problem(&r, 409, "wrong_state");
    assert!(
        detail.contains("lookup") && detail.contains("archived"),
        "{detail}"
    );
    let r = app
        .put(
            &format!("/v1/agents/{agent}"),
            &t.owner,
            spec(json!([{"content": "x"}])),
        )
        .await;
    assert_problem(&r, 409, "wrong_state");

    // The agent version that names it still offers and calls it.
    let created = app
        .run_waiting(&t.owner, &agent, "look", 10)
        .await
        .expect_status(201);
    assert_eq!(
        created.body["result"]["outcome"], "requires_action",
        "{}",
        created.text
    );

    let listed = app.get("/v1/tools", &t.owner).await;
    assert!(!ids(&listed).contains(&tool.as_str()), "{}", listed.text);
    let listed = app.get("/v1/tools?archived=true", &t.owner).await;
    assert_eq!(ids(&listed), vec![tool.as_str()]);
    app.post(&format!("/v1/tools/{tool}/restore"), &t.owner, json!({}))
        .await
        .expect_status(200);
    app.post("/v1/agents", &t.owner, spec(json!([{"content": "x"}])))
        .await
        .expect_status(201);
    let member = app.key(t.id, baton_core::Role::Member).await;
    let r = app
        .post(&format!("/v1/tools/{tool}/archive"), &member, json!({}))
        .await;
    assert_problem(&r, 403, "forbidden");
}

#[tokio::test]
async fn a_tool_update_is_a_new_version_and_runs_keep_the_one_they_started_with() {
    let (app, t) = TestApp::with_tenant().await;
    let tool = app.tool(&t.owner, "lookup").await;
    let agent = app
        .agent_with_tools(
            &t.owner,
            json!([
                {"tool_calls": [{"name": "lookup", "arguments": {}}]},
                {"content": "ok"}
            ]),
            &[&tool],
        )
        .await;
    // Created before the update: it keeps version 1, named `lookup`.
    let old = app.run(&t.owner, &agent, None).await;

    let updated = app
        .put(
            &format!("/v1/tools/{tool}"),
            &t.owner,
            crate::support::client_tool("search"),
        )
        .await
        .expect_status(200);
    assert_eq!(
        (
            updated.body["version"].clone(),
            updated.body["name"].clone()
        ),
        (json!(2), json!("search")),
        "{}",
        updated.text
    );
    let read = app.get(&format!("/v1/tools/{tool}"), &t.owner).await;
    assert_eq!(read.expect_status(200).body["version"], 2);

    // The old run's model still calls `lookup`, a client tool it waits on; a new run's
    // `lookup` is no tool of its agent (it offers `search`), so the model is told and
    // the turn goes on to its answer.
    let turn = app
        .post(
            &format!("/v1/runs/{old}/messages"),
            &t.owner,
            json!({"content": "look", "wait": 10}),
        )
        .await
        .expect_status(201);
    assert_eq!(
        turn.body["result"]["outcome"], "requires_action",
        "{}",
        turn.text
    );
    let new = app
        .run_waiting(&t.owner, &agent, "look", 10)
        .await
        .expect_status(201);
    assert_eq!(new.body["result"]["outcome"], "completed", "{}", new.text);
    let new_run = new.str("/run/id");
    let receipts = app
        .get(&format!("/v1/runs/{new_run}/receipts"), &t.owner)
        .await
        .expect_status(200);
    assert_eq!(
        receipts.items()[0]["error"]["code"],
        "unknown_tool",
        "{}",
        receipts.text
    );

    let audit = app
        .get("/v1/audit?action=tool.updated", &t.owner)
        .await
        .expect_status(200);
    assert_eq!(
        audit.body["items"][0]["details"]["version"], 2,
        "{}",
        audit.text
    );

    // A name another tool has, a member, another tenant, an archived tool.
    app.tool(&t.owner, "taken").await;
    let r = app
        .put(
            &format!("/v1/tools/{tool}"),
            &t.owner,
            crate::support::client_tool("taken"),
        )
        .await;
    assert_problem(&r, 409, "already_exists");
    let member = app.key(t.id, baton_core::Role::Member).await;
    let r = app
        .put(
            &format!("/v1/tools/{tool}"),
            &member,
            crate::support::client_tool("x"),
        )
        .await;
    assert_problem(&r, 403, "forbidden");
    let other = app.tenant().await;
    let r = app
        .put(
            &format!("/v1/tools/{tool}"),
            &other.owner,
            crate::support::client_tool("x"),
        )
        .await;
    assert_problem(&r, 404, "not_found");
    app.post(&format!("/v1/tools/{tool}/archive"), &t.owner, json!({}))
        .await
        .expect_status(200);
    let r = app
        .put(
            &format!("/v1/tools/{tool}"),
            &t.owner,
            crate::support::client_tool("y"),
        )
        .await;
    assert_problem(&r, 409, "wrong_state");
    let read = app.get(&format!("/v1/tools/{tool}"), &t.owner).await;
    assert_eq!(read.expect_status(200).body["version"], 2, "unchanged");
}

#[tokio::test]
async fn deleting_refuses_what_a_live_run_or_agent_uses_and_removes_the_rest() {
    let (app, t) = TestApp::with_tenant().await;
    let tool = app.tool(&t.owner, "lookup").await;
    let agent = app
        .agent_with_tools(&t.owner, json!([{"content": "hi"}]), &[&tool])
        .await;
    let run = app.run(&t.owner, &agent, None).await;
    let (tool_path, agent_path) = (format!("/v1/tools/{tool}"), format!("/v1/agents/{agent}"));

    // Not archived: archive first.
    assert_problem(&app.delete(&tool_path, &t.owner).await, 409, "wrong_state");
    assert_problem(&app.delete(&agent_path, &t.owner).await, 409, "wrong_state");
    for path in [&tool_path, &agent_path] {
        app.post(&format!("{path}/archive"), &t.owner, json!({}))
            .await
            .expect_status(200);
    }
    // The run has not ended: it calls the tool and runs on the agent.
    let r = app.delete(&tool_path, &t.owner).await;
    let detail = assert_problem(&r, 409, "in_use");
    assert!(detail.contains("1 runs not ended yet"), "{detail}");
    let r = app.delete(&agent_path, &t.owner).await;
    let detail = assert_problem(&r, 409, "in_use");
    assert!(detail.contains("1 runs not ended yet"), "{detail}");
    // Not an admin's, nor another tenant's to delete.
    let member = app.key(t.id, baton_core::Role::Member).await;
    assert_problem(&app.delete(&tool_path, &member).await, 403, "forbidden");
    let other = app.tenant().await;
    assert_problem(
        &app.delete(&agent_path, &other.owner).await,
        404,
        "not_found",
    );

    app.post(&format!("/v1/runs/{run}/cancel"), &t.owner, json!({}))
        .await
        .expect_status(200);
    app.wait_run(&t.owner, &run, "cancelled").await;
    // The archived agent still names the tool (it could be restored): the agent first.
    let r = app.delete(&tool_path, &t.owner).await;
    let detail = assert_problem(&r, 409, "in_use");
    assert!(detail.contains(&agent), "{detail}");
    let r = app.delete(&agent_path, &t.owner).await;
    assert_eq!(r.status.as_u16(), 204, "{}", r.text);
    let r = app.delete(&tool_path, &t.owner).await;
    assert_eq!(r.status.as_u16(), 204, "{}", r.text);
    for path in [&tool_path, &agent_path] {
        assert_problem(&app.get(path, &t.owner).await, 404, "not_found");
        assert_problem(&app.delete(path, &t.owner).await, 404, "not_found");
    }
    // The ended run stays readable.
    app.get(&format!("/v1/runs/{run}"), &t.owner)
        .await
        .expect_status(200);
    for action in ["tool.deleted", "agent.deleted"] {
        let audit = app
            .get(&format!("/v1/audit?action={action}"), &t.owner)
            .await
            .expect_status(200);
        assert_eq!(audit.items().len(), 1, "{action}: {}", audit.text);
    }
}

#[tokio::test]
async fn a_tool_an_agent_in_use_names_is_not_deleted() {
    let (app, t) = TestApp::with_tenant().await;
    let tool = app.tool(&t.owner, "lookup").await;
    let agent = app
        .agent_with_tools(&t.owner, json!([{"content": "hi"}]), &[&tool])
        .await;
    app.post(&format!("/v1/tools/{tool}/archive"), &t.owner, json!({}))
        .await
        .expect_status(200);
    let r = app.delete(&format!("/v1/tools/{tool}"), &t.owner).await;
    let detail = assert_problem(&r, 409, "in_use");
    assert!(detail.contains(&agent), "names the agent: {detail}");
}
