//! SSE: replay after Last-Event-ID, then live events, with no gap and no duplicate while
//! events keep arriving; the stream ends when the run does.

use crate::common::{Api, DEADLINE, TestApp, assert_problem};
use baton_core::Role;
use baton_testkit::api::sse;
use futures::StreamExt;

/// Turns in the scenario; the last reply completes the run.
const TURNS: usize = 12;

/// Reads the run's SSE stream from `last_event_id`, keeping (version, type), until it
/// ends or `stop_after` events arrived.
async fn read_sse(
    api: &Api,
    run: &str,
    last_event_id: Option<i64>,
    stop_after: Option<usize>,
) -> Vec<(i64, String)> {
    let mut stream = api.sse(run, last_event_id).await.expect("a 200 stream");
    sse::pairs(&sse::read_frames(&mut stream, stop_after, DEADLINE).await)
}

/// Keeps posting messages as soon as the run is idle, until the script ends the run.
async fn keep_talking(api: Api, run: String) {
    for i in 2..=TURNS {
        loop {
            let r = api
                .message(&run, &format!("message {i}"), Some(&format!("k-{i}")))
                .await;
            match r.status {
                201 => break,
                409 if r.body["code"] == "run_busy" => {
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                }
                _ => panic!("unexpected answer {}", r.body),
            }
        }
    }
}

async fn resume_without_gaps(api: Api) {
    let mut script: Vec<(String, u64, bool)> = (1..TURNS)
        .map(|i| (format!("reply {i}"), 15, false))
        .collect();
    script.push(("last".into(), 15, true));
    let script: Vec<(&str, u64, bool)> = script
        .iter()
        .map(|(c, d, e)| (c.as_str(), *d, *e))
        .collect();
    let agent = api.agent(&script).await;
    let run = api.run(&agent, Some("message 1")).await;
    let talker = tokio::spawn(keep_talking(api.clone(), run.clone()));

    // First connection: from the start, drop after a few events mid-conversation.
    let first = read_sse(&api, &run, None, Some(7)).await;
    let cursor = first.last().map(|(v, _)| *v).expect("some events");
    // Resume from the cursor while the conversation goes on, until the run ends.
    let rest = read_sse(&api, &run, Some(cursor), None).await;
    talker.await.expect("talker");

    let versions: Vec<i64> = first.iter().chain(&rest).map(|(v, _)| *v).collect();
    let expected: Vec<i64> = (1..=versions.len() as i64).collect();
    assert_eq!(
        versions, expected,
        "every event once, in order, across the reconnect"
    );
    assert_eq!(rest.last().map(|(_, t)| t.as_str()), Some("run.completed"));
    assert_eq!(
        api.event_versions(&run).await,
        expected,
        "the stream matches the database"
    );

    // A stream opened on an ended run replays and closes...
    let replay = read_sse(&api, &run, Some(cursor), None).await;
    assert_eq!(replay, rest);
    // ...and one at its very end answers 204, which tells EventSource to stop.
    let end = rest.last().map(|(v, _)| *v).expect("events");
    let r = api
        .sse_req(&run, Some(&end.to_string()))
        .send()
        .await
        .expect("sse request");
    assert_eq!(r.status(), 204);
}

#[tokio::test]
async fn sse_resumes_from_last_event_id_without_gap_or_duplicate_embedded() {
    let app = TestApp::embedded().await;
    resume_without_gaps(app.anonymous()).await;
    app.stop().await;
}

#[tokio::test]
async fn sse_resumes_from_last_event_id_without_gap_or_duplicate_team() {
    let app = TestApp::team().await;
    let (_, api) = app.tenant(Role::Owner).await;
    resume_without_gaps(api).await;
    app.stop().await;
}

#[tokio::test]
async fn sse_rejects_a_bad_last_event_id_and_a_cursor_past_the_end() {
    let app = TestApp::embedded().await;
    let api = app.anonymous();
    let agent = api.agent(&[("x", 0, false)]).await;
    let run = api.run(&agent, None).await;
    for bad in ["abc", "-1", "1.5"] {
        let r = api.send(api.sse_req(&run, Some(bad))).await;
        assert_problem(&r, 400, "invalid_last_event_id");
    }
    let r = api.send(api.sse_req(&run, Some("99"))).await;
    let detail = assert_problem(&r, 400, "invalid_request");
    assert!(detail.contains("past the end"), "{detail}");
    app.stop().await;
}

#[tokio::test]
async fn an_idle_stream_gets_keep_alive_comments() {
    let app = TestApp::embedded_with(|c| {
        c.http.sse_keepalive = std::time::Duration::from_millis(100);
    })
    .await;
    let api = app.anonymous();
    let agent = api.agent(&[("x", 0, false)]).await;
    let run = api.run(&agent, None).await;
    let res = api.sse_req(&run, None).send().await.expect("sse");
    let mut body = res.bytes_stream();
    let mut text = String::new();
    let deadline = tokio::time::Instant::now() + DEADLINE;
    // The hint, the replayed run.created, then keep-alives while nothing happens.
    while text.lines().filter(|l| *l == ":").count() < 3 {
        let chunk = tokio::time::timeout_at(deadline, body.next())
            .await
            .expect("keep-alives arrive")
            .expect("stream open")
            .expect("chunk");
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(text.contains("event: run.created"), "{text}");
    app.stop().await;
}

#[tokio::test]
async fn a_finished_runs_stream_replays_at_once_over_a_kept_alive_connection() {
    let app = TestApp::embedded().await;
    let api = app.anonymous();
    let agent = api.agent(&[("bye", 0, true)]).await;
    let run = api.run(&agent, Some("hi")).await;
    api.wait_status(&run, "completed").await;
    // One client, so every replay after the first reuses its connection: the stream's
    // first frames and its events are separate small writes on it.
    let mut took = Vec::new();
    for _ in 0..7 {
        let started = std::time::Instant::now();
        let res = api.sse_req(&run, Some("1")).send().await.expect("a stream");
        assert_eq!(res.status(), 200);
        let body = res.text().await.expect("the stream ends");
        assert!(body.contains("run.completed"), "{body}");
        took.push(started.elapsed());
    }
    took.sort();
    let median = took[took.len() / 2];
    println!("replaying a finished run's stream: median {median:?} of {took:?}");
    // Nagle's algorithm against the client's delayed ACK costs some 40 ms a stream.
    assert!(
        median < std::time::Duration::from_millis(20),
        "replays took {took:?}"
    );
}
