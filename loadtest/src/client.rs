//! The harness's HTTP client of Baton's API: the load requests, whose failures become an
//! [`Outcome`] (never a panic: a server under load may answer anything), and the setup
//! and check calls (create an agent and runs, wait for runs to settle, read a run's
//! events and messages), which fail with context.

use crate::open_loop::Outcome;
use anyhow::{Context, bail};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// Bound on each setup and check request.
const SETUP_TIMEOUT: Duration = Duration::from_secs(30);

/// How often [`Client::wait_settled`] polls.
const SETTLE_POLL: Duration = Duration::from_millis(100);

/// How long a settled run's version must stay put to count as final when no
/// `checkpoint.saved` follows its turn (the engine saves one best effort).
const QUIET: Duration = Duration::from_secs(2);

/// Largest page the API serves.
const PAGE: usize = 500;

/// A client holding one API key; cheap to clone (the connection pool is shared).
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    key: String,
    /// Bound on each load request.
    timeout: Duration,
}

/// A server answer with its body read.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub body: Value,
}

impl Client {
    pub fn new(key: &str, timeout: Duration) -> anyhow::Result<Self> {
        let http = baton_testkit::http_client_builder()
            .tcp_nodelay(true)
            .build()
            .context("cannot build the HTTP client")?;
        Ok(Client {
            http,
            key: key.to_string(),
            timeout,
        })
    }

    /// Sends one request (a JSON body when given) and reads the whole answer, bounded by
    /// `timeout`. A body that is not JSON is kept as a string.
    async fn send(
        &self,
        method: reqwest::Method,
        url: &str,
        body: Option<&Value>,
        timeout: Duration,
    ) -> Result<Answer, reqwest::Error> {
        let mut r = self
            .authorized(self.http.request(method, url))
            .timeout(timeout);
        if let Some(b) = body {
            r = r.json(b);
        }
        let res = r.send().await?;
        let status = res.status().as_u16();
        let text = res.text().await?;
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Ok(Answer { status, body })
    }

    /// The request with the client's key, if it has one (the embedded tier's API takes
    /// requests without one).
    fn authorized(&self, r: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        if self.key.is_empty() {
            r
        } else {
            r.bearer_auth(&self.key)
        }
    }

    /// Opens the run's event stream (`Accept: text/event-stream`), bounded by the load
    /// timeout until its headers arrive; the body is the caller's to read. A failure is
    /// the load outcome it counts as.
    pub async fn open_stream(
        &self,
        base: &str,
        run: uuid::Uuid,
    ) -> Result<reqwest::Response, Outcome> {
        let r = self
            .authorized(self.http.get(format!("{base}/v1/runs/{run}/events")))
            .header("accept", "text/event-stream");
        match tokio::time::timeout(self.timeout, r.send()).await {
            Err(_) => Err(Outcome::Error("timeout".into())),
            Ok(Err(e)) => Err(classify(Err(e))),
            Ok(Ok(res)) if res.status().as_u16() == 200 => Ok(res),
            Ok(Ok(res)) => Err(Outcome::Error(format!(
                "stream_http_{}",
                res.status().as_u16()
            ))),
        }
    }

    /// A load request: `GET` when `body` is `None`, else `POST`; classified, with the
    /// answer's body when it succeeded.
    pub async fn load(&self, url: String, body: Option<Value>) -> (Outcome, Option<Value>) {
        let method = if body.is_some() {
            reqwest::Method::POST
        } else {
            reqwest::Method::GET
        };
        match self.send(method, &url, body.as_ref(), self.timeout).await {
            Ok(a) if (200..300).contains(&a.status) => (Outcome::Ok, Some(a.body)),
            other => (classify(other), None),
        }
    }

    /// A setup or check request that must answer `want`; returns the body.
    pub async fn expect(
        &self,
        url: &str,
        body: Option<&Value>,
        want: u16,
    ) -> anyhow::Result<Value> {
        let method = if body.is_some() {
            reqwest::Method::POST
        } else {
            reqwest::Method::GET
        };
        let a = self
            .send(method, url, body, SETUP_TIMEOUT)
            .await
            .with_context(|| format!("request to {url} failed"))?;
        if a.status != want {
            bail!("{url} answered {} (wanted {want}): {}", a.status, a.body);
        }
        Ok(a.body)
    }

    /// Creates a scripted agent whose reply `i` waits `delays_ms[i]` and never ends the
    /// run; returns its id.
    pub async fn scripted_agent(
        &self,
        base: &str,
        name: &str,
        delays_ms: &[u64],
    ) -> anyhow::Result<String> {
        let replies: Vec<Value> = delays_ms
            .iter()
            .map(|d| json!({"content": "ok", "delay_ms": d, "complete_run": false}))
            .collect();
        let body = json!({"name": name, "provider": {"kind": "scripted", "replies": replies}});
        let a = self
            .expect(&format!("{base}/v1/agents"), Some(&body), 201)
            .await
            .context("creating the scripted agent")?;
        a["id"]
            .as_str()
            .map(str::to_string)
            .context("the agent has no id")
    }

    /// Creates a run of `agent` (its first turn starts at once when `message` is given).
    pub async fn create_run(
        &self,
        base: &str,
        agent: &str,
        message: Option<&str>,
    ) -> anyhow::Result<uuid::Uuid> {
        let mut body = json!({"agent_id": agent});
        if let Some(m) = message {
            body["message"] = json!(m);
        }
        let a = self
            .expect(&format!("{base}/v1/runs"), Some(&body), 201)
            .await
            .context("creating a run")?;
        run_id(&a)
    }

    /// The run's projection.
    pub async fn run(&self, base: &str, run: uuid::Uuid) -> anyhow::Result<Value> {
        self.expect(&format!("{base}/v1/runs/{run}"), None, 200)
            .await
    }

    /// Polls the runs (spread over `bases`) until each has settled for good: its status is
    /// neither `queued` nor `running`, and it has either ended or announced the settled
    /// turn's checkpoint (the engine appends `checkpoint.saved` just after a turn settles,
    /// best effort, so a version that stays put for [`QUIET`] counts too). Returns their
    /// projections. Fails after `deadline`.
    pub async fn wait_settled(
        &self,
        bases: &[String],
        runs: &[uuid::Uuid],
        deadline: Duration,
    ) -> anyhow::Result<Vec<Value>> {
        let until = Instant::now() + deadline;
        let mut pending: Vec<(usize, uuid::Uuid)> = runs.iter().copied().enumerate().collect();
        let mut settled: Vec<Value> = vec![Value::Null; runs.len()];
        // A run seen settled but not yet checkpointed: its version and since when.
        let mut resting: Vec<Option<(i64, Instant)>> = vec![None; runs.len()];
        while !pending.is_empty() {
            let mut still = Vec::new();
            for (i, run) in pending {
                let base = &bases[i % bases.len()];
                let body = self.run(base, run).await?;
                let version = body["version"].as_i64().unwrap_or(-1);
                let done = match body["status"].as_str() {
                    Some("queued" | "running") => false,
                    Some("completed" | "failed" | "cancelled") => true,
                    _ => {
                        let last = self.last_event_type(base, run, version).await?;
                        match resting[i] {
                            _ if last.as_deref() == Some("checkpoint.saved") => true,
                            Some((v, since)) if v == version => since.elapsed() >= QUIET,
                            _ => {
                                resting[i] = Some((version, Instant::now()));
                                false
                            }
                        }
                    }
                };
                if done {
                    settled[i] = body;
                } else {
                    still.push((i, run));
                }
            }
            pending = still;
            if pending.is_empty() {
                break;
            }
            if Instant::now() > until {
                bail!(
                    "{} of {} runs still in a turn after {deadline:?}",
                    pending.len(),
                    runs.len()
                );
            }
            tokio::time::sleep(SETTLE_POLL).await;
        }
        Ok(settled)
    }

    /// The type of the run's event at `version` (`None` for a run with no events).
    async fn last_event_type(
        &self,
        base: &str,
        run: uuid::Uuid,
        version: i64,
    ) -> anyhow::Result<Option<String>> {
        if version < 1 {
            return Ok(None);
        }
        let after = version - 1;
        let page = self
            .expect(
                &format!("{base}/v1/runs/{run}/events?after={after}&limit=1"),
                None,
                200,
            )
            .await?;
        Ok(page["events"][0]["type"].as_str().map(str::to_string))
    }

    /// Every event of the run, page after page (bounded by the run's version as read
    /// first: events appended meanwhile are not read).
    pub async fn events(&self, base: &str, run: uuid::Uuid) -> anyhow::Result<Vec<Value>> {
        let version = self.run(base, run).await?["version"]
            .as_i64()
            .context("the run has no version")?;
        let mut all = Vec::new();
        let mut after = 0;
        while after < version {
            let page = self
                .expect(
                    &format!("{base}/v1/runs/{run}/events?after={after}&limit={PAGE}"),
                    None,
                    200,
                )
                .await?;
            let events = page["events"]
                .as_array()
                .context("an events page without events")?;
            if events.is_empty() {
                break;
            }
            all.extend(events.iter().cloned());
            after = page["next_after"].as_i64().context("no next_after")?;
        }
        Ok(all)
    }

    /// Every message of the run, page after page.
    pub async fn messages(&self, base: &str, run: uuid::Uuid) -> anyhow::Result<Vec<Value>> {
        let mut all = Vec::new();
        let mut cursor: Option<String> = None;
        // A run holds at most a few thousand messages here: 100 pages is a safe bound.
        for _ in 0..100 {
            let mut url = format!("{base}/v1/runs/{run}/messages?limit={PAGE}");
            if let Some(c) = &cursor {
                url.push_str(&format!("&cursor={c}"));
            }
            let page = self.expect(&url, None, 200).await?;
            let items = page["items"]
                .as_array()
                .context("a messages page without items")?;
            all.extend(items.iter().cloned());
            match page["next_cursor"].as_str() {
                Some(c) if !items.is_empty() => cursor = Some(c.to_string()),
                _ => return Ok(all),
            }
        }
        bail!("run {run} has more than 100 pages of messages")
    }
}

/// The run id of a `POST /v1/runs` answer.
pub fn run_id(body: &Value) -> anyhow::Result<uuid::Uuid> {
    body["run"]["id"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("no run id in {body}"))
}

/// Whether an error of this kind may hide a request the server carried out (its
/// answer was lost).
pub fn answer_lost(kind: &str) -> bool {
    matches!(kind, "timeout" | "transport" | "body")
}

/// A load request's outcome: 2xx is `Ok`, `409 run_busy` is `Busy`, anything else an
/// error named by status and problem code, or by transport failure.
pub fn classify(r: Result<Answer, reqwest::Error>) -> Outcome {
    match r {
        Ok(a) if (200..300).contains(&a.status) => Outcome::Ok,
        Ok(a) if a.status == 409 && a.body["code"] == "run_busy" => Outcome::Busy,
        Ok(a) => {
            let code = a.body["code"].as_str().unwrap_or("no_code");
            Outcome::Error(format!("http_{}_{code}", a.status))
        }
        Err(e) if e.is_timeout() => Outcome::Error("timeout".into()),
        Err(e) if e.is_connect() => Outcome::Error("connect".into()),
        Err(e) if e.is_body() || e.is_decode() => Outcome::Error("body".into()),
        Err(_) => Outcome::Error("transport".into()),
    }
}
