//! The core conversation semantics, each in both tiers.

use crate::common::{Api, TestApp, assert_problem};
use baton_core::Role;
use baton_testkit::api::{DEADLINE, sse};
use serde_json::json;

async fn both_tiers<F, Fut>(scenario: F)
where
    F: Fn(Api) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let app = TestApp::embedded().await;
    scenario(app.anonymous()).await;
    app.stop().await;
    let app = TestApp::team().await;
    let (_, owner) = app.tenant(Role::Owner).await;
    scenario(owner).await;
    app.stop().await;
}

async fn conversation(api: Api) {
    let agent = api
        .agent(&[("Hello!", 0, false), ("Goodbye.", 0, true)])
        .await;
    let run = api.run(&agent, Some("Hi")).await;
    let done = api.wait_status(&run, "waiting").await;
    assert_eq!(done["message_count"], 2);
    let posted = api.message(&run, "Thanks", Some("m-2")).await;
    assert_eq!(posted.status, 201, "{}", posted.body);
    assert_eq!(posted.body["turn"], 2);
    assert_eq!(posted.body["message"]["seq"], 3);
    let end = api.wait_status(&run, "completed").await;
    assert_eq!(end["turn_count"], 2);
    let contents: Vec<_> = api
        .messages(&run)
        .await
        .iter()
        .map(|m| {
            (
                m["role"].as_str().map(str::to_owned),
                m["content"].as_str().map(str::to_owned),
            )
        })
        .collect();
    let expect = [
        ("user", "Hi"),
        ("assistant", "Hello!"),
        ("user", "Thanks"),
        ("assistant", "Goodbye."),
    ];
    assert_eq!(contents.len(), expect.len());
    for ((role, content), (er, ec)) in contents.iter().zip(expect) {
        assert_eq!((role.as_deref(), content.as_deref()), (Some(er), Some(ec)));
    }
    let versions = api.event_versions(&run).await;
    assert_eq!(
        versions,
        (1..=versions.len() as i64).collect::<Vec<_>>(),
        "no gaps"
    );
    let after_end = api.message(&run, "more?", None).await;
    assert_problem(&after_end, 409, "run_ended");
}

#[tokio::test]
async fn create_agent_and_run_post_message_and_finish_in_both_tiers() {
    both_tiers(conversation).await;
}

async fn busy(api: Api) {
    // Slow enough that the checks below all happen within the turn on a loaded machine.
    let agent = api
        .agent(&[("slow", 5_000, false), ("next", 0, false)])
        .await;
    let run = api.run(&agent, Some("first")).await;
    let before = api.get(&format!("/v1/runs/{run}")).await.body;
    let r = api.message(&run, "second", Some("busy-1")).await;
    assert_problem(&r, 409, "run_busy");
    assert_eq!(api.messages(&run).await.len(), 1, "nothing stored on 409");
    let during = api.get(&format!("/v1/runs/{run}")).await.body;
    let version = during["version"].as_i64().expect("a version");
    assert!(
        version <= 5,
        "only lease.acquired and turn.started may follow the turn's request: {during}"
    );
    assert_eq!(during["message_count"], before["message_count"]);
    api.wait_status(&run, "waiting").await;
    // The request_id of the refused message was not consumed: it works now.
    let r = api.message(&run, "second", Some("busy-1")).await;
    assert_eq!(r.status, 201, "{}", r.body);
}

#[tokio::test]
async fn posting_while_a_turn_runs_answers_409_and_stores_nothing_in_both_tiers() {
    both_tiers(busy).await;
}

async fn racing_enqueues(api: Api) {
    // The first turn outlasts the racers, so each of them is queued, none taken yet.
    let mut replies = vec![("first answer".to_string(), 5_000, false)];
    replies.extend((1..=8).map(|i| (format!("answer {i}"), 0, false)));
    let replies: Vec<(&str, u64, bool)> = replies
        .iter()
        .map(|(c, d, e)| (c.as_str(), *d, *e))
        .collect();
    let agent = api.agent(&replies).await;
    let run = api.run(&agent, Some("go")).await;
    let mut tasks = Vec::new();
    for i in 0..8 {
        let api = api.clone();
        let path = format!("/v1/runs/{run}/messages");
        tasks.push(tokio::spawn(async move {
            let body = serde_json::json!({"content": format!("racer {i}"), "strategy": "enqueue"});
            api.post(&path, body).await
        }));
    }
    // Every racer is queued, each at a place of its own.
    let mut by_place = std::collections::BTreeMap::new();
    for t in tasks {
        let r = t.await.expect("task");
        assert_eq!(r.status, 202, "{}", r.body);
        let place = r.body["position"].as_i64().expect("a position");
        let content = r.body["content"].as_str().expect("content").to_string();
        assert!(
            by_place.insert(place, content).is_none(),
            "place {place} twice"
        );
    }
    assert_eq!(
        by_place.keys().copied().collect::<Vec<_>>(),
        (1..=8).collect::<Vec<_>>()
    );
    let done = api
        .wait_run(&run, "every queued turn", |r| {
            r["turn_count"] == 9 && r["status"] == "waiting"
        })
        .await;
    assert_eq!(done["queued_messages"], 0, "{done}");
    // Taken in the order queued, each followed by its own turn's answer.
    let messages = api.messages(&run).await;
    let users: Vec<&str> = messages
        .iter()
        .filter(|m| m["role"] == "user")
        .skip(1)
        .map(|m| m["content"].as_str().unwrap_or_default())
        .collect();
    let queued: Vec<&str> = by_place.values().map(String::as_str).collect();
    assert_eq!(users, queued);
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(roles, ["user", "assistant"].repeat(9));
}

#[tokio::test]
async fn racing_enqueued_messages_each_take_a_turn_in_the_order_queued_in_both_tiers() {
    both_tiers(racing_enqueues).await;
}

async fn racing_posts(api: Api) {
    // The winner's turn outlasts the racers: a racer that came after it ended would
    // rightly start a turn of its own.
    let agent = api.agent(&[("a", 60_000, false)]).await;
    let run = api.run(&agent, None).await;
    let mut tasks = Vec::new();
    for i in 0..8 {
        let api = api.clone();
        let run = run.clone();
        tasks.push(tokio::spawn(async move {
            api.message(&run, &format!("racer {i}"), None).await.status
        }));
    }
    let mut statuses = Vec::new();
    for t in tasks {
        statuses.push(t.await.expect("task"));
    }
    assert_eq!(
        statuses.iter().filter(|s| **s == 201).count(),
        1,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 409).count(),
        7,
        "{statuses:?}"
    );
    assert_eq!(api.messages(&run).await.len(), 1, "one user message");
    let cancelled = api
        .post(&format!("/v1/runs/{run}/cancel"), serde_json::json!({}))
        .await;
    assert_eq!(cancelled.status, 200, "{}", cancelled.body);
    api.wait_status(&run, "cancelled").await;
    assert_eq!(api.messages(&run).await.len(), 1, "and no answer after all");
}

#[tokio::test]
async fn of_racing_messages_exactly_one_is_stored_in_both_tiers() {
    both_tiers(racing_posts).await;
}

async fn idempotent(api: Api) {
    let agent = api.agent(&[("one", 0, false), ("two", 0, false)]).await;
    let run = api.run(&agent, None).await;
    let first = api.message(&run, "hello", Some("req-42")).await;
    assert_eq!(first.status, 201, "{}", first.body);
    api.wait_status(&run, "waiting").await;
    let again = api.message(&run, "hello", Some("req-42")).await;
    assert_eq!(again.status, 201, "{}", again.body);
    assert_eq!(
        again.body, first.body,
        "the original result, not a new message"
    );
    assert_eq!(api.messages(&run).await.len(), 2);
    let reused = api.message(&run, "something else", Some("req-42")).await;
    assert_problem(&reused, 422, "idempotency_key_reused");
    // Creating a run is idempotent too.
    let body = json!({"agent_id": agent, "message": "x", "request_id": "run-req-1"});
    let a = api.post("/v1/runs", body.clone()).await;
    let b = api.post("/v1/runs", body).await;
    assert_eq!((a.status, b.status), (201, 201), "{} {}", a.body, b.body);
    assert!(a.body["run"]["id"].is_string());
    assert_eq!(a.body["run"]["id"], b.body["run"]["id"]);
    let list = api.get("/v1/runs?limit=500").await;
    assert_eq!(list.body["items"].as_array().map(Vec::len), Some(2));
}

#[tokio::test]
async fn a_repeated_request_id_returns_the_original_message_in_both_tiers() {
    both_tiers(idempotent).await;
}

async fn cancel(api: Api) {
    let agent = api.agent(&[("never sent", 5_000, false)]).await;
    let idle = api.run(&agent, None).await;
    let r = api
        .post(
            &format!("/v1/runs/{idle}/cancel"),
            json!({"reason": "done"}),
        )
        .await;
    assert_eq!(
        (r.status, r.body["status"].as_str()),
        (200, Some("cancelled")),
        "{}",
        r.body
    );
    let busy = api.run(&agent, Some("go")).await;
    api.wait_status(&busy, "running").await;
    let r = api
        .send(api.req(reqwest::Method::POST, &format!("/v1/runs/{busy}/cancel")))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let end = api.wait_status(&busy, "cancelled").await;
    assert_eq!(
        end["message_count"], 1,
        "the cancelled turn wrote no answer"
    );
    let again = api
        .post(&format!("/v1/runs/{busy}/cancel"), json!({}))
        .await;
    assert_eq!(again.status, 200, "cancelling a cancelled run is a no-op");
}

#[tokio::test]
async fn cancel_ends_idle_runs_at_once_and_busy_runs_at_the_next_step_in_both_tiers() {
    both_tiers(cancel).await;
}

async fn listing(api: Api) {
    let agent = api.agent(&[("x", 0, false)]).await;
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(api.run(&agent, None).await);
    }
    let cancelled = ids[1].clone();
    api.post(&format!("/v1/runs/{cancelled}/cancel"), json!({}))
        .await;
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/runs?limit=2&cursor={c}"),
            None => "/v1/runs?limit=2".into(),
        };
        let page = api.get(&path).await;
        assert_eq!(page.status, 200, "{}", page.body);
        for r in page.body["items"].as_array().into_iter().flatten() {
            seen.push(r["id"].as_str().unwrap_or_default().to_string());
        }
        match page.body["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    ids.reverse();
    assert_eq!(seen, ids, "newest first, every run once");
    let only = api.get("/v1/runs?status=cancelled").await;
    let items = only.body["items"].as_array().cloned().unwrap_or_default();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["id"], cancelled.as_str());
}

#[tokio::test]
async fn runs_list_newest_first_with_a_cursor_and_a_status_filter_in_both_tiers() {
    both_tiers(listing).await;
}

async fn concurrent_repeats(api: Api) {
    let agent = api.agent(&[("one", 300, false)]).await;
    for round in 0..5 {
        let run = api.run(&agent, None).await;
        let id = format!("same-{round}");
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let (api, run, id) = (api.clone(), run.clone(), id.clone());
            tasks.push(tokio::spawn(async move {
                api.message(&run, "hello", Some(&id)).await
            }));
        }
        let mut ids = Vec::new();
        for t in tasks {
            let r = t.await.expect("task");
            assert_eq!(r.status, 201, "every repeat gets the original: {}", r.body);
            ids.push(r.body["message"]["id"].as_str().map(str::to_owned));
        }
        ids.dedup();
        assert_eq!(ids.len(), 1, "one message: {ids:?}");
        assert!(ids[0].is_some());
        // The turn's answer may be in already: count the user's messages.
        let users = api
            .messages(&run)
            .await
            .iter()
            .filter(|m| m["role"] == "user")
            .count();
        assert_eq!(users, 1);
    }
}

#[tokio::test]
async fn concurrent_repeats_of_one_request_id_all_get_the_original_in_both_tiers() {
    both_tiers(concurrent_repeats).await;
}

async fn nul_text(api: Api) {
    let agent = api.agent(&[("x", 0, false)]).await;
    let run = api.run(&agent, None).await;
    let r = api.message(&run, "a\u{0}b", None).await;
    let detail = assert_problem(&r, 400, "invalid_request");
    assert!(detail.contains("content"), "{detail}");
    let r = api
        .post("/v1/runs", json!({"agent_id": agent, "title": "t\u{0}"}))
        .await;
    assert_problem(&r, 400, "invalid_request");
    let r = api
        .post("/v1/agents", json!({"name": "n\u{0}", "provider": {"kind": "scripted", "replies": [{"content": "y"}]}}))
        .await;
    assert_problem(&r, 400, "invalid_request");
    let r = api
        .post(
            &format!("/v1/runs/{run}/cancel"),
            json!({"reason": "\u{0}"}),
        )
        .await;
    assert_problem(&r, 400, "invalid_request");
    assert!(api.messages(&run).await.is_empty());
}

#[tokio::test]
async fn text_with_nul_characters_is_refused_alike_in_both_tiers() {
    both_tiers(nul_text).await;
}

/// `wait` over real HTTP: the answer carries the turn's reply, or 202 when it runs out.
async fn waiting(api: Api) {
    let agent = api
        .agent(&[("Hello!", 100, false), ("Still here.", 3000, false)])
        .await;
    let created = api
        .post(
            "/v1/runs",
            json!({"agent_id": agent, "message": "Hi", "wait": 10}),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    let result = &created.body["result"];
    assert_eq!(result["outcome"], "completed", "{}", created.body);
    assert_eq!(result["reply"]["content"], "Hello!");
    assert_eq!(result["run"]["status"], "waiting");
    let run = created.body["run"]["id"]
        .as_str()
        .expect("run id")
        .to_owned();

    let posted = api
        .post(
            &format!("/v1/runs/{run}/messages"),
            json!({"content": "And now?", "wait": 1}),
        )
        .await;
    assert_eq!(posted.status, 202, "{}", posted.body);
    assert_eq!(posted.headers["location"], format!("/v1/runs/{run}"));
    assert!(posted.body.get("result").is_none(), "{}", posted.body);
    let done = api.wait_status(&run, "waiting").await;
    assert_eq!(
        done["message_count"], 4,
        "the turn went on after the wait: {done}"
    );
}

#[tokio::test]
async fn wait_answers_with_the_turns_reply_or_202_in_both_tiers() {
    both_tiers(waiting).await;
}

async fn deletion(api: Api) {
    let agent = api.agent(&[("hello", 0, false)]).await;
    let run = api.run(&agent, Some("hi")).await;
    // Settled, with the checkpoint the engine saves after the turn.
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let last = loop {
        let events = api.events(&run).await;
        if events.last().map(|e| e["type"] == "checkpoint.saved") == Some(true) {
            break events.len() as i64;
        }
        assert!(tokio::time::Instant::now() < deadline, "{events:?}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    // A live stream of the run, caught up with its stored events.
    let mut stream = api.sse(&run, None).await.expect("a live stream");
    let replayed = sse::read_frames(&mut stream, Some(last as usize), DEADLINE).await;
    assert_eq!(replayed.len() as i64, last);

    let r = api
        .send(api.req(reqwest::Method::DELETE, &format!("/v1/runs/{run}")))
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    // The stream ends with the run's last word, after its last stored event.
    let rest = sse::read_frames(&mut stream, None, DEADLINE).await;
    let pairs = sse::pairs(&rest);
    assert_eq!(pairs, [(last + 1, "run.deleted".to_string())], "{rest:?}");
    for path in [
        format!("/v1/runs/{run}"),
        format!("/v1/runs/{run}/messages"),
        format!("/v1/runs/{run}/events"),
        format!("/v1/runs/{run}/receipts"),
    ] {
        assert_problem(&api.get(&path).await, 404, "not_found");
    }
    let again = api
        .send(api.req(reqwest::Method::DELETE, &format!("/v1/runs/{run}")))
        .await;
    assert_problem(&again, 404, "not_found");
    let runs = api.get("/v1/runs").await;
    assert!(!runs.body.to_string().contains(&run), "{}", runs.body);

    // A run within a turn is refused: cancel it first. (A run's first reply is the
    // script's first, so the busy run is another agent's, whose first reply takes a
    // minute.)
    let slow = api.agent(&[("slow", 60_000, false)]).await;
    let busy = api.run(&slow, Some("again")).await;
    let refused = api
        .send(api.req(reqwest::Method::DELETE, &format!("/v1/runs/{busy}")))
        .await;
    assert_problem(&refused, 409, "run_busy");
    assert_eq!(api.summary(&busy).await["message_count"], 1);
}

#[tokio::test]
async fn a_deleted_runs_stream_ends_with_run_deleted_and_the_run_is_gone_in_both_tiers() {
    both_tiers(deletion).await;
}
