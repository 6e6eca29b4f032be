//! `/v1/webhooks` and the deliverer: endpoints are checked (the egress policy included)
//! and get a secret shown once; events reach the endpoints subscribed to them, signed
//! under every secret in force, and no other; failed attempts back off, fail, and
//! disable an endpoint that keeps failing; deliveries are listed and replayed. The
//! receiver is a local HTTP server; the deliverer's rounds are run by the test.

use crate::support::{TestApp, assert_problem};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use baton_core::Role;
use baton_core::webhooks::{WebhookOptions, Webhooks, sign};
use baton_testkit::{Behaviour, ToolRequest, ToolServer};
use serde_json::{Value, json};
use std::time::Duration;

fn secret_bytes(shown: &str) -> Vec<u8> {
    let b64 = shown.strip_prefix("whsec_").expect("a whsec_ secret");
    STANDARD.decode(b64).expect("base64")
}

/// Whether `secret` signed the request, by one of its `webhook-signature` entries.
fn signed_by(req: &ToolRequest, secret: &str) -> bool {
    let header = |name: &str| {
        req.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let (id, ts) = (header("webhook-id"), header("webhook-timestamp"));
    let body = serde_json::to_vec(&req.arguments).expect("body");
    let want = sign::signature(
        &secret_bytes(secret),
        &id,
        ts.parse().expect("seconds"),
        &body,
    );
    header("webhook-signature").split(' ').any(|s| s == want)
}

async fn webhook(app: &TestApp, auth: &str, url: &str, events: Value) -> (String, String) {
    let r = app
        .post("/v1/webhooks", auth, json!({"url": url, "events": events}))
        .await
        .expect_status(201);
    (r.str("/webhook/id"), r.str("/secret"))
}

/// A new idle run of `agent`, cancelled: one `run.cancelled` event.
async fn cancelled_run(app: &TestApp, auth: &str, agent: &str) -> String {
    let run = app.run(auth, agent, None).await;
    app.post(&format!("/v1/runs/{run}/cancel"), auth, json!({}))
        .await
        .expect_status(200);
    run
}

/// A deliverer whose retries come after a few milliseconds.
fn quick(app: &TestApp, disable_after: u32) -> Webhooks {
    Webhooks {
        options: WebhookOptions {
            retry_base: Duration::from_millis(5),
            retry_max: Duration::from_millis(20),
            disable_after,
            ..WebhookOptions::default()
        },
        ..app.webhooks().clone()
    }
}

#[tokio::test]
async fn an_endpoint_gets_a_secret_shown_once_and_bad_definitions_are_refused() {
    let (app, t) = TestApp::with_tenant().await;
    let r = app
        .post(
            "/v1/webhooks",
            &t.owner,
            json!({"url": "http://127.0.0.1:9/hook", "description": "ops",
                   "events": ["run.failed", "run.completed"]}),
        )
        .await
        .expect_status(201);
    assert!(r.str("/secret").starts_with("whsec_"));
    assert_eq!(secret_bytes(&r.str("/secret")).len(), 32);
    assert_eq!(
        r.body["webhook"]["spec"]["events"],
        json!(["run.completed", "run.failed"])
    );
    let id = r.str("/webhook/id");
    let got = app
        .get(&format!("/v1/webhooks/{id}"), &t.owner)
        .await
        .expect_status(200);
    assert!(
        !got.text.contains("whsec_"),
        "the secret is never shown again"
    );
    assert_eq!(got.body["state"], "enabled");

    let cases: Vec<(Value, u16, &str, &str)> = vec![
        (
            json!({"url": "ftp://x.example/", "events": ["run.completed"]}),
            400,
            "invalid_request",
            "url must be",
        ),
        (
            json!({"url": "http://127.0.0.1:9/", "events": []}),
            400,
            "invalid_request",
            "at least one",
        ),
        (
            json!({"url": "http://127.0.0.1:9/", "events": ["run.failed", "run.failed"]}),
            400,
            "invalid_request",
            "twice",
        ),
        (
            json!({"url": "http://127.0.0.1:9/", "events": ["run.exploded"]}),
            400,
            "invalid_body",
            "unknown variant",
        ),
        (
            json!({"url": "http://169.254.169.254/latest/meta-data", "events": ["run.completed"]}),
            422,
            "egress_denied",
            "url",
        ),
    ];
    for (body, status, code, why) in cases {
        let r = app.post("/v1/webhooks", &t.owner, body.clone()).await;
        let detail = assert_problem(&r, status, code);
        assert!(detail.contains(why), "{body}: {detail}");
    }
    let member = app.key(t.id, Role::Member).await;
    let r = app.get("/v1/webhooks", &member).await;
    assert_problem(&r, 403, "forbidden");
    let stranger = app.tenant().await;
    let r = app
        .get(&format!("/v1/webhooks/{id}"), &stranger.owner)
        .await;
    assert_problem(&r, 404, "not_found");
    let listed = app.get("/v1/webhooks", &t.owner).await.expect_status(200);
    assert_eq!(listed.items().len(), 1, "nothing half-made by the refusals");
}

#[tokio::test]
async fn events_reach_the_endpoints_subscribed_to_them_signed_and_no_other() {
    let (app, t) = TestApp::with_tenant().await;
    let receiver = ToolServer::start().await;
    let (done_hook, done_secret) = webhook(
        &app,
        &t.owner,
        &receiver.url("done"),
        json!(["run.completed"]),
    )
    .await;
    webhook(
        &app,
        &t.owner,
        &receiver.url("cancelled"),
        json!(["run.cancelled"]),
    )
    .await;
    // Another tenant's endpoint hears nothing of this tenant's runs.
    let stranger = app.tenant().await;
    webhook(
        &app,
        &stranger.owner,
        &receiver.url("stranger"),
        json!(["run.completed"]),
    )
    .await;

    let agent = app
        .agent(&t.owner, json!([{"content": "done", "complete_run": true}]))
        .await;
    let run = app.run(&t.owner, &agent, Some("go")).await;
    app.wait_run(&t.owner, &run, "completed").await;
    let round = app.webhooks().round().await.expect("round");
    assert_eq!((round.claimed, round.delivered), (1, 1), "{round:?}");

    let got = receiver.received("done");
    assert_eq!(got.len(), 1);
    let req = &got[0];
    assert_eq!(req.arguments["type"], "run.completed");
    assert_eq!(req.arguments["data"]["run"]["id"], run.as_str());
    assert_eq!(req.arguments["data"]["run"]["status"], "completed");
    assert_eq!(req.arguments["data"]["event"]["type"], "run.completed");
    assert!(signed_by(req, &done_secret), "{:?}", req.headers);
    assert!(receiver.received("cancelled").is_empty());
    assert!(receiver.received("stranger").is_empty());

    let deliveries = app
        .get(&format!("/v1/webhooks/{done_hook}/deliveries"), &t.owner)
        .await
        .expect_status(200);
    let d = &deliveries.items()[0];
    assert_eq!(d["state"], "delivered");
    assert_eq!(d["attempts"], 1);
    assert_eq!(d["run_id"], run.as_str());
    let webhook_id = req.headers["webhook-id"].to_str().expect("id");
    assert_eq!(d["id"], webhook_id);
    let detail = app
        .get(
            &format!("/v1/webhooks/{done_hook}/deliveries/{webhook_id}"),
            &t.owner,
        )
        .await
        .expect_status(200);
    assert_eq!(detail.body["attempts"][0]["status"], 200);
    assert!(
        detail.body["attempts"][0]["excerpt"]
            .as_str()
            .is_some_and(|e| e.chars().count() <= 200)
    );
    // Nothing more to deliver.
    assert_eq!(app.webhooks().round().await.expect("round").claimed, 0);
}

#[tokio::test]
async fn failures_back_off_then_disable_the_endpoint_and_a_replay_delivers_with_the_same_id() {
    let (app, t) = TestApp::with_tenant().await;
    let receiver = ToolServer::start().await;
    receiver.set(
        "down",
        Behaviour {
            status: 503,
            body: Some("maintenance".into()),
            ..Behaviour::default()
        },
    );
    let (hook, _) = webhook(
        &app,
        &t.owner,
        &receiver.url("down"),
        json!(["run.cancelled"]),
    )
    .await;
    let agent = app.agent(&t.owner, json!([{"content": "ok"}])).await;
    cancelled_run(&app, &t.owner, &agent).await;

    let deliverer = quick(&app, 3);
    for _ in 0..3 {
        deliverer.round().await.expect("round");
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    assert_eq!(receiver.calls("down"), 3, "three attempts, backing off");
    let w = app
        .get(&format!("/v1/webhooks/{hook}"), &t.owner)
        .await
        .expect_status(200);
    assert_eq!(w.body["state"], "disabled");
    assert!(
        w.str("/disabled_reason")
            .contains("3 attempts in a row failed"),
        "{}",
        w.body
    );
    assert!(
        w.str("/disabled_reason").contains("answered 503"),
        "{}",
        w.body
    );
    let audit = app
        .get("/v1/audit?action=webhook.disabled", &t.owner)
        .await
        .expect_status(200);
    assert_eq!(audit.item_fields("actor"), [json!("webhooks")]);

    // Disabled: the pending delivery fails without a call.
    deliverer.round().await.expect("round");
    assert_eq!(receiver.calls("down"), 3);
    let list = app
        .get(
            &format!("/v1/webhooks/{hook}/deliveries?state=failed"),
            &t.owner,
        )
        .await
        .expect_status(200);
    let id = list.items()[0]["id"].as_str().expect("id").to_string();
    assert_eq!(list.items()[0]["last_error"], "the endpoint is disabled");
    let detail = app
        .get(&format!("/v1/webhooks/{hook}/deliveries/{id}"), &t.owner)
        .await
        .expect_status(200);
    let attempts = detail.body["attempts"]
        .as_array()
        .expect("attempts")
        .clone();
    assert_eq!(attempts.len(), 4);
    assert_eq!(attempts[0]["status"], 503);
    assert_eq!(attempts[0]["excerpt"], "maintenance");

    // Back up, enabled and replayed: delivered once more, with the same webhook-id.
    receiver.set("down", Behaviour::default());
    app.post(&format!("/v1/webhooks/{hook}/enable"), &t.owner, json!({}))
        .await
        .expect_status(200);
    let replayed = app
        .post(
            &format!("/v1/webhooks/{hook}/deliveries/{id}/replay"),
            &t.owner,
            json!({}),
        )
        .await
        .expect_status(200);
    assert_eq!(replayed.body["delivery"]["state"], "pending");
    deliverer.round().await.expect("round");
    let got = receiver.received("down");
    assert_eq!(got.len(), 4);
    let ids: Vec<&str> = got
        .iter()
        .map(|r| r.headers["webhook-id"].to_str().expect("id"))
        .collect();
    assert!(ids.iter().all(|i| *i == id), "{ids:?}");
    let after = app
        .get(&format!("/v1/webhooks/{hook}/deliveries/{id}"), &t.owner)
        .await
        .expect_status(200);
    assert_eq!(after.body["delivery"]["state"], "delivered");
    let w = app
        .get(&format!("/v1/webhooks/{hook}"), &t.owner)
        .await
        .expect_status(200);
    assert_eq!(w.body["consecutive_failures"], 0);
}

#[tokio::test]
async fn a_rotated_out_secret_signs_beside_the_new_one_for_the_overlap_only() {
    let (app, t) = TestApp::with_tenant().await;
    let receiver = ToolServer::start().await;
    let (hook, first) = webhook(&app, &t.owner, &receiver.url("r"), json!(["run.cancelled"])).await;
    let agent = app.agent(&t.owner, json!([{"content": "ok"}])).await;
    let rx = &receiver;
    let cancel = |n: u32| {
        let (app, auth, agent) = (&app, &t.owner, &agent);
        async move {
            cancelled_run(app, auth, agent).await;
            app.webhooks().round().await.expect("round");
            let got = rx.received("r");
            assert_eq!(got.len(), n as usize);
            got.last().cloned().expect("a request")
        }
    };
    let rotated = app
        .post(
            &format!("/v1/webhooks/{hook}/rotate-secret"),
            &t.owner,
            json!({"overlap_secs": 3600}),
        )
        .await
        .expect_status(200);
    let second = rotated.str("/secret");
    assert_ne!(first, second);
    assert!(rotated.body["webhook"]["previous_secret_expires_at"].is_string());
    let during = cancel(1).await;
    assert!(signed_by(&during, &first) && signed_by(&during, &second));

    let rotated = app
        .post(
            &format!("/v1/webhooks/{hook}/rotate-secret"),
            &t.owner,
            json!({"overlap_secs": 0}),
        )
        .await
        .expect_status(200);
    let third = rotated.str("/secret");
    let after = cancel(2).await;
    assert!(signed_by(&after, &third));
    assert!(!signed_by(&after, &second) && !signed_by(&after, &first));
    let r = app
        .post(
            &format!("/v1/webhooks/{hook}/rotate-secret"),
            &t.owner,
            json!({"overlap_secs": 700000}),
        )
        .await;
    assert_problem(&r, 400, "invalid_request");
}

#[tokio::test]
async fn a_schedule_pausing_itself_is_told_to_its_subscribers() {
    let (app, t) = TestApp::with_tenant().await;
    let receiver = ToolServer::start().await;
    webhook(
        &app,
        &t.owner,
        &receiver.url("s"),
        json!(["schedule.paused"]),
    )
    .await;
    let agent = app.agent(&t.owner, json!([{"content": "ok"}])).await;
    let s = app
        .post(
            "/v1/schedules",
            &t.owner,
            json!({"name": "n", "agent_id": agent, "message": "m", "cron": "0 9 * * *"}),
        )
        .await
        .expect_status(201);
    let id = s.str("/id");
    app.post(&format!("/v1/schedules/{id}/pause"), &t.owner, json!({}))
        .await
        .expect_status(200);
    app.webhooks().round().await.expect("round");
    let got = receiver.received("s");
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].arguments["type"], "schedule.paused");
    assert_eq!(got[0].arguments["data"]["schedule"]["id"], id.as_str());
    assert_eq!(got[0].arguments["data"]["schedule"]["state"], "paused");
}

#[tokio::test]
async fn a_delivery_failing_past_its_retry_period_is_failed_and_no_longer_attempted() {
    let (app, t) = TestApp::with_tenant().await;
    let receiver = ToolServer::start().await;
    receiver.set(
        "flaky",
        Behaviour {
            status: 500,
            ..Behaviour::default()
        },
    );
    let (hook, _) = webhook(
        &app,
        &t.owner,
        &receiver.url("flaky"),
        json!(["run.cancelled"]),
    )
    .await;
    let agent = app.agent(&t.owner, json!([{"content": "ok"}])).await;
    cancelled_run(&app, &t.owner, &agent).await;
    let deliverer = Webhooks {
        options: WebhookOptions {
            retry_for: Duration::from_millis(1),
            ..quick(&app, 100).options
        },
        ..app.webhooks().clone()
    };
    let round = deliverer.round().await.expect("round");
    assert_eq!((round.claimed, round.failed), (1, 1));
    let list = app
        .get(&format!("/v1/webhooks/{hook}/deliveries"), &t.owner)
        .await
        .expect_status(200);
    assert_eq!(list.items()[0]["state"], "failed");
    assert_eq!(list.items()[0]["last_status"], 500);
    assert_eq!(list.items()[0]["next_attempt_at"], Value::Null);
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(deliverer.round().await.expect("round").claimed, 0);
    assert_eq!(receiver.calls("flaky"), 1);
    let w = app
        .get(&format!("/v1/webhooks/{hook}"), &t.owner)
        .await
        .expect_status(200);
    assert_eq!(
        w.body["state"], "enabled",
        "one failure does not disable it"
    );
    assert_eq!(w.body["consecutive_failures"], 1);
}

#[tokio::test]
async fn a_tenant_has_at_most_twenty_endpoints() {
    let (app, t) = TestApp::with_tenant().await;
    for i in 0..baton_core::webhooks::MAX_ENDPOINTS {
        webhook(
            &app,
            &t.owner,
            &format!("http://127.0.0.1:9/{i}"),
            json!(["run.completed"]),
        )
        .await;
    }
    let r = app
        .post(
            "/v1/webhooks",
            &t.owner,
            json!({"url": "http://127.0.0.1:9/one-more", "events": ["run.completed"]}),
        )
        .await;
    let detail = assert_problem(&r, 400, "invalid_request");
    assert!(detail.contains("20 webhook endpoints"), "{detail}");
}
