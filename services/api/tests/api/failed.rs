//! When a run fails: after its agent's `limits.max_failed_turns` failed turns in a row
//! the run ends `failed` with the last turn's error, can be found by that status, and
//! refuses further messages; a completed turn starts the count again; 0 never fails it.

use crate::support::{TestApp, assert_problem, scripted_agent};
use serde_json::{Value, json};

/// An agent whose model answers once and fails every later call (`script_exhausted`).
async fn agent(app: &TestApp, key: &str, max_failed_turns: u32) -> String {
    let mut spec = scripted_agent(json!([{"content": "once"}]));
    spec["limits"] = json!({"max_failed_turns": max_failed_turns});
    app.post("/v1/agents", key, spec)
        .await
        .expect_status(201)
        .str("/id")
}

async fn post(app: &TestApp, key: &str, run: &str, content: &str) -> Value {
    let r = app
        .post(
            &format!("/v1/runs/{run}/messages"),
            key,
            json!({"content": content, "wait": 10}),
        )
        .await
        .expect_status(201);
    r.body["result"].clone()
}

#[tokio::test]
async fn the_run_fails_at_its_agents_count_of_failed_turns_in_a_row() {
    let (app, t) = TestApp::with_tenant().await;
    let agent = agent(&app, &t.owner, 2).await;
    let first = app
        .run_waiting(&t.owner, &agent, "one", 10)
        .await
        .expect_status(201);
    let run = first.str("/run/id");
    assert_eq!(
        first.body["result"]["run"]["last_turn_outcome"],
        "completed"
    );
    assert_eq!(first.body["result"]["run"]["failed_turns"], 0);

    let second = post(&app, &t.owner, &run, "two").await;
    assert_eq!(second["outcome"], "failed");
    assert_eq!(second["run"]["status"], "waiting", "one failure: {second}");
    assert_eq!(second["run"]["failed_turns"], 1);
    assert_eq!(second["run"]["last_turn_outcome"], "failed");

    let third = post(&app, &t.owner, &run, "three").await;
    assert_eq!(third["outcome"], "failed");
    assert_eq!(third["run"]["status"], "failed", "two in a row: {third}");
    assert_eq!(third["run"]["failed_turns"], 2);
    assert_eq!(third["run"]["last_error"]["code"], "script_exhausted");

    let failed = app.get("/v1/runs?status=failed", &t.owner).await;
    let ids: Vec<&str> = failed
        .items()
        .iter()
        .filter_map(|r| r["id"].as_str())
        .collect();
    assert_eq!(ids, vec![run.as_str()]);
    let refused = app
        .post(
            &format!("/v1/runs/{run}/messages"),
            &t.owner,
            json!({"content": "four"}),
        )
        .await;
    assert_problem(&refused, 409, "run_ended");
    let events = app
        .get(&format!("/v1/runs/{run}/events?limit=500"), &t.owner)
        .await;
    let types: Vec<&str> = events.body["events"]
        .as_array()
        .map(|e| e.iter().filter_map(|e| e["type"].as_str()).collect())
        .unwrap_or_default();
    let at = types
        .iter()
        .rposition(|t| *t == "turn.failed")
        .expect("turn.failed");
    assert_eq!(types.get(at + 1), Some(&"run.failed"), "{types:?}");
}

#[tokio::test]
async fn zero_never_fails_the_run_and_the_default_is_three() {
    let (app, t) = TestApp::with_tenant().await;
    let never = agent(&app, &t.owner, 0).await;
    let run = app.run(&t.owner, &never, Some("one")).await;
    app.wait_run(&t.owner, &run, "waiting").await;
    for i in 0..4 {
        let r = post(&app, &t.owner, &run, &format!("again {i}")).await;
        assert_eq!(r["run"]["status"], "waiting", "{r}");
        assert_eq!(r["run"]["failed_turns"], i + 1);
    }

    let spec = scripted_agent(json!([{"content": "once"}]));
    let r = app
        .post("/v1/agents", &t.owner, spec)
        .await
        .expect_status(201);
    assert_eq!(r.body["limits"]["max_failed_turns"], 3, "{}", r.text);
    let mut bad = scripted_agent(json!([{"content": "x"}]));
    bad["limits"] = json!({"max_failed_turns": 101});
    let r = app.post("/v1/agents", &t.owner, bad).await;
    let detail = assert_problem(&r, 400, "invalid_request");
    assert!(detail.contains("limits.max_failed_turns"), "{detail}");
}
