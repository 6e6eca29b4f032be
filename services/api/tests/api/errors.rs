//! Bad requests get a problem+json answer whose code says what was wrong, and write
//! nothing: unknown routes and methods, bodies, paths, cursors and queries.

use crate::support::{Tenant, TestApp, assert_problem};
use axum::body::Body;
use axum::http::{Method, StatusCode, header};
use baton_api::HttpSettings;
use serde_json::json;

/// An app, a tenant with a scripted agent and an idle run of it: (app, tenant, agent
/// id, run id).
async fn idle_run() -> (TestApp, Tenant, String, String) {
    let (app, t) = TestApp::with_tenant().await;
    let agent = app.agent(&t.owner, json!([{"content": "hi"}])).await;
    let run = app.run(&t.owner, &agent, None).await;
    (app, t, agent, run)
}

/// Checks that the tenant still has one run, the idle one, without messages.
async fn assert_untouched(app: &TestApp, t: &Tenant, run: &str) {
    let runs = app.get("/v1/runs", &t.owner).await;
    assert_eq!(runs.item_fields("id"), [json!(run)], "{}", runs.text);
    assert_eq!(
        runs.item_fields("status"),
        [json!("waiting")],
        "{}",
        runs.text
    );
    assert_eq!(
        runs.item_fields("message_count"),
        [json!(0)],
        "{}",
        runs.text
    );
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
    let (app, t) = TestApp::with_tenant().await;
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
    let (app, t, agent, run) = idle_run().await;
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
    assert_untouched(&app, &t, &run).await;
}

#[tokio::test]
async fn a_body_that_is_not_declared_json_is_415_and_writes_nothing() {
    let (app, t, agent, run) = idle_run().await;
    let body = json!({"agent_id": agent}).to_string();
    for content_type in [None, Some("text/plain")] {
        let r = post_raw(&app, "/v1/runs", &t.owner, content_type, body.clone()).await;
        assert_problem(&r, 415, "unsupported_media_type");
    }
    // The optional body of a cancel too, when there is one.
    let cancel = format!("/v1/runs/{run}/cancel");
    let r = post_raw(&app, &cancel, &t.owner, Some("text/plain"), "{}").await;
    assert_problem(&r, 415, "unsupported_media_type");
    assert_untouched(&app, &t, &run).await;
}

#[tokio::test]
async fn a_body_over_the_limit_is_413_and_writes_nothing() {
    let (app, t, _, run) = idle_run().await;
    let big = "x".repeat(HttpSettings::default().body_limit_bytes);
    let over = [
        (format!("/v1/runs/{run}/messages"), json!({"content": big})),
        (format!("/v1/runs/{run}/cancel"), json!({"reason": big})),
    ];
    for (path, body) in over {
        let r = app.post(&path, &t.owner, body).await;
        assert_problem(&r, 413, "payload_too_large");
    }
    assert_untouched(&app, &t, &run).await;
}

/// GETs each of `paths` as `auth`: each must answer `400 code`; returns their details.
async fn assert_bad_gets(app: &TestApp, auth: &str, paths: &[String], code: &str) -> Vec<String> {
    let mut details = Vec::new();
    for path in paths {
        let r = app.get(path, auth).await;
        assert_eq!(r.body["code"], code, "GET {path}: {}", r.text);
        details.push(assert_problem(&r, 400, code));
    }
    details
}

#[tokio::test]
async fn a_malformed_id_in_the_path_is_invalid_path() {
    let (app, t, _, run) = idle_run().await;
    let paths = [
        "/v1/runs/nope".to_string(),
        "/v1/runs/%2e%2e%2fagents".into(),
        "/v1/agents/42".into(),
        "/v1/tools/nope".into(),
    ];
    for detail in assert_bad_gets(&app, &t.owner, &paths, "invalid_path").await {
        assert!(detail.contains("invalid path parameter"), "{detail}");
    }
    let resolve = format!("/v1/runs/{run}/receipts/nope/resolve");
    let r = app
        .post(&resolve, &t.owner, json!({"resolution": "skip"}))
        .await;
    assert_problem(&r, 400, "invalid_path");
    let r = app.delete("/v1/api-keys/nope", &t.owner).await;
    assert_problem(&r, 400, "invalid_path");
}

#[tokio::test]
async fn a_cursor_not_from_a_previous_page_is_invalid_cursor() {
    let (app, t, _, run) = idle_run().await;
    let lists = [
        "/v1/runs?cursor=zzz".to_string(),
        "/v1/agents?cursor=zzz".into(),
        "/v1/tools?cursor=zzz".into(),
        "/v1/api-keys?cursor=zzz".into(),
        "/v1/audit?cursor=zzz".into(),
        format!("/v1/runs/{run}/messages?cursor=zzz"),
    ];
    assert_bad_gets(&app, &t.owner, &lists, "invalid_cursor").await;
}

#[tokio::test]
async fn a_malformed_query_is_invalid_query() {
    let (app, t, _, run) = idle_run().await;
    let queries = [
        "/v1/runs?status=asleep".to_string(),
        "/v1/runs?limit=lots".into(),
        "/v1/runs?limit=-1".into(),
        "/v1/agents?limit=1&limit=2".into(),
        "/v1/audit?action=run.exploded".into(),
        format!("/v1/runs/{run}/events?after=-3"),
        format!("/v1/runs/{run}/events?limit=x"),
    ];
    let details = assert_bad_gets(&app, &t.owner, &queries, "invalid_query").await;
    assert!(
        details[0].contains("waiting"),
        "lists the statuses: {}",
        details[0]
    );
    let reseal = "/v1/encryption-keys/reseal?batch=many";
    assert_problem(
        &app.post(reseal, &t.owner, json!(null)).await,
        400,
        "invalid_query",
    );
    // In range or not is the use case's to say.
    let r = app.get("/v1/runs?limit=501", &t.owner).await;
    let detail = assert_problem(&r, 400, "invalid_request");
    assert!(detail.contains("limit"), "{detail}");
    assert_eq!(
        app.get("/v1/runs?limit=500", &t.owner).await.status,
        StatusCode::OK
    );
}
