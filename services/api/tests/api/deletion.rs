//! `DELETE /v1/runs/{run_id}`: admins only, another tenant's run is not found, and a live
//! stream of a run whose `run.deleted` never reached the bus still ends with it, once
//! silence sends the follower to the database and it finds the run gone.

use crate::support::{TestApp, assert_problem};
use axum::body::to_bytes;
use axum::http::Method;
use baton_core::Role;
use baton_core::model::{AuditAction, AuditEntry};
use baton_core::ports::{EventLog, RunReader};
use serde_json::json;
use std::time::Duration;

#[tokio::test]
async fn only_admins_delete_runs_and_only_their_tenants() {
    let (app, t) = TestApp::with_tenant().await;
    let agent = app.agent(&t.owner, json!([{"content": "x"}])).await;
    let run = app.run(&t.owner, &agent, None).await;
    let path = format!("/v1/runs/{run}");
    let member = app.key(t.id, Role::Member).await;
    let r = app
        .send_json(Method::DELETE, &path, &member, json!(null))
        .await;
    assert_problem(&r, 403, "forbidden");
    let other = app.tenant().await;
    let r = app
        .send_json(Method::DELETE, &path, &other.owner, json!(null))
        .await;
    assert_problem(&r, 404, "not_found");
    let admin = app.key(t.id, Role::Admin).await;
    let r = app
        .send_json(Method::DELETE, &path, &admin, json!(null))
        .await;
    assert_eq!(r.status.as_u16(), 204, "{}", r.text);
    let audit = app
        .get("/v1/audit?action=run.deleted", &t.owner)
        .await
        .expect_status(200);
    assert_eq!(
        audit.body["items"][0]["target"],
        run.as_str(),
        "{}",
        audit.text
    );
}

/// The run's version, read from the store.
async fn version_of(app: &TestApp, tenant: baton_core::TenantId, run: &str) -> i64 {
    let id: baton_core::RunId = run.parse().expect("a run id");
    app.store()
        .get_run(tenant, id)
        .await
        .expect("read")
        .expect("the run")
        .version
}

/// Deletes `run` (at `version`) in the store alone: nothing is published.
async fn delete_unannounced(app: &TestApp, tenant: baton_core::TenantId, run: &str, version: i64) {
    let id: baton_core::RunId = run.parse().expect("a run id");
    let audit = AuditEntry::operator(chrono::Utc::now(), AuditAction::RunDeleted, run, json!({}));
    app.store()
        .delete_run(tenant, id, version, &audit)
        .await
        .expect("delete");
}

/// The whole body of an event stream, which must end within 15 s: the idle stream
/// rechecks after its resync interval (2 s here), doubling after each quiet check.
async fn ended(res: axum::response::Response) -> String {
    let body = tokio::time::timeout(
        Duration::from_secs(15),
        to_bytes(res.into_body(), usize::MAX),
    )
    .await
    .expect("the stream ends")
    .expect("a body");
    String::from_utf8_lossy(&body).into_owned()
}

#[tokio::test]
async fn a_stream_ends_with_run_deleted_when_the_bus_never_said_so() {
    let (app, t) = TestApp::with_tenant().await;
    let agent = app.agent(&t.owner, json!([{"content": "x"}])).await;
    let run = app.run(&t.owner, &agent, None).await;
    // A client caught up with the run's events, waiting live.
    let version = version_of(&app, t.id, &run).await;
    let last = version.to_string();
    let res = app
        .open(app.events_request(&run, &t.owner, Some(&last)))
        .await;
    assert_eq!(res.status(), 200);
    delete_unannounced(&app, t.id, &run, version).await;
    let text = ended(res).await;
    assert!(text.contains("event: run.deleted"), "{text}");
    assert!(
        text.contains(&format!("id: {}", version + 1)),
        "after the run's last event: {text}"
    );
}

#[tokio::test]
async fn a_stream_resumed_on_an_ended_run_replays_what_it_read_when_it_opened() {
    let (app, t) = TestApp::with_tenant().await;
    let agent = app.agent(&t.owner, json!([{"content": "x"}])).await;
    let run = app.run(&t.owner, &agent, None).await;
    app.post(&format!("/v1/runs/{run}/cancel"), &t.owner, json!({}))
        .await
        .expect_status(200);
    // Resumed early in a run that had ended (created, cancel asked, cancelled): the
    // replay's first page is read with the run when the stream opens, so a deletion
    // right after changes nothing it sends; it ends at the run's end, exactly once.
    let res = app
        .open(app.events_request(&run, &t.owner, Some("1")))
        .await;
    assert_eq!(res.status(), 200);
    let version = version_of(&app, t.id, &run).await;
    assert_eq!(version, 3);
    delete_unannounced(&app, t.id, &run, version).await;
    let text = ended(res).await;
    assert!(!text.contains("event: run.deleted"), "{text}");
    assert!(
        text.contains("id: 2\n") && text.contains("id: 3\n") && !text.contains("id: 1\n"),
        "after the cursor, to the end: {text}"
    );
    assert_eq!(text.matches("event: run.cancelled").count(), 1, "{text}");
    // Opened after the deletion, there is no run to stream.
    let gone = app
        .open(app.events_request(&run, &t.owner, Some("1")))
        .await;
    assert_eq!(gone.status(), 404);
}
