//! Definitions that would call where the egress policy refuses are refused when made, with
//! `422 egress_denied` naming the field and the rule, and nothing is stored.

use crate::support::{TestApp, assert_problem};
use serde_json::json;

fn http_tool(url: &str) -> serde_json::Value {
    json!({"name": "lookup", "description": "d", "effect": "read",
           "input_schema": {"type": "object"}, "kind": {"kind": "http", "url": url}})
}

fn openai_agent(base_url: &str) -> serde_json::Value {
    json!({"name": "a", "provider": {"kind": "openai", "base_url": base_url, "model": "m"}})
}

#[tokio::test]
async fn a_tool_at_a_denied_address_is_refused_naming_the_rule() {
    let (app, t) = TestApp::with_tenant().await;
    for (url, rule) in [
        ("http://169.254.169.254/latest/meta-data/", "link-local"),
        ("http://[fd00:ec2::254]/", "private"),
        ("http://10.0.0.5/internal", "private"),
        ("http://user:pw@api.example.com/", "credentials in the URL"),
    ] {
        let r = app.post("/v1/tools", &t.owner, http_tool(url)).await;
        let detail = assert_problem(&r, 422, "egress_denied");
        assert!(
            detail.contains("kind.url") && detail.contains(rule),
            "{url}: {detail}"
        );
    }
    let listed = app.get("/v1/tools", &t.owner).await.expect_status(200);
    assert!(listed.items().is_empty(), "nothing was stored");
}

#[tokio::test]
async fn a_provider_base_url_is_checked_and_may_not_choose_the_path() {
    let (app, t) = TestApp::with_tenant().await;
    let r = app
        .post(
            "/v1/agents",
            &t.owner,
            openai_agent("http://192.168.1.10:8000/v1"),
        )
        .await;
    let detail = assert_problem(&r, 422, "egress_denied");
    assert!(
        detail.contains("provider.base_url") && detail.contains("private"),
        "{detail}"
    );
    for sneaky in [
        "https://api.example.com/v1?x=/admin#",
        "https://api.example.com/v1#frag",
    ] {
        let r = app.post("/v1/agents", &t.owner, openai_agent(sneaky)).await;
        let detail = assert_problem(&r, 400, "invalid_request");
        assert!(detail.contains("query or a fragment"), "{detail}");
    }
    // A public endpoint (or loopback, in the embedded tier's policy) is fine.
    app.post(
        "/v1/agents",
        &t.owner,
        openai_agent("https://api.example.com/v1"),
    )
    .await
    .expect_status(201);
}

#[tokio::test]
async fn a_tenants_allowlist_is_kept_in_matched_form_and_checked_entry_by_entry() {
    let (app, t) = TestApp::with_tenant().await;
    let empty = app
        .get("/v1/egress-allowlist", &t.owner)
        .await
        .expect_status(200);
    assert_eq!(empty.body, json!({"hosts": [], "updated_at": null}));
    let set = app
        .put(
            "/v1/egress-allowlist",
            &t.owner,
            json!({"hosts": ["API.Example.com", "*.example.org", "203.0.113.9/24", "api.example.com"]}),
        )
        .await
        .expect_status(200);
    assert_eq!(
        set.body["hosts"],
        json!(["api.example.com", "*.example.org", "203.0.113.0/24"])
    );
    assert!(set.body["updated_at"].is_string(), "{}", set.text);
    let got = app.get("/v1/egress-allowlist", &t.owner).await;
    assert_eq!(got.body, set.body);
    // Another tenant keeps its own (none).
    let other = app.tenant().await;
    let theirs = app.get("/v1/egress-allowlist", &other.owner).await;
    assert_eq!(theirs.body["hosts"], json!([]));

    // A bad entry is named, and nothing changes.
    for (hosts, says) in [
        (
            json!(["api.example.com", "https://x.example.com/"]),
            "hosts[1]",
        ),
        (json!(["-bad-.example.com"]), "hosts[0]"),
        (json!(vec!["a.example.com"; 101]), "at most 100"),
    ] {
        let r = app
            .put("/v1/egress-allowlist", &t.owner, json!({ "hosts": hosts }))
            .await;
        let detail = assert_problem(&r, 400, "invalid_request");
        assert!(detail.contains(says), "{detail}");
    }
    assert_eq!(
        app.get("/v1/egress-allowlist", &t.owner).await.body,
        set.body
    );
    // Admins only; and the change is audited.
    let viewer = app.key(t.id, baton_core::Role::Viewer).await;
    assert_problem(
        &app.get("/v1/egress-allowlist", &viewer).await,
        403,
        "forbidden",
    );
    let audit = app
        .get("/v1/audit?action=egress.allowlist_set", &t.owner)
        .await;
    assert_eq!(audit.items().len(), 1, "{}", audit.text);
    assert_eq!(audit.items()[0]["details"]["hosts"], set.body["hosts"]);
}

#[tokio::test]
async fn definitions_outside_the_allowlist_are_refused_and_it_never_widens_the_policy() {
    let (app, t) = TestApp::with_tenant().await;
    app.put(
        "/v1/egress-allowlist",
        &t.owner,
        json!({"hosts": ["api.example.com", "10.0.0.0/8", "*.models.example"]}),
    )
    .await
    .expect_status(200);
    // Outside the list: refused, naming the rule.
    for url in ["https://elsewhere.example.com/x", "http://192.0.2.1/x"] {
        let r = app.post("/v1/tools", &t.owner, http_tool(url)).await;
        let detail = assert_problem(&r, 422, "egress_denied");
        assert!(
            detail.contains("tenant's egress allowlist"),
            "{url}: {detail}"
        );
    }
    let r = app
        .post(
            "/v1/agents",
            &t.owner,
            openai_agent("https://models.example/v1"),
        )
        .await;
    assert_problem(&r, 422, "egress_denied");
    // Listed, but refused by the installation's policy all the same.
    let r = app
        .post("/v1/tools", &t.owner, http_tool("http://10.0.0.5/internal"))
        .await;
    let detail = assert_problem(&r, 422, "egress_denied");
    assert!(detail.contains("private"), "{detail}");
    // Listed and allowed.
    app.post(
        "/v1/tools",
        &t.owner,
        http_tool("https://api.example.com/lookup"),
    )
    .await
    .expect_status(201);
    app.post(
        "/v1/agents",
        &t.owner,
        openai_agent("https://eu.models.example/v1"),
    )
    .await
    .expect_status(201);
}
