//! Tenancy and credentials: another tenant's resources answer 404, never 403; bad
//! credentials answer 401; a role below the action's answers 403.

use crate::common::{Api, TestApp, assert_problem};
use baton_core::Role;
use chrono::{Duration, Utc};
use serde_json::json;

#[tokio::test]
async fn another_tenants_agents_runs_messages_and_events_answer_404() {
    let app = TestApp::team().await;
    let (_, alice) = app.tenant(Role::Owner).await;
    let (_, mallory) = app.tenant(Role::Owner).await;
    let agent = alice.agent(&[("hi", 0, false), ("again", 0, false)]).await;
    let run = alice.run(&agent, Some("secret")).await;
    alice.wait_status(&run, "waiting").await;

    for path in [
        format!("/v1/agents/{agent}"),
        format!("/v1/runs/{run}"),
        format!("/v1/runs/{run}/messages"),
        format!("/v1/runs/{run}/events"),
    ] {
        assert_problem(&mallory.get(&path).await, 404, "not_found");
    }
    let sse = mallory.send(mallory.sse_req(&run, None)).await;
    assert_problem(&sse, 404, "not_found");
    let post = mallory.message(&run, "injected", Some("x")).await;
    assert_problem(&post, 404, "not_found");
    let cancel = mallory
        .post(&format!("/v1/runs/{run}/cancel"), json!({}))
        .await;
    assert_problem(&cancel, 404, "not_found");
    let foreign_agent = mallory.post("/v1/runs", json!({"agent_id": agent})).await;
    assert_problem(&foreign_agent, 404, "not_found");
    let listed = mallory.get("/v1/runs").await;
    assert_eq!(listed.body["items"], json!([]));
    let agents = mallory.get("/v1/agents").await;
    assert_eq!(agents.body["items"], json!([]));

    // Nothing Mallory did reached Alice's run.
    assert_eq!(alice.messages(&run).await.len(), 2);
    let status = alice.get(&format!("/v1/runs/{run}")).await;
    assert_eq!(status.body["status"], "waiting");
    app.stop().await;
}

#[tokio::test]
async fn missing_malformed_unknown_expired_and_revoked_credentials_answer_401() {
    let app = TestApp::team().await;
    let (tenant, _) = app.tenant(Role::Owner).await;
    let expired = app
        .key(
            tenant,
            Role::Owner,
            Some(Utc::now() - Duration::minutes(1)),
            None,
        )
        .await;
    let revoked = app
        .key(
            tenant,
            Role::Owner,
            None,
            Some(Utc::now() - Duration::minutes(1)),
        )
        .await;
    let unknown = baton_core::crypto::tokens::issue_token().token;
    let cases = [
        (None, "missing credentials"),
        (Some("not-a-key".to_string()), "malformed"),
        (Some(unknown), "not valid"),
        (Some(expired), "expired"),
        (Some(revoked), "revoked"),
    ];
    for (token, says) in cases {
        let api = Api::new(&app.base, token);
        let detail = assert_problem(&api.get("/v1/runs").await, 401, "unauthorized");
        assert!(detail.contains(says), "{detail:?} should say {says:?}");
    }
    let basic = Api::new(&app.base, None);
    let r = basic
        .send(
            basic
                .req(reqwest::Method::GET, "/v1/runs")
                .header("authorization", "Basic eDp5"),
        )
        .await;
    assert_problem(&r, 401, "unauthorized");
    // The scheme's case does not matter (RFC 9110).
    let valid = app.key(tenant, Role::Viewer, None, None).await;
    let r = basic
        .send(
            basic
                .req(reqwest::Method::GET, "/v1/runs")
                .header("authorization", format!("bearer {valid}")),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    app.stop().await;
}

#[tokio::test]
async fn a_viewer_reads_but_cannot_write_and_a_member_cannot_manage_agents() {
    let app = TestApp::team().await;
    let (tenant, owner) = app.tenant(Role::Owner).await;
    let viewer = Api::new(
        &app.base,
        Some(app.key(tenant, Role::Viewer, None, None).await),
    );
    let member = Api::new(
        &app.base,
        Some(app.key(tenant, Role::Member, None, None).await),
    );
    let agent = owner.agent(&[("hi", 0, false)]).await;
    let run = member.run(&agent, None).await;
    assert_eq!(viewer.get(&format!("/v1/runs/{run}")).await.status, 200);
    assert_problem(&viewer.message(&run, "no", None).await, 403, "forbidden");
    assert_problem(
        &viewer.post("/v1/runs", json!({"agent_id": agent})).await,
        403,
        "forbidden",
    );
    let r = member
        .post(
            "/v1/agents",
            json!({"name": "x", "provider": {"kind": "scripted", "replies": [{"content": "y"}]}}),
        )
        .await;
    assert_problem(&r, 403, "forbidden");
    assert_eq!(member.message(&run, "yes", None).await.status, 201);
    app.stop().await;
}
