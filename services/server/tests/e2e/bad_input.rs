//! Bad input gets a problem+json 4xx naming what is wrong, and writes nothing.

use crate::common::{TestApp, assert_problem};
use serde_json::json;

#[tokio::test]
async fn malformed_unknown_mistyped_and_unsupported_bodies_are_refused_without_writes() {
    let app = TestApp::embedded().await;
    let api = app.anonymous();
    let agent = api.agent(&[("x", 0, false)]).await;
    let raw = |body: &'static str| {
        api.req(reqwest::Method::POST, "/v1/runs")
            .header("content-type", "application/json")
            .body(body)
    };
    let detail = assert_problem(&api.send(raw("{\"agent_id\": ")).await, 400, "invalid_body");
    assert!(detail.contains("malformed JSON"), "{detail}");
    let r = api
        .post("/v1/runs", json!({"agent_id": agent, "colour": "blue"}))
        .await;
    let detail = assert_problem(&r, 400, "invalid_body");
    assert!(
        detail.contains("colour"),
        "names the unknown field: {detail}"
    );
    let r = api
        .post("/v1/runs", json!({"agent_id": agent, "message": 42}))
        .await;
    let detail = assert_problem(&r, 400, "invalid_body");
    assert!(
        detail.contains("message"),
        "names the mistyped field: {detail}"
    );
    let r = api
        .post("/v1/runs", json!({"agent_id": "not-a-uuid"}))
        .await;
    assert_problem(&r, 400, "invalid_body");
    let r = api
        .send(api.req(reqwest::Method::POST, "/v1/runs").body("{}"))
        .await;
    assert_problem(&r, 415, "unsupported_media_type");
    let r = api
        .post(
            "/v1/agents",
            json!({"name": "", "provider": {"kind": "scripted", "replies": [{"content": "y"}]}}),
        )
        .await;
    assert_problem(&r, 400, "invalid_request");
    let r = api
        .post(
            "/v1/agents",
            json!({"name": "a", "provider": {"kind": "gpt-9", "replies": []}}),
        )
        .await;
    assert_problem(&r, 400, "invalid_body");
    let r = api
        .post("/v1/runs", json!({"agent_id": agent, "message": "  "}))
        .await;
    assert_problem(&r, 400, "invalid_request");

    let runs = api.get("/v1/runs").await;
    assert_eq!(runs.body["items"], json!([]), "no run was half-created");
    let agents = api.get("/v1/agents").await;
    assert_eq!(agents.body["items"].as_array().map(Vec::len), Some(1));
    app.stop().await;
}

#[tokio::test]
async fn oversize_bodies_answer_413() {
    let app = TestApp::embedded_with(|c| c.http.body_limit_bytes = 4096).await;
    let api = app.anonymous();
    let agent = api.agent(&[("x", 0, false)]).await;
    let run = api.run(&agent, None).await;
    let big = "x".repeat(8192);
    let r = api.message(&run, &big, None).await;
    assert_problem(&r, 413, "payload_too_large");
    assert!(api.messages(&run).await.is_empty());
    let r = api
        .post(&format!("/v1/runs/{run}/cancel"), json!({ "reason": big }))
        .await;
    assert_problem(&r, 413, "payload_too_large");
    let r = api
        .send(
            api.req(reqwest::Method::POST, &format!("/v1/runs/{run}/cancel"))
                .header("content-type", "text/plain")
                .body("{}"),
        )
        .await;
    assert_problem(&r, 415, "unsupported_media_type");
    let r = api.get(&format!("/v1/runs/{run}")).await;
    assert_eq!(r.body["status"], "waiting", "nothing was cancelled");
    app.stop().await;
}

#[tokio::test]
async fn unknown_and_malformed_ids_cursors_and_filters_are_named() {
    let app = TestApp::embedded().await;
    let api = app.anonymous();
    let unknown = uuid::Uuid::now_v7();
    for path in [
        format!("/v1/runs/{unknown}"),
        format!("/v1/agents/{unknown}"),
        format!("/v1/runs/{unknown}/events"),
        format!("/v1/runs/{unknown}/messages"),
    ] {
        assert_problem(&api.get(&path).await, 404, "not_found");
    }
    let r = api.message(&unknown.to_string(), "hi", None).await;
    assert_problem(&r, 404, "not_found");
    let r = api.post("/v1/runs", json!({"agent_id": unknown})).await;
    assert_problem(&r, 404, "not_found");
    assert_problem(&api.get("/v1/runs/nope").await, 400, "invalid_path");
    assert_problem(
        &api.get("/v1/runs/%2e%2e%2fagents").await,
        400,
        "invalid_path",
    );
    assert_problem(&api.get("/v1/runs?cursor=zzz").await, 400, "invalid_cursor");
    assert_problem(
        &api.get("/v1/agents?cursor=zzz").await,
        400,
        "invalid_cursor",
    );
    let detail = assert_problem(
        &api.get("/v1/runs?status=asleep").await,
        400,
        "invalid_query",
    );
    assert!(
        detail.contains("waiting"),
        "lists the valid statuses: {detail}"
    );
    assert_problem(&api.get("/v1/runs?limit=0").await, 400, "invalid_request");
    assert_problem(&api.get("/v1/runs?limit=lots").await, 400, "invalid_query");
    let agent = api.agent(&[("x", 0, false)]).await;
    let run = api.run(&agent, None).await;
    assert_problem(
        &api.get(&format!("/v1/runs/{run}/events?after=-3")).await,
        400,
        "invalid_query",
    );
    assert_problem(
        &api.get(&format!("/v1/runs/{run}/messages?cursor=x")).await,
        400,
        "invalid_cursor",
    );
    assert_problem(&api.get("/v1/nothing-here").await, 404, "route_not_found");
    let r = api.send(api.req(reqwest::Method::DELETE, "/v1/runs")).await;
    assert_problem(&r, 405, "method_not_allowed");
    app.stop().await;
}

#[tokio::test]
async fn health_and_openapi_answer() {
    let app = TestApp::embedded().await;
    let api = app.anonymous();
    assert_eq!(api.get("/livez").await.status, 200);
    let ready = api.get("/readyz").await;
    assert_eq!(ready.body["status"], "ready");
    // scripts/test installs bubblewrap: this replica runs workspace commands.
    assert_eq!(ready.body["code_tools"], "ok", "{}", ready.body);
    let doc = api.get("/openapi.json").await;
    assert_eq!(doc.status, 200);
    for path in [
        "/v1/runs",
        "/v1/runs/{run_id}/messages",
        "/v1/runs/{run_id}/events",
        "/v1/agents",
    ] {
        assert!(
            doc.body["paths"][path].is_object(),
            "openapi documents {path}"
        );
    }
    app.stop().await;
}

#[tokio::test]
async fn without_auth_only_loopback_hosts_and_origins_are_served() {
    let app = TestApp::embedded().await;
    let api = app.anonymous();
    let rebound = api
        .send(
            api.req(reqwest::Method::GET, "/v1/runs")
                .header("host", "evil.example:8080"),
        )
        .await;
    assert_problem(&rebound, 403, "host_not_allowed");
    let cross_site = api
        .send(
            api.req(reqwest::Method::POST, "/v1/agents")
                .header("origin", "https://evil.example")
                .json(&json!({"name": "x", "provider": {"kind": "scripted", "replies": [{"content": "y"}]}})),
        )
        .await;
    assert_problem(&cross_site, 403, "origin_not_allowed");
    assert_eq!(api.get("/v1/agents").await.body["items"], json!([]));
    for host in ["localhost:8080", "127.0.0.1", "[::1]:9"] {
        let r = api
            .send(
                api.req(reqwest::Method::GET, "/v1/runs")
                    .header("host", host),
            )
            .await;
        assert_eq!(r.status, 200, "{host}: {}", r.body);
    }
    let local_page = api
        .send(
            api.req(reqwest::Method::GET, "/v1/runs")
                .header("origin", "http://localhost:3000"),
        )
        .await;
    assert_eq!(local_page.status, 200);
    app.stop().await;
}

#[tokio::test]
async fn with_nats_down_writes_still_answer_and_readiness_reports_the_bus() {
    let mut nats = baton_testkit::TestNats::start()
        .await
        .expect("private nats");
    let url = nats.url();
    let app = TestApp::team_with_nats(&url).await;
    let (_, api) = app.tenant(baton_core::Role::Owner).await;
    let agent = api.agent(&[("hi", 0, false), ("again", 0, false)]).await;
    assert_eq!(api.get("/readyz").await.body["bus"], "ok");
    nats.stop();
    let run = api.run(&agent, Some("hello")).await;
    api.wait_status(&run, "waiting").await;
    assert_eq!(api.message(&run, "still there?", None).await.status, 201);
    let ready = api.get("/readyz").await;
    assert_eq!(ready.status, 200, "{}", ready.body);
    assert_eq!(ready.body["bus"], "unavailable");
    app.stop().await;
}

#[tokio::test]
async fn every_answer_carries_the_security_headers() {
    let app = TestApp::embedded().await;
    let api = app.anonymous();
    let agent = api.agent(&[("hi", 0, false)]).await;
    let run = api.run(&agent, None).await;
    let client = baton_testkit::http_client();
    let paths = [
        ("/livez", None),
        ("/v1/agents", None),
        ("/v1/nothing-here", None),
        (
            &*format!("/v1/runs/{run}/events"),
            Some("text/event-stream"),
        ),
    ];
    for (path, accept) in paths {
        let mut req = client.get(format!("{}{path}", app.base));
        if let Some(a) = accept {
            req = req.header("accept", a);
        }
        let res = req
            .timeout(std::time::Duration::from_secs(5))
            .send()
            .await
            .expect("answer");
        let h = res.headers();
        let get = |n: &str| h.get(n).and_then(|v| v.to_str().ok()).map(str::to_owned);
        assert_eq!(
            get("x-content-type-options").as_deref(),
            Some("nosniff"),
            "{path}"
        );
        assert_eq!(get("x-frame-options").as_deref(), Some("DENY"), "{path}");
        assert_eq!(
            get("content-security-policy").as_deref(),
            Some("default-src 'none'; frame-ancestors 'none'"),
            "{path}"
        );
        assert!(get("cache-control").is_some(), "{path}");
    }
    app.stop().await;
}
