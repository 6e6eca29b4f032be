//! Webhooks as a receiver sees them, in the team tier: the receiver
//! (`tests/webhooks/receiver.py`) verifies every delivery with the Standard Webhooks
//! library from PyPI, not Baton's code. Subscribed events arrive verified and nothing of
//! an unsubscribed type does; while the receiver answers 503 and while it is gone the
//! delivery is retried with the same `webhook-id` until it gets through; during a
//! rotation's overlap both secrets verify, after it only the new one; a URL at a denied
//! address is refused.

use crate::common::TestApp;
use baton_core::Role;
use baton_testkit::{Api, Received, WebhookReceiver};
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// Waits until `done` holds for what the receiver got.
async fn received_until(
    rx: &WebhookReceiver,
    what: &str,
    done: impl Fn(&[Received]) -> bool,
) -> Vec<Received> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = rx.received();
        if done(&got) {
            return got;
        }
        assert!(Instant::now() < deadline, "never {what}: {got:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn of_type<'a>(got: &'a [Received], t: &str) -> Vec<&'a Received> {
    got.iter()
        .filter(|r| r.event_type.as_deref() == Some(t))
        .collect()
}

async fn completed_run(api: &Api, agent: &str) -> String {
    let run = api.run(agent, Some("go")).await;
    api.wait_status(&run, "completed").await;
    run
}

#[tokio::test]
async fn a_standard_webhooks_receiver_verifies_every_delivery_through_outages_and_rotations() {
    let Some(mut rx) = WebhookReceiver::start(Path::new(ROOT)).await else {
        return;
    };
    let app = TestApp::team_with(&baton_testkit::replicas::nats_url(), |c| {
        c.webhooks.poll = Duration::from_millis(100);
        c.webhooks.retry_base = Duration::from_millis(200);
        c.webhooks.retry_max = Duration::from_millis(400);
    })
    .await;
    let (_, api) = app.tenant(Role::Owner).await;

    // A denied address is refused when the endpoint is registered.
    let denied = api
        .post(
            "/v1/webhooks",
            json!({"url": "http://169.254.169.254/hook", "events": ["run.completed"]}),
        )
        .await;
    assert_eq!(denied.status, 422, "{}", denied.body);
    assert_eq!(denied.body["code"], "egress_denied");

    let made = api
        .post(
            "/v1/webhooks",
            json!({"url": rx.url("in"), "events": ["run.completed", "run.requires_action"]}),
        )
        .await;
    assert_eq!(made.status, 201, "{}", made.body);
    let hook = made.body["webhook"]["id"].as_str().expect("id").to_string();
    let first = made.body["secret"].as_str().expect("secret").to_string();
    rx.set_secrets(&[&first]);

    // Subscribed: a completed run and a run waiting for a client tool. Not subscribed: a
    // cancelled run.
    let agent = api.agent(&[("done", 0, true)]).await;
    let tool = api
        .post(
            "/v1/tools",
            json!({"name": "ask", "effect": "read", "input_schema": {"type": "object"},
                   "kind": {"kind": "client"}}),
        )
        .await;
    assert_eq!(tool.status, 201, "{}", tool.body);
    let asking = api
        .post(
            "/v1/agents",
            json!({"name": "asking", "tools": [tool.body["id"]],
                   "provider": {"kind": "scripted", "replies": [
                       {"tool_calls": [{"name": "ask", "arguments": {}}]}]}}),
        )
        .await;
    assert_eq!(asking.status, 201, "{}", asking.body);
    let asking = asking.body["id"].as_str().expect("id").to_string();
    let idle = api.run(&agent, None).await;
    let cancelled = api
        .post(&format!("/v1/runs/{idle}/cancel"), json!({}))
        .await;
    assert_eq!(cancelled.status, 200);
    completed_run(&api, &agent).await;
    let waiting = api.run(&asking, Some("ask me")).await;
    api.wait_status(&waiting, "requires_action").await;
    let got = received_until(&rx, "both subscribed events", |g| {
        !of_type(g, "run.completed").is_empty() && !of_type(g, "run.requires_action").is_empty()
    })
    .await;
    assert!(
        got.iter().all(|r| r.verified_by == [0] && r.status == 204),
        "{got:?}"
    );

    // Down (503), then gone (connection refused), then back: the same delivery, with the
    // same webhook-id, until it gets through.
    rx.set_down(true);
    let before = rx.received().len();
    completed_run(&api, &agent).await;
    received_until(&rx, "an attempt while down", |g| {
        g[before..].iter().any(|r| r.status == 503)
    })
    .await;
    rx.kill().await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    rx.set_down(false);
    rx.start_again().await;
    let got = received_until(&rx, "the delivery after the outage", |g| {
        g[before..].iter().any(|r| r.status == 204)
    })
    .await;
    let late: Vec<&Received> = got[before..].iter().collect();
    let ids: Vec<&str> = late.iter().filter_map(|r| r.id.as_deref()).collect();
    assert!(
        ids.len() >= 2 && ids.iter().all(|i| *i == ids[0]),
        "{late:?}"
    );
    let delivery = ids[0];
    // The receiver has answered; Baton records the answer a moment later.
    let deadline = Instant::now() + Duration::from_secs(10);
    let detail = loop {
        let detail = api
            .get(&format!("/v1/webhooks/{hook}/deliveries/{delivery}"))
            .await;
        if detail.body["delivery"]["state"] == "delivered" || Instant::now() > deadline {
            break detail;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        detail.body["delivery"]["state"], "delivered",
        "{}",
        detail.body
    );
    assert!(detail.body["attempts"].as_array().map(Vec::len) >= Some(2));

    // Rotation with an overlap: both secrets verify; without one: only the new.
    let rotated = api
        .post(
            &format!("/v1/webhooks/{hook}/rotate-secret"),
            json!({"overlap_secs": 3600}),
        )
        .await;
    let second = rotated.body["secret"].as_str().expect("secret").to_string();
    rx.set_secrets(&[&first, &second]);
    let before = rx.received().len();
    completed_run(&api, &agent).await;
    let got = received_until(&rx, "a delivery in the overlap", |g| g.len() > before).await;
    assert_eq!(got[before].verified_by, [0, 1], "{:?}", got[before]);
    let rotated = api
        .post(
            &format!("/v1/webhooks/{hook}/rotate-secret"),
            json!({"overlap_secs": 0}),
        )
        .await;
    let third = rotated.body["secret"].as_str().expect("secret").to_string();
    rx.set_secrets(&[&first, &second, &third]);
    let before = rx.received().len();
    completed_run(&api, &agent).await;
    let got = received_until(&rx, "a delivery after the overlap", |g| g.len() > before).await;
    assert_eq!(got[before].verified_by, [2], "{:?}", got[before]);

    // Nothing of the unsubscribed type ever arrived, nor was it recorded.
    assert!(of_type(&rx.received(), "run.cancelled").is_empty());
    let all = api
        .get(&format!("/v1/webhooks/{hook}/deliveries?limit=500"))
        .await;
    let types: Vec<Value> = all.body["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|d| d["event_type"].clone())
        .collect();
    assert!(!types.contains(&json!("run.cancelled")), "{types:?}");
    app.stop().await;
}
