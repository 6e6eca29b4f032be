//! A typed HTTP client of Baton's REST API for end-to-end and process tests: plain
//! requests answered as [`Reply`], the few calls every scenario makes (agent, run,
//! message, waits) and problem+json checks, plus the run event stream as SSE ([`sse`]).
//! Knows the API only by its paths and JSON; depends on no Baton crate. Every helper
//! panics with the server's answer when the API does not do what the test expects.

pub mod sse;

pub use sse::{Frame, Stream};

use serde_json::{Value, json};
use std::time::Duration;

/// Bound on every wait of the client ([`Api::wait_run`], [`Api::message_when_idle`]) and
/// the usual bound on reading a stream.
pub const DEADLINE: Duration = Duration::from_secs(20);

/// How often [`Api::wait_run`] polls the run unless set with [`Api::with_polling`].
const POLL: Duration = Duration::from_millis(20);

/// How soon [`Api::message_when_idle`] retries a busy run unless set with
/// [`Api::with_polling`].
const RETRY: Duration = Duration::from_millis(5);

/// A client of one Baton server's API, holding an API key or none (the local owner of
/// the embedded tier, or a test of missing credentials).
#[derive(Clone, Debug)]
pub struct Api {
    /// The server's base URL, `http://ADDR` without a trailing slash.
    pub base: String,
    /// The bearer token sent with every request, if any.
    pub token: Option<String>,
    /// The underlying client, for requests the helpers do not cover.
    pub http: reqwest::Client,
    /// Bound on each request built with [`Api::req`]; SSE streams are never bounded.
    timeout: Option<Duration>,
    /// How often [`Api::wait_run`] polls.
    poll: Duration,
    /// How soon [`Api::message_when_idle`] retries a busy run.
    retry: Duration,
}

/// A server's answer with its body read: JSON when it parses, else the text as a string.
#[derive(Clone, Debug)]
pub struct Reply {
    /// The HTTP status code.
    pub status: u16,
    /// The body as JSON, or `Value::String` of the text when it is not JSON.
    pub body: Value,
    /// The `Content-Type` header, empty when absent.
    pub content_type: String,
    /// Every header of the answer.
    pub headers: reqwest::header::HeaderMap,
}

impl Api {
    /// A client of the server at `base` sending `token` as a bearer token when given;
    /// requests are unbounded and waits poll every 20 ms (5 ms for busy retries).
    pub fn new(base: &str, token: Option<String>) -> Self {
        Api {
            base: base.to_string(),
            token,
            http: crate::http_client(),
            timeout: None,
            poll: POLL,
            retry: RETRY,
        }
    }

    /// This client with every request of [`Api::req`] bounded by `timeout` (for servers
    /// that may hang, such as replicas being signalled); SSE streams stay unbounded.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// This client polling runs every `poll` and retrying busy runs every `retry`.
    pub fn with_polling(mut self, poll: Duration, retry: Duration) -> Self {
        self.poll = poll;
        self.retry = retry;
        self
    }

    /// A request to `path` (below the base URL) with the token and no time bound.
    fn unbounded(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let r = self.http.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(t) => r.bearer_auth(t),
            None => r,
        }
    }

    /// A request to `path` (below the base URL) with the token and the client's timeout,
    /// to add headers or a body to before [`Api::send`].
    pub fn req(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let r = self.unbounded(method, path);
        match self.timeout {
            Some(t) => r.timeout(t),
            None => r,
        }
    }

    /// Sends `r` and reads the whole answer; panics if the server cannot be reached.
    pub async fn send(&self, r: reqwest::RequestBuilder) -> Reply {
        let res = r.send().await.expect("request sent");
        let status = res.status().as_u16();
        let headers = res.headers().clone();
        let content_type = headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let text = res.text().await.expect("body");
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Reply {
            status,
            body,
            content_type,
            headers,
        }
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Reply {
        self.send(self.req(reqwest::Method::GET, path)).await
    }

    /// `POST path` with `body` as JSON.
    pub async fn post(&self, path: &str, body: Value) -> Reply {
        self.send(self.req(reqwest::Method::POST, path).json(&body))
            .await
    }

    /// Creates a scripted agent answering turn `i` with `replies[i]` (content, delay_ms,
    /// complete_run); returns its id.
    pub async fn agent(&self, replies: &[(&str, u64, bool)]) -> String {
        let replies: Vec<Value> = replies
            .iter()
            .map(|(c, d, end)| json!({"content": c, "delay_ms": d, "complete_run": end}))
            .collect();
        let r = self
            .post(
                "/v1/agents",
                json!({"name": "test agent", "provider": {"kind": "scripted", "replies": replies}}),
            )
            .await;
        assert_eq!(r.status, 201, "create agent: {}", r.body);
        r.body["id"].as_str().expect("agent id").to_string()
    }

    /// Creates a run of `agent`, with a first message when given (so a turn starts at
    /// once); returns its id.
    pub async fn run(&self, agent: &str, message: Option<&str>) -> String {
        let mut body = json!({"agent_id": agent});
        if let Some(m) = message {
            body["message"] = json!(m);
        }
        let r = self.post("/v1/runs", body).await;
        assert_eq!(r.status, 201, "create run: {}", r.body);
        r.body["run"]["id"].as_str().expect("run id").to_string()
    }

    /// Posts a user message to `run`, with an idempotency key when given; the answer is
    /// the caller's to check.
    pub async fn message(&self, run: &str, content: &str, request_id: Option<&str>) -> Reply {
        let mut body = json!({"content": content});
        if let Some(id) = request_id {
            body["request_id"] = json!(id);
        }
        self.post(&format!("/v1/runs/{run}/messages"), body).await
    }

    /// Posts `content` (request id `<run>-<content>`), retrying while the run is busy with
    /// a turn; it must be accepted within [`DEADLINE`].
    pub async fn message_when_idle(&self, run: &str, content: &str) {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        let request_id = format!("{run}-{content}");
        loop {
            let r = self.message(run, content, Some(&request_id)).await;
            match r.status {
                201 => return,
                409 if r.body["code"] == "run_busy" => {}
                status => panic!("posting {content:?}: {status} {}", r.body),
            }
            assert!(tokio::time::Instant::now() < deadline, "run never idle");
            tokio::time::sleep(self.retry).await;
        }
    }

    /// The run's projection (`GET /v1/runs/{run}`, which must answer 200).
    pub async fn summary(&self, run: &str) -> Value {
        let r = self.get(&format!("/v1/runs/{run}")).await;
        assert_eq!(r.status, 200, "get run: {}", r.body);
        r.body
    }

    /// Polls the run until `done(run)` holds and returns it; panics at [`DEADLINE`],
    /// naming `what` it waited for.
    pub async fn wait_run(&self, run: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            let body = self.summary(run).await;
            if done(&body) {
                return body;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "run never became {what}: {body}"
            );
            tokio::time::sleep(self.poll).await;
        }
    }

    /// Polls the run until its status is `status` and returns it.
    pub async fn wait_status(&self, run: &str, status: &str) -> Value {
        self.wait_run(run, status, |r| r["status"] == status).await
    }

    /// The run's messages (first page of up to 500).
    pub async fn messages(&self, run: &str) -> Vec<Value> {
        let r = self
            .get(&format!("/v1/runs/{run}/messages?limit=500"))
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        r.body["items"].as_array().cloned().unwrap_or_default()
    }

    /// The versions of the run's events (first page of up to 500).
    pub async fn event_versions(&self, run: &str) -> Vec<i64> {
        let r = self.get(&format!("/v1/runs/{run}/events?limit=500")).await;
        assert_eq!(r.status, 200, "{}", r.body);
        r.body["events"]
            .as_array()
            .map(|a| a.iter().filter_map(|e| e["version"].as_i64()).collect())
            .unwrap_or_default()
    }

    /// Every event of the run as JSON envelopes, in version order (the JSON form of the
    /// events endpoint, page after page).
    pub async fn events(&self, run: &str) -> Vec<Value> {
        let mut all = Vec::new();
        let mut after = 0;
        loop {
            let page = self
                .get(&format!("/v1/runs/{run}/events?after={after}&limit=500"))
                .await;
            assert_eq!(page.status, 200, "events page: {}", page.body);
            let events = page.body["events"]
                .as_array()
                .expect("events array")
                .clone();
            if events.is_empty() {
                return all;
            }
            after = page.body["next_after"].as_i64().expect("next_after");
            all.extend(events);
        }
    }

    /// `/readyz`'s view of the bus (`ok` or `unavailable`); readiness must answer 200.
    pub async fn bus(&self) -> String {
        let r = self.get("/readyz").await;
        assert_eq!(r.status, 200, "readyz: {}", r.body);
        r.body["bus"].as_str().expect("bus state").to_string()
    }
}

/// Asserts a problem+json answer with `status` and `code` carrying a request id; returns
/// its detail.
pub fn assert_problem(r: &Reply, status: u16, code: &str) -> String {
    assert_eq!(r.status, status, "expected {status} {code}, got {}", r.body);
    assert_eq!(r.body["code"], code, "{}", r.body);
    assert!(
        r.content_type.starts_with("application/problem+json"),
        "content type {}",
        r.content_type
    );
    assert!(
        r.body["request_id"].is_string(),
        "problem carries the request id"
    );
    r.body["detail"].as_str().unwrap_or_default().to_string()
}
