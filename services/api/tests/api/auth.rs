//! Who may call: API keys, login sessions, the `Baton-Tenant` header, roles, and the local
//! owner of the embedded tier.

use crate::support::{Anonymous, TestApp, assert_problem, client_tool, scripted_agent};
use axum::body::Body;
use axum::http::{Method, StatusCode, header};
use baton_core::Role;
use baton_core::crypto::tokens;
use chrono::{TimeDelta, Utc};
use serde_json::json;

const EMAIL: &str = "ada@example.com";
const PASSWORD: &str = "correct horse battery staple";

/// `POST path` with no body, as `auth` (logout takes none).
async fn post_empty(app: &TestApp, path: &str, auth: &str) -> crate::support::Reply {
    let req = app.request(Method::POST, path, auth);
    app.send(req.body(Body::empty()).expect("a request")).await
}

#[tokio::test]
async fn missing_malformed_unknown_revoked_and_expired_keys_answer_401_and_write_nothing() {
    let (app, t) = TestApp::with_tenant().await;
    let now = Utc::now();
    let revoked = app.key_with(t.id, Role::Owner, None, Some(now)).await;
    let expired = app
        .key_with(t.id, Role::Owner, Some(now - TimeDelta::seconds(1)), None)
        .await;
    let unknown = tokens::issue_token().token;
    let cases = [
        (None, "missing credentials"),
        (Some(format!("Basic {}", t.owner)), "must be `Bearer"),
        (Some("Bearer bk_short".into()), "API key is malformed"),
        (Some("Bearer bs_short".into()), "session token is malformed"),
        (Some(format!("Bearer {unknown}")), "API key is not valid"),
        (
            Some(format!("Bearer {revoked}")),
            "API key has been revoked",
        ),
        (Some(format!("Bearer {expired}")), "API key has expired"),
    ];
    for (authorization, why) in cases {
        let mut req = app
            .request(Method::POST, "/v1/agents", &Anonymous)
            .header(header::CONTENT_TYPE, "application/json");
        if let Some(value) = &authorization {
            req = req.header(header::AUTHORIZATION, value);
        }
        let body = scripted_agent(json!([{"content": "hi"}])).to_string();
        let r = app
            .send(req.body(Body::from(body)).expect("a request"))
            .await;
        let detail = assert_problem(&r, 401, "unauthorized");
        assert!(detail.contains(why), "{authorization:?}: {detail}");
        assert_eq!(
            r.headers[header::WWW_AUTHENTICATE],
            "Bearer",
            "the scheme to use"
        );
    }
    let agents = app.get("/v1/agents", &t.owner).await;
    assert_eq!(agents.items().len(), 0, "{}", agents.text);
}

#[tokio::test]
async fn a_key_naming_another_tenant_in_baton_tenant_is_forbidden() {
    let app = TestApp::new().await;
    let (a, b) = (app.tenant().await, app.tenant().await);
    let req = app
        .request(Method::GET, "/v1/runs", &a.owner)
        .header("baton-tenant", b.id.to_string());
    let r = app.send(req.body(Body::empty()).expect("a request")).await;
    let detail = assert_problem(&r, 403, "forbidden");
    assert!(detail.contains("Baton-Tenant"), "{detail}");
    // Its own tenant, named, is fine.
    let req = app
        .request(Method::GET, "/v1/runs", &a.owner)
        .header("baton-tenant", a.id.to_string());
    app.send(req.body(Body::empty()).expect("a request"))
        .await
        .expect_status(200);
}

#[tokio::test]
async fn a_wrong_password_and_an_unknown_email_get_the_same_401() {
    let app = TestApp::new().await;
    app.user(EMAIL, PASSWORD).await;
    let wrong = app
        .post(
            "/v1/login",
            &Anonymous,
            json!({"email": EMAIL, "password": "not the password"}),
        )
        .await;
    let unknown = app
        .post(
            "/v1/login",
            &Anonymous,
            json!({"email": "bob@example.com", "password": PASSWORD}),
        )
        .await;
    let wrong_detail = assert_problem(&wrong, 401, "unauthorized");
    let unknown_detail = assert_problem(&unknown, 401, "unauthorized");
    assert_eq!(wrong_detail, "the email or password is not valid");
    assert_eq!(unknown_detail, wrong_detail);
}

#[tokio::test]
async fn a_session_acts_with_its_membership_until_logout_and_is_refused_after() {
    let (app, t) = TestApp::with_tenant().await;
    app.user(EMAIL, PASSWORD).await;
    // The email matches whatever its case and surrounding spaces.
    let login = app
        .post(
            "/v1/login",
            &Anonymous,
            json!({"email": " Ada@Example.COM ", "password": PASSWORD}),
        )
        .await
        .expect_status(200);
    let session = login.str("/token");
    assert!(session.starts_with(tokens::SESSION_PREFIX), "{session}");
    assert_eq!(login.body["user"]["email"], EMAIL);
    assert_eq!(login.body["user"].get("password_hash"), None);
    let (session, added) = app.join(&t.owner, EMAIL, PASSWORD, "member").await;
    let user_id = added.str("/user_id");

    let me = app.get("/v1/me", &session).await.expect_status(200);
    assert_eq!(me.body["actor"], format!("user:{user_id}"));
    assert_eq!(
        me.body["tenants"],
        json!([{"tenant_id": t.id, "name": me.body["tenants"][0]["name"], "role": "member"}])
    );
    // It acts as a member of the tenant: reads, but defines no tools.
    assert_eq!(app.get("/v1/runs", &session).await.status, StatusCode::OK);
    let r = app.post("/v1/tools", &session, client_tool("lookup")).await;
    assert_problem(&r, 403, "forbidden");

    assert_eq!(
        post_empty(&app, "/v1/logout", &session).await.status,
        StatusCode::NO_CONTENT
    );
    let detail = assert_problem(&app.get("/v1/me", &session).await, 401, "unauthorized");
    assert!(detail.contains("session has ended"), "{detail}");
    assert_problem(&app.get("/v1/runs", &session).await, 401, "unauthorized");
}

#[tokio::test]
async fn logout_with_an_api_key_is_a_bad_request_and_keeps_the_key() {
    let (app, t) = TestApp::with_tenant().await;
    let detail = assert_problem(
        &post_empty(&app, "/v1/logout", &t.owner).await,
        400,
        "invalid_request",
    );
    assert!(detail.contains("/v1/api-keys"), "{detail}");
    assert_eq!(app.get("/v1/me", &t.owner).await.status, StatusCode::OK);
}

#[tokio::test]
async fn a_viewer_reads_agents_but_cannot_create_one() {
    let (app, t) = TestApp::with_tenant().await;
    let viewer = app.key(t.id, Role::Viewer).await;
    let r = app
        .post(
            "/v1/agents",
            &viewer,
            scripted_agent(json!([{"content": "hi"}])),
        )
        .await;
    assert_problem(&r, 403, "forbidden");
    let agents = app.get("/v1/agents", &viewer).await.expect_status(200);
    assert_eq!(agents.items().len(), 0, "nothing was created");
}

#[tokio::test]
async fn a_member_creates_runs_but_not_tools() {
    let (app, t) = TestApp::with_tenant().await;
    let member = app.key(t.id, Role::Member).await;
    let agent = app.agent(&t.owner, json!([{"content": "hi"}])).await;
    let run = app
        .post("/v1/runs", &member, json!({"agent_id": agent}))
        .await
        .expect_status(201);
    assert_eq!(run.body["run"]["status"], "waiting");
    let r = app.post("/v1/tools", &member, client_tool("lookup")).await;
    assert_problem(&r, 403, "forbidden");
    let tools = app.get("/v1/tools", &member).await;
    assert_eq!(tools.items().len(), 0, "nothing was created");
}

#[tokio::test]
async fn without_auth_requests_act_as_the_local_owner_on_loopback_only() {
    let (app, tenant) = TestApp::local_owner().await;
    let me = app.get("/v1/me", &Anonymous).await.expect_status(200);
    assert_eq!(me.body["actor"], "local");
    assert_eq!(me.body["tenants"][0]["tenant_id"], json!(tenant));
    assert_eq!(me.body["tenants"][0]["role"], "owner");
    // A key, when sent, is still checked.
    assert_problem(&app.get("/v1/me", "bk_short").await, 401, "unauthorized");
    // A request addressed to another host (a rebound DNS name) is refused.
    let mut req = app
        .request(Method::GET, "/v1/me", &Anonymous)
        .body(Body::empty())
        .expect("a request");
    req.headers_mut().insert(
        header::HOST,
        "evil.example".parse().expect("a header value"),
    );
    assert_problem(&app.send(req).await, 403, "host_not_allowed");
}
