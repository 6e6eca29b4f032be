//! What admins manage: agents, tools, secrets, API keys, members, the audit stream and
//! the encryption of the tenant's records.

use crate::support::{TestApp, assert_problem, client_tool, scripted_agent};
use axum::http::StatusCode;
use baton_core::Role;
use serde_json::{Value, json};

/// The keys of a JSON object, sorted.
fn keys(v: &Value) -> Vec<&str> {
    let mut keys: Vec<&str> = v
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    keys
}

#[tokio::test]
async fn updating_an_agent_makes_version_2_and_runs_keep_the_version_they_started_with() {
    let (app, t) = TestApp::with_tenant().await;
    let created = app
        .post(
            "/v1/agents",
            &t.owner,
            scripted_agent(json!([{"content": "v1"}])),
        )
        .await
        .expect_status(201);
    assert_eq!(created.body["version"], 1);
    let agent = created.str("/id");
    let before = app.run(&t.owner, &agent, None).await;
    let mut v2 = scripted_agent(json!([{"content": "v2"}]));
    v2["name"] = json!("renamed");
    let updated = app
        .put(&format!("/v1/agents/{agent}"), &t.owner, v2)
        .await
        .expect_status(200);
    assert_eq!(
        (updated.str("/id"), &updated.body["version"]),
        (agent.clone(), &json!(2))
    );
    let list = app.get("/v1/agents", &t.owner).await;
    assert_eq!(list.item_fields("version"), [json!(2)]);
    assert_eq!(list.item_fields("name"), [json!("renamed")]);
    let run = app.get(&format!("/v1/runs/{before}"), &t.owner).await;
    assert_eq!(run.body["agent_version"], 1);
    let after = app
        .post("/v1/runs", &t.owner, json!({"agent_id": agent}))
        .await;
    assert_eq!(after.body["run"]["agent_version"], 2);
}

#[tokio::test]
async fn a_tool_name_is_unique_in_its_tenant() {
    let app = TestApp::new().await;
    let (t, other) = (app.tenant().await, app.tenant().await);
    let tool = app.tool(&t.owner, "lookup").await;
    let again = app.post("/v1/tools", &t.owner, client_tool("lookup")).await;
    assert_problem(&again, 409, "already_exists");
    let tools = app.get("/v1/tools", &t.owner).await;
    assert_eq!(tools.item_fields("id"), [json!(tool)]);
    assert_eq!(tools.item_fields("name"), [json!("lookup")]);
    // Another tenant's namespace is its own.
    app.tool(&other.owner, "lookup").await;
}

#[tokio::test]
async fn a_secret_value_is_never_answered_and_a_deleted_secret_is_gone() {
    let (app, t) = TestApp::with_tenant().await;
    let value = "s3cr3t-value-never-shown";
    let put = app
        .put("/v1/secrets/shop_token", &t.owner, json!({"value": value}))
        .await
        .expect_status(200);
    assert_eq!(
        keys(&put.body),
        ["created_at", "key_id", "name", "updated_at"]
    );
    assert_eq!(put.body["name"], "shop_token");
    let list = app.get("/v1/secrets", &t.owner).await;
    assert_eq!(list.item_fields("name"), [json!("shop_token")]);
    assert_eq!(keys(&list.items()[0]), keys(&put.body));
    assert!(!format!("{}{}", put.text, list.text).contains(value));
    let bad = app
        .put("/v1/secrets/bad.name", &t.owner, json!({"value": value}))
        .await;
    let detail = assert_problem(&bad, 400, "invalid_request");
    assert!(!detail.contains(value), "{detail}");

    assert_eq!(
        app.delete("/v1/secrets/shop_token", &t.owner).await.status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(app.get("/v1/secrets", &t.owner).await.items().len(), 0);
    assert_problem(
        &app.delete("/v1/secrets/shop_token", &t.owner).await,
        404,
        "not_found",
    );
}

#[tokio::test]
async fn an_api_key_token_is_shown_once_and_revoking_it_makes_it_401() {
    let (app, t) = TestApp::with_tenant().await;
    let created = app
        .post(
            "/v1/api-keys",
            &t.owner,
            json!({"name": "ci", "role": "member"}),
        )
        .await
        .expect_status(201);
    let token = created.str("/token");
    let id = created.str("/key/id");
    assert!(
        token.starts_with(&created.str("/key/prefix")),
        "{}",
        created.text
    );
    assert_eq!(app.get("/v1/runs", &token).await.status, StatusCode::OK);

    let list = app.get("/v1/api-keys", &t.owner).await.expect_status(200);
    assert!(list.item_fields("id").contains(&json!(id)));
    assert!(list.items().iter().all(|k| k.get("token").is_none()));
    assert!(!list.text.contains(&token), "the token is never listed");
    // A member manages no keys.
    assert_problem(&app.get("/v1/api-keys", &token).await, 403, "forbidden");

    app.delete(&format!("/v1/api-keys/{id}"), &t.owner)
        .await
        .expect_status(204);
    let detail = assert_problem(&app.get("/v1/runs", &token).await, 401, "unauthorized");
    assert!(detail.contains("revoked"), "{detail}");
}

#[tokio::test]
async fn an_admin_invites_members_but_cannot_make_an_owner() {
    let (app, t) = TestApp::with_tenant().await;
    let admin = app.key(t.id, Role::Admin).await;
    app.user("bob@example.com", "a long enough password").await;
    let r = app
        .post(
            "/v1/invitations",
            &admin,
            json!({"email": "bob@example.com", "role": "owner"}),
        )
        .await;
    assert_problem(&r, 403, "forbidden");
    assert_eq!(
        app.get("/v1/invitations", &admin).await.items().len(),
        0,
        "nobody was invited"
    );
    let (_, member) = app
        .join(&admin, "bob@example.com", "a long enough password", "admin")
        .await;
    let user = member.str("/user_id");
    let promote = app
        .put(
            &format!("/v1/members/{user}"),
            &admin,
            json!({"role": "owner"}),
        )
        .await;
    assert_problem(&promote, 403, "forbidden");
    let members = app.get("/v1/members", &admin).await;
    assert_eq!(members.item_fields("role"), [json!("admin")]);
}

#[tokio::test]
async fn a_change_shows_in_the_audit_stream_with_its_actor() {
    let (app, t) = TestApp::with_tenant().await;
    let tool = app.tool(&t.owner, "lookup").await;
    let audit = app
        .get("/v1/audit?action=tool.created", &t.owner)
        .await
        .expect_status(200);
    let entry = &audit.items()[0];
    assert_eq!(
        (&entry["action"], &entry["target"]),
        (&json!("tool.created"), &json!(tool))
    );
    assert!(
        entry["actor"]
            .as_str()
            .is_some_and(|a| a.starts_with("key:")),
        "{entry}"
    );
    // Admins only.
    let member = app.key(t.id, Role::Member).await;
    assert_problem(&app.get("/v1/audit", &member).await, 403, "forbidden");
}

#[tokio::test]
async fn an_admin_sees_which_encryption_keys_seal_the_tenants_secrets() {
    let (app, t) = TestApp::with_tenant().await;
    let admin = app.key(t.id, Role::Admin).await;
    let put = app
        .put("/v1/secrets/shop_token", &admin, json!({"value": "v"}))
        .await
        .expect_status(200);
    let status = app
        .get("/v1/encryption-keys", &admin)
        .await
        .expect_status(200);
    assert_eq!(status.body["active_key"], put.body["key_id"]);
    assert_eq!(
        status.body["keys"],
        json!([{"key_id": put.body["key_id"], "active": true, "configured": true,
            "secrets": 1, "checkpoints": 0}])
    );
    assert_eq!(status.body["reseal"], Value::Null);
    let member = app.key(t.id, Role::Member).await;
    assert_problem(
        &app.get("/v1/encryption-keys", &member).await,
        403,
        "forbidden",
    );
}
