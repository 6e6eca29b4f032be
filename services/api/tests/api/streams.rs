//! Event streams end with the credentials that opened them: a logout ends its session's
//! streams, a member's removal ends the streams its sessions opened in that tenant, and a
//! revoked key's streams end; other callers' streams go on.

use crate::support::{Tenant, TestApp};
use axum::body::{Body, to_bytes};
use axum::http::Method;
use axum::response::Response;
use serde_json::json;
use std::time::Duration;

/// How long a stream may outlive its credentials here (no bus hop in between).
const WITHIN: Duration = Duration::from_secs(1);

async fn open(app: &TestApp, run: &str, token: &str) -> Response {
    let res = app.open(app.events_request(run, token, None)).await;
    assert_eq!(res.status(), 200);
    res
}

/// Whether the stream's body ends within `wait`.
async fn ends_within(res: Response, wait: Duration) -> bool {
    tokio::time::timeout(wait, to_bytes(res.into_body(), usize::MAX))
        .await
        .is_ok()
}

/// A tenant, a member who logged in (its session token and user id), and a waiting run.
async fn member_with_a_run(app: &TestApp, email: &str) -> (Tenant, String, String, String) {
    let t = app.tenant().await;
    let password = "correct horse battery staple";
    app.user(email, password).await;
    let (session, member) = app.join(&t.owner, email, password, "viewer").await;
    let agent = app.agent(&t.owner, json!([{"content": "x"}])).await;
    let run = app.run(&t.owner, &agent, None).await;
    (t, session, member.str("/user_id"), run)
}

#[tokio::test]
async fn logging_out_ends_the_sessions_streams_and_no_one_elses() {
    let app = TestApp::new().await;
    let (t, session, _, run) = member_with_a_run(&app, "ada@example.com").await;
    let mine = open(&app, &run, &session).await;
    let owners = open(&app, &run, &t.owner).await;
    let req = app.request(Method::POST, "/v1/logout", &session);
    let out = app.send(req.body(Body::empty()).expect("a request")).await;
    assert_eq!(out.status, 204);
    assert!(
        ends_within(mine, WITHIN).await,
        "the session's stream outlived its logout"
    );
    assert!(
        !ends_within(owners, Duration::from_millis(300)).await,
        "the owner's stream ended with another caller's logout"
    );
}

#[tokio::test]
async fn removing_a_member_ends_its_streams_in_that_tenant() {
    let app = TestApp::new().await;
    let (t, session, user, run) = member_with_a_run(&app, "bob@example.com").await;
    let stream = open(&app, &run, &session).await;
    app.delete(&format!("/v1/members/{user}"), &t.owner)
        .await
        .expect_status(204);
    assert!(
        ends_within(stream, WITHIN).await,
        "the stream outlived the membership"
    );
}

#[tokio::test]
async fn revoking_a_key_ends_its_streams() {
    let app = TestApp::new().await;
    let t = app.tenant().await;
    let agent = app.agent(&t.owner, json!([{"content": "x"}])).await;
    let run = app.run(&t.owner, &agent, None).await;
    let created = app
        .post(
            "/v1/api-keys",
            &t.owner,
            json!({"name": "reader", "role": "viewer"}),
        )
        .await
        .expect_status(201);
    let stream = open(&app, &run, &created.str("/token")).await;
    let id = created.str("/key/id");
    app.delete(&format!("/v1/api-keys/{id}"), &t.owner)
        .await
        .expect_status(204);
    assert!(
        ends_within(stream, WITHIN).await,
        "the stream outlived its key"
    );
}
