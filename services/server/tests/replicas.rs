//! Several `baton serve` processes on one Postgres database and one NATS (the team tier),
//! driven through `baton_testkit::Cluster`: any replica serves any request and streams
//! every run, and killing or stopping one leaves the others serving.
//! Needs Postgres (`BATON_TEST_DATABASE_URL`) and NATS (`BATON_TEST_NATS_URL`).

use baton_testkit::Cluster;
use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::{Value, json};
use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

/// Bound on every wait in this file.
const DEADLINE: Duration = Duration::from_secs(20);

const BATON: &str = env!("CARGO_BIN_EXE_baton");

/// A client of one replica's API holding an owner key.
#[derive(Clone)]
struct Api {
    base: String,
    key: String,
    http: reqwest::Client,
}

impl Api {
    fn new(base: &str, key: &str) -> Self {
        Api {
            base: base.to_string(),
            key: key.to_string(),
            http: reqwest::Client::new(),
        }
    }

    fn req(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.key)
            .timeout(DEADLINE)
    }

    async fn send(&self, r: reqwest::RequestBuilder) -> (u16, Value) {
        let res = r.send().await.expect("request sent");
        let status = res.status().as_u16();
        let text = res.text().await.expect("body");
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        self.send(self.req(reqwest::Method::GET, path)).await
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.send(self.req(reqwest::Method::POST, path).json(&body))
            .await
    }

    /// A scripted agent answering with `replies` (content, delay_ms, complete_run).
    async fn agent(&self, replies: &[(&str, u64, bool)]) -> String {
        let replies: Vec<Value> = replies
            .iter()
            .map(|(c, d, end)| json!({"content": c, "delay_ms": d, "complete_run": end}))
            .collect();
        let provider = json!({"kind": "scripted", "replies": replies});
        let (status, body) = self
            .post(
                "/v1/agents",
                json!({"name": "replica test", "provider": provider}),
            )
            .await;
        assert_eq!(status, 201, "create agent: {body}");
        body["id"].as_str().expect("agent id").to_string()
    }

    async fn run(&self, agent: &str, message: &str) -> String {
        let (status, body) = self
            .post("/v1/runs", json!({"agent_id": agent, "message": message}))
            .await;
        assert_eq!(status, 201, "create run: {body}");
        body["run"]["id"].as_str().expect("run id").to_string()
    }

    /// Posts a message, retrying while the run is busy with a turn.
    async fn message_when_idle(&self, run: &str, content: &str) {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            let body = json!({"content": content, "request_id": format!("{run}-{content}")});
            let (status, answer) = self.post(&format!("/v1/runs/{run}/messages"), body).await;
            match status {
                201 => return,
                409 if answer["code"] == "run_busy" => {}
                _ => panic!("posting {content:?}: {status} {answer}"),
            }
            assert!(tokio::time::Instant::now() < deadline, "run never idle");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Polls the run until its status is `status`.
    async fn wait_status(&self, run: &str, status: &str) {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            let (code, body) = self.get(&format!("/v1/runs/{run}")).await;
            assert_eq!(code, 200, "get run: {body}");
            if body["status"] == status {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "run never became {status}: {body}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Opens the run's SSE stream from the start; returns once the server answered.
    async fn open_sse(&self, run: &str) -> Sse {
        let res = self
            .http
            .get(format!("{}/v1/runs/{run}/events", self.base))
            .bearer_auth(&self.key)
            .header("accept", "text/event-stream")
            .send()
            .await
            .expect("sse request");
        assert_eq!(res.status(), 200);
        res.bytes_stream().eventsource().boxed()
    }
}

type Sse = futures::stream::BoxStream<
    'static,
    Result<eventsource_stream::Event, eventsource_stream::EventStreamError<reqwest::Error>>,
>;

/// The next event of an SSE stream as (version, type), skipping comments and hints;
/// `None` when the stream ends.
async fn next_event(stream: &mut Sse) -> Option<(i64, String)> {
    while let Some(ev) = stream.next().await {
        let ev = ev.expect("well-formed SSE");
        if ev.data.is_empty() {
            continue;
        }
        let env: Value = serde_json::from_str(&ev.data).expect("envelope JSON");
        let version: i64 = ev.id.parse().expect("numeric id");
        assert_eq!(env["version"], version, "id matches the envelope");
        assert_eq!(env["type"], ev.event.as_str());
        return Some((version, ev.event));
    }
    None
}

/// Every remaining event of the stream, until the server ends it (within the deadline).
async fn read_until_end(stream: &mut Sse) -> Vec<(i64, String)> {
    let mut got = Vec::new();
    let read = async {
        while let Some(ev) = next_event(stream).await {
            got.push(ev);
        }
    };
    if tokio::time::timeout(DEADLINE, read).await.is_err() {
        panic!("stream did not end in time; got {got:?}");
    }
    got
}

fn uuid(id: &str) -> uuid::Uuid {
    id.parse().expect("a UUID")
}

#[tokio::test]
async fn a_run_created_on_one_replica_is_driven_and_streamed_on_the_others() {
    let cluster = Cluster::start(BATON, 3).await.expect("three replicas");
    let (_, key) = cluster.create_tenant("acme").await.expect("tenant");
    let [a, b, c] = [0, 1, 2].map(|i| Api::new(cluster.base_url(i), &key));

    let agent = a
        .agent(&[
            ("one", 20, false),
            ("two", 20, false),
            ("three", 20, false),
            ("four", 20, false),
            ("five", 20, true),
        ])
        .await;
    let run = a.run(&agent, "message 1").await;
    // C streams from the start: subscribed before B sends anything, so what follows
    // reaches it live, from whichever replica writes it.
    let mut stream = c.open_sse(&run).await;
    let watcher = tokio::spawn(async move { read_until_end(&mut stream).await });
    for i in 2..=5 {
        b.message_when_idle(&run, &format!("message {i}")).await;
    }
    let seen = watcher.await.expect("watcher");

    let versions: Vec<i64> = seen.iter().map(|(v, _)| *v).collect();
    let n = versions.len() as i64;
    assert_eq!(
        versions,
        (1..=n).collect::<Vec<_>>(),
        "C saw every version once, in order"
    );
    assert_eq!(seen.last().map(|(_, t)| t.as_str()), Some("run.completed"));
    let run_id = uuid(&run);
    assert_eq!(
        cluster
            .check_run_invariants(run_id)
            .await
            .expect("invariants"),
        n
    );
    let rows = cluster.event_rows(run_id).await.expect("events");
    let stored: Vec<(i64, String)> = rows
        .iter()
        .map(|r| (r.version, r.event_type.clone()))
        .collect();
    assert_eq!(seen, stored, "the stream is the database's");
    let mut writers: Vec<&str> = rows.iter().filter_map(|r| r.replica_name()).collect();
    writers.sort_unstable();
    writers.dedup();
    eprintln!("engine events written by {writers:?}");
    assert!(
        writers.contains(&"replica-0") && writers.contains(&"replica-1"),
        "A drove the first turn and B the ones it took messages for: {rows:?}"
    );
    a.wait_status(&run, "completed").await;
    cluster.stop().await.expect("stop");
}

#[tokio::test]
async fn sigkill_of_a_replica_leaves_the_others_serving() {
    let mut cluster = Cluster::start(BATON, 2).await.expect("two replicas");
    let (_, key) = cluster.create_tenant("acme").await.expect("tenant");
    let survivor = Api::new(cluster.base_url(1), &key);

    cluster.sigkill(0).expect("sigkill");
    let status = cluster
        .wait_exit(0, Duration::from_secs(5))
        .await
        .expect("killed replica exits");
    assert_eq!(status.signal(), Some(9), "{status}");
    assert!(
        cluster.sigterm(0).is_err(),
        "an exited replica is not signalled"
    );

    let (code, body) = survivor.get("/readyz").await;
    assert_eq!(code, 200, "{body}");
    let agent = survivor
        .agent(&[("hello", 10, false), ("bye", 10, true)])
        .await;
    let run = survivor.run(&agent, "hi").await;
    survivor.message_when_idle(&run, "and goodbye").await;
    survivor.wait_status(&run, "completed").await;
    cluster
        .check_run_invariants(uuid(&run))
        .await
        .expect("invariants");
    cluster.stop().await.expect("stop");
}

#[tokio::test]
async fn sigterm_stops_a_replica_cleanly_within_its_grace_period() {
    let mut cluster = Cluster::start(BATON, 1).await.expect("one replica");
    let (_, key) = cluster.create_tenant("acme").await.expect("tenant");
    let api = Api::new(cluster.base_url(0), &key);
    // Something to drain: a turn in progress and an open SSE stream.
    let agent = api.agent(&[("slow", 3_000, false)]).await;
    let run = api.run(&agent, "take your time").await;
    api.wait_status(&run, "running").await;
    let mut stream = api.open_sse(&run).await;
    let first = tokio::time::timeout(DEADLINE, next_event(&mut stream))
        .await
        .expect("first event in time");
    assert_eq!(first, Some((1, "run.created".to_string())));

    let asked = std::time::Instant::now();
    cluster.sigterm(0).expect("sigterm");
    let status = cluster
        .wait_exit(0, Duration::from_secs(10))
        .await
        .expect("exits within 10 s");
    eprintln!("exited {status} {:?} after SIGTERM", asked.elapsed());
    assert!(status.success(), "clean exit: {status}");
    // The stream ends (cleanly or not) with the process; whatever it still delivered
    // continues the replay in order.
    let mut rest = Vec::new();
    let drained = tokio::time::timeout(DEADLINE, async {
        while let Some(Ok(ev)) = stream.next().await {
            if let Ok(version) = ev.id.parse::<i64>() {
                rest.push(version);
            }
        }
    });
    drained.await.expect("the SSE stream ends with the process");
    let expected: Vec<i64> = (2..2 + rest.len() as i64).collect();
    assert_eq!(rest, expected, "no gap or duplicate before the close");
    cluster
        .check_run_invariants(uuid(&run))
        .await
        .expect("invariants");
    cluster.stop().await.expect("stop");
}
