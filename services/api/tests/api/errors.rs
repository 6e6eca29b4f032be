//! Bad requests get a problem+json answer whose code says what was wrong, and write
//! nothing: unknown routes and methods, bodies, paths, cursors and queries.

use crate::support::{Tenant, TestApp, assert_problem};
use axum::body::Body;
use axum::http::{Method, StatusCode, header};
use baton_api::HttpSettings;
use serde_json::json;

/// A tenant with a scripted agent and an idle run of it: (tenant, agent id, run id).
async fn idle_run(app: &TestApp) -> (Tenant, String, String) {
    let t = app.tenant().await;
    let agent = app.agent(&t.owner, json!([{"content": "hi"}])).await;
    let run = app.run(&t.owner, &agent, None).await;
    (t, agent, run)
}

/// `POST path` as `auth` with `body` sent as is, under `content_type` when given.
async fn post_raw(
    app: &TestApp,
    path: &str,
    auth: &str,
    content_type: Option<&str>,
    body: impl Into<Body>,
) -> crate::support::Reply {
    let mut req = app.request(Method::POST, path, auth);
    if let Some(ct) = content_type {
        req = req.header(header::CONTENT_TYPE, ct);
    }
    app.send(req.body(body.into()).expect("a request")).await
}

#[tokio::test]
async fn an_unknown_route_is_route_not_found_and_a_wrong_method_is_405_with_allow() {
    let app = TestApp::new().await;
    let t = app.tenant().await;
    for path in ["/v1/nothing-here", "/v1/runs/", "/v2/runs"] {
        assert_problem(&app.get(path, &t.owner).await, 404, "route_not_found");
    }
    let r = app.delete("/v1/runs", &t.owner).await;
    assert_problem(&r, 405, "method_not_allowed");
    let allow = r.headers[header::ALLOW].to_str().expect("ASCII");
    assert!(allow.contains("GET") && allow.contains("POST"), "{allow}");
}

#[tokio::test]
async fn malformed_unknown_and_mistyped_bodies_are_invalid_body_naming_the_field() {
    let app = TestApp::new().await;
    let (t, agent, _) = idle_run(&app).await;
    let json = Some("application/json");
    let r = post_raw(&app, "/v1/runs", &t.owner, json, "{\"agent_id\": ").await;
    let detail = assert_problem(&r, 400, "invalid_body");
    assert!(detail.contains("malformed JSON"), "{detail}");
    let cases = [
        (json!({"agent_id": agent, "colour": "blue"}), "colour"),
        (json!({"agent_id": agent, "message": 42}), "invalid type"),
        (json!({"agent_id": "not-a-uuid"}), "UUID"),
        (json!({"title": "no agent"}), "agent_id"),
    ];
    for (body, named) in cases {
        let r = app.post("/v1/runs", &t.owner, body.clone()).await;
        let detail = assert_problem(&r, 400, "invalid_body");
        assert!(detail.contains(named), "{body}: {detail}");
    }
    let runs = app.get("/v1/runs", &t.owner).await;
    assert_eq!(runs.items().len(), 1, "only the idle run: {}", runs.text);
}

#[tokio::test]
async fn a_body_that_is_not_declared_json_is_415_and_writes_nothing() {
    let app = TestApp::new().await;
    let (t, agent, run) = idle_run(&app).await;
    let body = json!({"agent_id": agent}).to_string();
    for content_type in [None, Some("text/plain")] {
        let r = post_raw(&app, "/v1/runs", &t.owner, content_type, body.clone()).await;
        assert_problem(&r, 415, "unsupported_media_type");
    }
    // The optional body of a cancel too, when there is one.
    let cancel = format!("/v1/runs/{run}/cancel");
    let r = post_raw(&app, &cancel, &t.owner, Some("text/plain"), "{}").await;
    assert_problem(&r, 415, "unsupported_media_type");
    assert_eq!(app.get("/v1/runs", &t.owner).await.items().len(), 1);
    let summary = app.get(&format!("/v1/runs/{run}"), &t.owner).await;
    assert_eq!(summary.body["status"], "waiting");
}

#[tokio::test]
async fn a_body_over_the_limit_is_413_and_writes_nothing() {
    let app = TestApp::new().await;
    let (t, _, run) = idle_run(&app).await;
    let big = "x".repeat(HttpSettings::default().body_limit_bytes);
    let r = app
        .post(
            &format!("/v1/runs/{run}/messages"),
            &t.owner,
            json!({"content": big}),
        )
        .await;
    assert_problem(&r, 413, "payload_too_large");
    let r = app
        .post(
            &format!("/v1/runs/{run}/cancel"),
            &t.owner,
            json!({"reason": big}),
        )
        .await;
    assert_problem(&r, 413, "payload_too_large");
    let messages = app.get(&format!("/v1/runs/{run}/messages"), &t.owner).await;
    assert_eq!(messages.items().len(), 0, "{}", messages.text);
    let summary = app.get(&format!("/v1/runs/{run}"), &t.owner).await;
    assert_eq!(summary.body["status"], "waiting", "nothing was cancelled");
}

#[tokio::test]
async fn a_malformed_id_in_the_path_is_invalid_path() {
    let app = TestApp::new().await;
    let (t, _, run) = idle_run(&app).await;
    for path in [
        "/v1/runs/nope".to_string(),
        "/v1/runs/%2e%2e%2fagents".into(),
        "/v1/agents/42".into(),
        "/v1/tools/nope".into(),
        format!("/v1/runs/{run}/receipts/nope/resolve"),
    ] {
        let r = match path.ends_with("/resolve") {
            true => {
                app.post(&path, &t.owner, json!({"resolution": "skip"}))
                    .await
            }
            false => app.get(&path, &t.owner).await,
        };
        let detail = assert_problem(&r, 400, "invalid_path");
        assert!(
            detail.contains("invalid path parameter"),
            "{path}: {detail}"
        );
    }
    let r = app.delete("/v1/api-keys/nope", &t.owner).await;
    assert_problem(&r, 400, "invalid_path");
}

#[tokio::test]
async fn a_cursor_not_from_a_previous_page_is_invalid_cursor() {
    let app = TestApp::new().await;
    let (t, _, run) = idle_run(&app).await;
    for list in [
        "/v1/runs".to_string(),
        "/v1/agents".into(),
        "/v1/tools".into(),
        "/v1/api-keys".into(),
        "/v1/audit".into(),
        format!("/v1/runs/{run}/messages"),
    ] {
        let r = app.get(&format!("{list}?cursor=zzz"), &t.owner).await;
        assert_problem(&r, 400, "invalid_cursor");
    }
}

#[tokio::test]
async fn a_malformed_query_is_invalid_query() {
    let app = TestApp::new().await;
    let (t, _, run) = idle_run(&app).await;
    let detail = assert_problem(
        &app.get("/v1/runs?status=asleep", &t.owner).await,
        400,
        "invalid_query",
    );
    assert!(detail.contains("waiting"), "lists the statuses: {detail}");
    for query in [
        "/v1/runs?limit=lots".to_string(),
        "/v1/runs?limit=-1".into(),
        "/v1/agents?limit=1&limit=2".into(),
        "/v1/audit?action=run.deleted".into(),
        format!("/v1/runs/{run}/events?after=-3"),
        format!("/v1/runs/{run}/events?limit=x"),
        "/v1/encryption-keys/reseal?batch=many".into(),
    ] {
        let r = match query.contains("reseal") {
            true => app.post(&query, &t.owner, json!(null)).await,
            false => app.get(&query, &t.owner).await,
        };
        assert_problem(&r, 400, "invalid_query");
    }
    // In range or not is the use case's to say.
    let r = app.get("/v1/runs?limit=501", &t.owner).await;
    let detail = assert_problem(&r, 400, "invalid_request");
    assert!(detail.contains("limit"), "{detail}");
    assert_eq!(
        app.get("/v1/runs?limit=500", &t.owner).await.status,
        StatusCode::OK
    );
}
