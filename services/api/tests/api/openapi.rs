//! The OpenAPI document at `/openapi.json` describes the router: every operation it lists
//! is served, under a tag it declares.

use crate::support::{Anonymous, TestApp};
use axum::body::Body;
use axum::http::{Method, header};
use serde_json::Value;

/// `template` with each `{param}` filled: a fresh id, or a secret's name.
fn concrete(template: &str) -> String {
    template
        .split('/')
        .map(|segment| match segment.strip_prefix('{') {
            Some("name}") => "shop_token".to_string(),
            Some(_) => uuid::Uuid::now_v7().to_string(),
            None => segment.to_string(),
        })
        .collect::<Vec<_>>()
        .join("/")
}

#[tokio::test]
async fn every_operation_of_the_openapi_document_is_served() {
    let (app, t) = TestApp::with_tenant().await;
    let doc = app
        .get("/openapi.json", &Anonymous)
        .await
        .expect_status(200);
    assert_eq!(doc.headers[header::CONTENT_TYPE], "application/json");
    assert!(
        doc.body["openapi"]
            .as_str()
            .is_some_and(|v| v.starts_with("3.1")),
        "{}",
        doc.body["openapi"]
    );
    // Operations are grouped by the tags the document declares.
    let declared: Vec<Value> = doc.body["tags"]
        .as_array()
        .expect("tags")
        .iter()
        .map(|t| t["name"].clone())
        .collect();
    let paths = doc.body["paths"].as_object().expect("paths");
    let mut served = Vec::new();
    for (template, item) in paths {
        let path = concrete(template);
        for (method, op) in item.as_object().expect("a path item") {
            for tag in op["tags"].as_array().expect("tags") {
                assert!(
                    declared.contains(tag),
                    "{method} {template}: tag {tag} is undeclared"
                );
            }
            let method: Method = method.to_uppercase().parse().expect("a method");
            let req = app
                .request(method.clone(), &path, &t.owner)
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from("{}"))
                .expect("a request");
            let r = app.send(req).await;
            let code = r.body.get("code").and_then(Value::as_str);
            assert!(
                !matches!(code, Some("route_not_found" | "method_not_allowed")),
                "{method} {template} is documented but not served: {}",
                r.text
            );
            served.push(format!("{method} {template}"));
        }
    }
    for op in [
        "GET /v1/runs/{run_id}/events",
        "POST /v1/login",
        "GET /readyz",
    ] {
        assert!(
            served.iter().any(|s| s == op),
            "{op} is documented: {served:?}"
        );
    }
    assert!(served.len() >= 30, "{served:?}");
}
