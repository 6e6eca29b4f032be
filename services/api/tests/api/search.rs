//! Run metadata and search over HTTP: labels set at creation and patched, the run list
//! narrowed by agent, status, labels, title and time, and every bad label or filter
//! refused with what was wrong and nothing written. (The store's answers to generated
//! filters are checked in the store contract suite.)

use crate::support::{TestApp, assert_problem};
use serde_json::{Value, json};

fn ids(r: &crate::support::Reply) -> Vec<&str> {
    r.items()
        .iter()
        .map(|i| i["id"].as_str().expect("id"))
        .collect()
}

async fn create(app: &TestApp, key: &str, body: Value) -> String {
    app.post("/v1/runs", key, body)
        .await
        .expect_status(201)
        .str("/run/id")
}

#[tokio::test]
async fn labels_set_at_creation_and_patched_find_the_runs() {
    let (app, t) = TestApp::with_tenant().await;
    let (a, b) = (
        app.agent(&t.owner, json!([{"content": "x"}])).await,
        app.agent(&t.owner, json!([{"content": "y"}])).await,
    );
    let refund = create(
        &app,
        &t.owner,
        json!({"agent_id": a, "title": "Refund for order 1042",
            "metadata": {"team": "billing", "customer": "c-1"}}),
    )
    .await;
    let shipping = create(
        &app,
        &t.owner,
        json!({"agent_id": b, "title": "Shipping delay", "metadata": {"team": "support"}}),
    )
    .await;
    let plain = create(&app, &t.owner, json!({"agent_id": a})).await;

    let r = app.get(&format!("/v1/runs/{refund}"), &t.owner).await;
    assert_eq!(
        r.body["metadata"],
        json!({"team": "billing", "customer": "c-1"})
    );
    let r = app.get(&format!("/v1/runs/{plain}"), &t.owner).await;
    assert_eq!(r.body["metadata"], json!({}), "always present");

    for (query, want) in [
        ("metadata=team:billing", vec![refund.as_str()]),
        ("metadata=team:billing&metadata=customer:c-1", vec![&refund]),
        ("metadata=team:billing&metadata=customer:c-2", vec![]),
        ("metadata=team:support", vec![&shipping]),
        (&format!("agent_id={a}"), vec![&plain, &refund]),
        ("q=REFUND", vec![&refund]),
        ("q=delay&metadata=team:support", vec![&shipping]),
        ("status=waiting&metadata=team:support", vec![&shipping]),
    ] {
        let r = app
            .get(&format!("/v1/runs?{query}"), &t.owner)
            .await
            .expect_status(200);
        assert_eq!(ids(&r), want, "{query}: {}", r.text);
    }

    // A merge patch: set one key, remove another, keep the rest; the title too.
    let patched = app
        .patch(
            &format!("/v1/runs/{refund}"),
            &t.owner,
            json!({"title": "Refund done", "metadata": {"customer": null, "state": "done"}}),
        )
        .await
        .expect_status(200);
    assert_eq!(patched.body["title"], "Refund done");
    assert_eq!(
        patched.body["metadata"],
        json!({"team": "billing", "state": "done"})
    );
    let r = app.get("/v1/runs?metadata=state:done", &t.owner).await;
    assert_eq!(ids(&r), vec![refund.as_str()]);
    let r = app.get("/v1/runs?q=refund%20done", &t.owner).await;
    assert_eq!(ids(&r), vec![refund.as_str()]);
    let events = app
        .get(&format!("/v1/runs/{refund}/events"), &t.owner)
        .await;
    let last = events.body["events"]
        .as_array()
        .and_then(|e| e.last())
        .cloned()
        .unwrap_or_default();
    assert_eq!(last["type"], "run.updated", "{}", events.text);

    // An ended run can still be labelled; a patch that changes nothing appends nothing.
    app.post(&format!("/v1/runs/{plain}/cancel"), &t.owner, json!({}))
        .await
        .expect_status(200);
    let labelled = app
        .patch(
            &format!("/v1/runs/{plain}"),
            &t.owner,
            json!({"metadata": {"reviewed": "yes"}}),
        )
        .await
        .expect_status(200);
    assert_eq!(labelled.body["status"], "cancelled");
    // Its stream, resumed after the terminal event, hands out the change and ends.
    let after = labelled.body["version"].as_i64().expect("version") - 1;
    let after = after.to_string();
    let streamed = app
        .send(app.events_request(&plain, &t.owner, Some(&after)))
        .await;
    assert!(
        streamed.text.contains("event: run.updated"),
        "{}",
        streamed.text
    );
    let again = app
        .patch(
            &format!("/v1/runs/{plain}"),
            &t.owner,
            json!({"metadata": {"reviewed": "yes"}}),
        )
        .await
        .expect_status(200);
    assert_eq!(again.body["version"], labelled.body["version"]);
}

#[tokio::test]
async fn labels_change_while_a_turn_is_queued_or_running() {
    let (app, t) = TestApp::with_tenant().await;
    let agent = app
        .agent(&t.owner, json!([{"content": "late", "delay_ms": 60_000}]))
        .await;
    let run = app.run(&t.owner, &agent, Some("go")).await;
    let r = app
        .patch(
            &format!("/v1/runs/{run}"),
            &t.owner,
            json!({"metadata": {"k": "v"}}),
        )
        .await
        .expect_status(200);
    assert_eq!(r.body["metadata"], json!({"k": "v"}), "{}", r.text);
    assert!(
        ["queued", "running"].contains(&r.body["status"].as_str().unwrap_or_default()),
        "{}",
        r.text
    );
}

#[tokio::test]
async fn bad_labels_and_filters_are_refused_with_nothing_written() {
    let (app, t) = TestApp::with_tenant().await;
    let agent = app.agent(&t.owner, json!([{"content": "x"}])).await;
    let many: serde_json::Map<String, Value> =
        (0..17).map(|i| (format!("k{i}"), json!("v"))).collect();
    for (metadata, says) in [
        (json!({"bad key": "v"}), "metadata key"),
        (json!({"k": "v".repeat(513)}), "longer than 512"),
        (Value::Object(many), "at most 16 keys"),
        (json!({"k": 1}), "metadata"),
    ] {
        let r = app
            .post(
                "/v1/runs",
                &t.owner,
                json!({"agent_id": agent, "metadata": metadata}),
            )
            .await;
        assert!(r.status == 400, "{}", r.text);
        let detail = r.body["detail"].as_str().unwrap_or_default();
        assert!(detail.contains(says), "{says}: {detail}");
    }
    let r = app.get("/v1/runs", &t.owner).await;
    assert!(r.items().is_empty(), "{}", r.text);

    let run = create(&app, &t.owner, json!({"agent_id": agent})).await;
    let version = app.get(&format!("/v1/runs/{run}"), &t.owner).await.body["version"].clone();
    for patch in [
        json!({"metadata": {"a:b": "v"}}),
        json!({"status": "completed"}),
        json!({"title": "t".repeat(201)}),
    ] {
        let r = app
            .patch(&format!("/v1/runs/{run}"), &t.owner, patch.clone())
            .await;
        assert_eq!(r.status, 400, "{patch}: {}", r.text);
    }
    let after = app.get(&format!("/v1/runs/{run}"), &t.owner).await;
    assert_eq!(after.body["version"], version, "nothing appended");

    for (query, code) in [
        ("metadata=nocolon", "invalid_query"),
        ("agent_id=not-a-uuid", "invalid_query"),
        ("created_after=yesterday", "invalid_query"),
        ("metadata=bad%20key:v", "invalid_request"),
        ("q=", "invalid_request"),
        (
            "created_after=2026-12-02T00:00:00Z&created_before=2026-12-01T00:00:00Z",
            "invalid_request",
        ),
        (
            &(0..17)
                .map(|i| format!("metadata=k{i}:v&"))
                .collect::<String>(),
            "invalid_request",
        ),
    ] {
        let r = app.get(&format!("/v1/runs?{query}"), &t.owner).await;
        assert_problem(&r, 400, code);
    }
}

#[tokio::test]
async fn labels_stay_in_their_tenant_and_viewers_cannot_change_them() {
    let app = TestApp::new().await;
    let (a, b) = (app.tenant().await, app.tenant().await);
    let agent = app.agent(&a.owner, json!([{"content": "x"}])).await;
    let run = create(
        &app,
        &a.owner,
        json!({"agent_id": agent, "metadata": {"team": "a"}}),
    )
    .await;
    let r = app.get("/v1/runs?metadata=team:a", &b.owner).await;
    assert!(r.items().is_empty(), "{}", r.text);
    let r = app
        .patch(
            &format!("/v1/runs/{run}"),
            &b.owner,
            json!({"metadata": {"team": "b"}}),
        )
        .await;
    assert_problem(&r, 404, "not_found");
    let viewer = app.key(a.id, baton_core::Role::Viewer).await;
    let r = app
        .patch(
            &format!("/v1/runs/{run}"),
            &viewer,
            json!({"metadata": {"team": "b"}}),
        )
        .await;
    assert_problem(&r, 403, "forbidden");
    let r = app.get(&format!("/v1/runs/{run}"), &a.owner).await;
    assert_eq!(r.body["metadata"], json!({"team": "a"}));
}
