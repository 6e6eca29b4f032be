//! Browser safety and request limits over real HTTP: a `Host` outside
//! `http.allowed_hosts` and a state-changing request from another site's origin are
//! refused before anything runs, configured web origins get CORS, oversize headers get
//! `431`, and a key or tenant past its rate limit gets `429` with `Retry-After`.

use crate::common::{TestApp, assert_problem};
use baton_core::Role;
use reqwest::Method;
use serde_json::json;

const SITE: &str = "https://app.example.com";

fn agent_body() -> serde_json::Value {
    json!({"name": "a", "provider": {"kind": "scripted", "replies": [{"content": "hi"}]}})
}

#[tokio::test]
async fn hosts_and_origins_outside_the_configured_lists_are_refused() {
    let app = TestApp::embedded_with(|c| {
        c.auth_required = true;
        c.http.allowed_hosts = vec!["api.example.com".into(), "127.0.0.1".into()];
        c.http.allowed_origins = vec![SITE.into()];
    })
    .await;
    let (_, api) = app.tenant(Role::Admin).await;

    let host = |h: &'static str| api.req(Method::GET, "/v1/agents").header("host", h);
    assert_problem(
        &api.send(host("evil.example")).await,
        403,
        "host_not_allowed",
    );
    assert_problem(
        &api.send(host("api.example.com.evil")).await,
        403,
        "host_not_allowed",
    );
    assert_eq!(api.send(host("api.example.com")).await.status, 200);
    assert_eq!(api.send(host("api.example.com:8443")).await.status, 200);
    // Probes come addressed to the pod's IP.
    let probe = api
        .req(Method::GET, "/readyz")
        .header("host", "10.1.2.3:8080");
    assert_eq!(api.send(probe).await.status, 200);

    let post_from = |origin: &str| {
        api.req(Method::POST, "/v1/agents")
            .header("origin", origin)
            .json(&agent_body())
    };
    let refused = api.send(post_from("https://evil.example")).await;
    assert_problem(&refused, 403, "origin_not_allowed");
    let listed = api.get("/v1/agents").await;
    assert_eq!(listed.body["items"], json!([]), "nothing was written");
    assert_eq!(api.send(post_from(SITE)).await.status, 201);
    // The API's own origin is not cross-site.
    let own = app.base.clone();
    assert_eq!(api.send(post_from(&own)).await.status, 201);
    // Reads from another site run, but without CORS headers the browser keeps the answer
    // from the page.
    let read = api
        .req(Method::GET, "/v1/agents")
        .header("origin", "https://evil.example")
        .send()
        .await
        .expect("read");
    assert_eq!(read.status(), 200);
    assert!(read.headers().get("access-control-allow-origin").is_none());
    let read = api
        .req(Method::GET, "/v1/agents")
        .header("origin", SITE)
        .send()
        .await
        .expect("read");
    assert_eq!(read.headers()["access-control-allow-origin"], SITE);

    // A preflight from the configured site is answered, allowing the API's headers.
    let preflight = baton_testkit::http_client()
        .request(Method::OPTIONS, format!("{}/v1/runs", app.base))
        .header("origin", SITE)
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "authorization,content-type",
        )
        .send()
        .await
        .expect("preflight");
    assert!(preflight.status().is_success(), "{}", preflight.status());
    let h = preflight.headers();
    assert_eq!(h["access-control-allow-origin"], SITE);
    let allowed = h["access-control-allow-headers"].to_str().unwrap_or("");
    assert!(allowed.contains("authorization"), "{allowed}");
    let preflight = baton_testkit::http_client()
        .request(Method::OPTIONS, format!("{}/v1/runs", app.base))
        .header("origin", "https://evil.example")
        .header("access-control-request-method", "POST")
        .send()
        .await
        .expect("preflight");
    assert!(
        preflight
            .headers()
            .get("access-control-allow-origin")
            .is_none()
    );
    app.stop().await;
}

#[tokio::test]
async fn oversize_headers_get_431_and_nothing_runs() {
    let app = TestApp::embedded_with(|c| c.http.header_limit_bytes = 4096).await;
    let api = app.anonymous();
    let big = "x".repeat(5000);
    let r = api
        .send(
            api.req(Method::POST, "/v1/agents")
                .header("x-padding", big)
                .json(&agent_body()),
        )
        .await;
    let detail = assert_problem(&r, 431, "headers_too_large");
    assert!(detail.contains("4096"), "{detail}");
    assert_eq!(api.get("/v1/agents").await.body["items"], json!([]));
    app.stop().await;
}

/// Sends `GET /v1/agents` with `api` until an answer is `429` (at most 50 tries: the
/// limits below allow a handful in a burst) and returns it with how many passed.
async fn until_limited(api: &baton_testkit::Api) -> (usize, reqwest::Response) {
    for passed in 0..50 {
        let r = api
            .req(Method::GET, "/v1/agents")
            .send()
            .await
            .expect("request");
        if r.status() == 429 {
            return (passed, r);
        }
        assert_eq!(r.status(), 200);
    }
    panic!("50 requests in a row passed the rate limit");
}

#[tokio::test]
async fn a_key_past_its_rate_gets_429_with_retry_after() {
    let app = TestApp::embedded_with(|c| {
        c.http.key_rate_limit = 2;
        c.http.tenant_rate_limit = 0;
    })
    .await;
    let (tenant, first) = app.tenant(Role::Viewer).await;
    let (passed, limited) = until_limited(&first).await;
    assert!(
        passed >= 4,
        "a burst of twice the rate passes first: {passed}"
    );
    let retry_after: u64 = limited.headers()["retry-after"]
        .to_str()
        .ok()
        .and_then(|s| s.parse().ok())
        .expect("Retry-After in seconds");
    assert!((1..=2).contains(&retry_after), "{retry_after}");
    assert!(limited.headers()["content-type"] == "application/problem+json");
    let body: serde_json::Value = limited.json().await.expect("problem");
    assert_eq!(body["code"], "rate_limited");
    assert!(
        body["detail"].as_str().unwrap_or("").contains("API key"),
        "{body}"
    );
    // Another key of the same tenant has its own budget.
    let second = baton_testkit::Api::new(
        &app.base,
        Some(app.key(tenant, Role::Viewer, None, None).await),
    );
    assert_eq!(second.get("/v1/agents").await.status, 200);
    app.stop().await;
}

#[tokio::test]
async fn a_tenants_keys_share_its_rate() {
    let app = TestApp::embedded_with(|c| {
        c.http.key_rate_limit = 0;
        c.http.tenant_rate_limit = 1;
    })
    .await;
    let (tenant, first) = app.tenant(Role::Viewer).await;
    let (_, limited) = until_limited(&first).await;
    let body: serde_json::Value = limited.json().await.expect("problem");
    assert!(
        body["detail"].as_str().unwrap_or("").contains("tenant"),
        "{body}"
    );
    // A new key of the tenant is held to what is left of the tenant's budget ...
    let second = baton_testkit::Api::new(
        &app.base,
        Some(app.key(tenant, Role::Viewer, None, None).await),
    );
    let (passed, _) = until_limited(&second).await;
    assert!(passed <= 2, "the tenant's burst is spent: {passed} passed");
    // ... while another tenant has its own.
    let (_, other) = app.tenant(Role::Viewer).await;
    assert_eq!(other.get("/v1/agents").await.status, 200);
    app.stop().await;
}
