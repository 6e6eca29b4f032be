//! Active runs with tool calls for the fault scenarios: an agent whose every turn calls
//! the `record` mutation on a local [`ToolServer`] and then answers, and one driver task
//! per run that posts the next message (`w<k>`, request id `<run>-w<k>`, repeated until
//! an answer is definitive) each time the run is idle, resolves calls held uncertain
//! (`complete`, never `retry`: a mutation must not run twice) and, once told to stop,
//! lets the run settle. Then [`mutations`] and [`writes`] hold what the tool endpoint
//! and the run's messages show against what was recorded and accepted.

use crate::client::{self, Client};
use crate::open_loop::Outcome;
use crate::target::Rotation;
use anyhow::Context;
use baton_testkit::{Behaviour, ToolServer};
use futures::StreamExt;
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The most replies a scripted agent may have (the API's limit); a turn takes two.
const MAX_SCRIPT_REPLIES: usize = 1000;

/// How often a driver polls its run.
const POLL: Duration = Duration::from_millis(200);

/// How many runs are created at once.
const CREATE_CONCURRENCY: usize = 8;

/// The tool every turn calls.
pub const TOOL: &str = "record";

/// What the drivers do.
#[derive(Debug, Clone)]
pub struct Plan {
    pub runs: usize,
    /// Delay of each scripted model step (two per turn), in ms.
    pub reply_ms: u64,
    /// How long the tool endpoint takes to answer, in ms.
    pub tool_ms: u64,
}

/// The runs and their drivers.
pub struct Drivers {
    pub runs: Vec<uuid::Uuid>,
    pub tools: ToolServer,
    stop: Arc<AtomicBool>,
    handles: Vec<tokio::task::JoinHandle<Driven>>,
}

/// What one driver did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Driven {
    pub run: uuid::Uuid,
    /// Message numbers the API accepted (201), `w0` being the first message.
    pub accepted: Vec<u64>,
    /// Client-visible errors by `operation: kind`.
    pub errors: BTreeMap<String, u64>,
    /// Calls held uncertain that the driver resolved.
    pub uncertain_resolved: u64,
    /// The run's status at the end.
    pub status: String,
    pub failure: Option<String>,
}

/// Creates the tool, the agent and `plan.runs` runs (each with its first message, `w0`)
/// and starts a driver per run on `rotation`, each ending by `deadline`.
pub async fn start(
    client: &Client,
    base: &str,
    rotation: Rotation,
    plan: &Plan,
    deadline: Instant,
) -> anyhow::Result<Drivers> {
    let tools = ToolServer::start().await;
    tools.set(
        TOOL,
        Behaviour {
            delay: Duration::from_millis(plan.tool_ms),
            ..Behaviour::default()
        },
    );
    let tool = client
        .expect(
            &format!("{base}/v1/tools"),
            Some(
                &json!({"name": TOOL, "input_schema": {}, "effect": "mutation",
                         "kind": {"kind": "http", "url": tools.url(TOOL)}}),
            ),
            201,
        )
        .await
        .context("creating the tool")?;
    let turns = MAX_SCRIPT_REPLIES / 2;
    let mut replies = Vec::with_capacity(turns * 2);
    for t in 0..turns {
        replies.push(
            json!({"tool_calls": [{"name": TOOL, "arguments": {"turn": t}}],
                            "delay_ms": plan.reply_ms}),
        );
        replies.push(json!({"content": "recorded", "delay_ms": plan.reply_ms,
                            "complete_run": false}));
    }
    let agent = client
        .expect(
            &format!("{base}/v1/agents"),
            Some(&json!({"name": "loadtest worker", "tools": [tool["id"]],
                         "provider": {"kind": "scripted", "replies": replies}})),
            201,
        )
        .await
        .context("creating the worker agent")?;
    let agent = agent["id"]
        .as_str()
        .context("the agent has no id")?
        .to_string();
    let runs: Vec<uuid::Uuid> = futures::stream::iter(0..plan.runs)
        .map(|i| {
            let base = rotation.pick(i as u64).unwrap_or_else(|| base.to_string());
            let (client, agent) = (client.clone(), agent.clone());
            async move { client.create_run(&base, &agent, Some("w0")).await }
        })
        .buffer_unordered(CREATE_CONCURRENCY)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<anyhow::Result<_>>()?;
    let stop = Arc::new(AtomicBool::new(false));
    let handles = runs
        .iter()
        .enumerate()
        .map(|(i, run)| {
            let d = Driver {
                client: client.clone(),
                rotation: rotation.clone(),
                run: *run,
                home: i as u64,
                stop: stop.clone(),
                max_turns: turns as u64,
                deadline,
            };
            tokio::spawn(d.drive())
        })
        .collect();
    Ok(Drivers {
        runs,
        tools,
        stop,
        handles,
    })
}

impl Drivers {
    /// Tells the drivers to post no more and waits for each run to settle.
    pub async fn finish(&mut self) -> Vec<Driven> {
        self.stop.store(true, Ordering::Relaxed);
        let mut out = Vec::with_capacity(self.handles.len());
        for (h, run) in self.handles.drain(..).zip(&self.runs) {
            out.push(h.await.unwrap_or_else(|e| Driven {
                run: *run,
                failure: Some(format!("the driver of {run} panicked: {e}")),
                ..Driven::default()
            }));
        }
        out
    }
}

struct Driver {
    client: Client,
    rotation: Rotation,
    run: uuid::Uuid,
    home: u64,
    stop: Arc<AtomicBool>,
    max_turns: u64,
    deadline: Instant,
}

impl Driver {
    async fn drive(self) -> Driven {
        let mut d = Driven {
            run: self.run,
            accepted: vec![0],
            ..Driven::default()
        };
        let run = self.run;
        // The message being posted and whether an answer to it may have been lost.
        let mut next = 1u64;
        let mut pending = false;
        for tick in 0u64.. {
            if Instant::now() >= self.deadline {
                d.failure = Some(format!("run {run} was still {} at the deadline", d.status));
                break;
            }
            let Some(base) = self.rotation.pick(self.home + tick) else {
                tokio::time::sleep(POLL).await;
                continue;
            };
            let (outcome, body) = self
                .client
                .load(format!("{base}/v1/runs/{run}"), None)
                .await;
            let Some(summary) = body else {
                count(&mut d, "get_run", &outcome);
                tokio::time::sleep(POLL).await;
                continue;
            };
            d.status = summary["status"].as_str().unwrap_or("?").to_string();
            match d.status.as_str() {
                "queued" | "running" => {}
                "requires_action" => match self.resolve(&base).await {
                    Ok(n) => d.uncertain_resolved += n,
                    Err(kind) => count_kind(&mut d, "resolve", &kind),
                },
                "waiting" => {
                    let stopping = self.stop.load(Ordering::Relaxed) || next >= self.max_turns;
                    if stopping && !pending {
                        break;
                    }
                    let url = format!("{base}/v1/runs/{run}/messages");
                    let body = json!({"content": format!("w{next}"),
                                      "request_id": format!("{run}-w{next}")});
                    let (outcome, _) = self.client.load(url, Some(body)).await;
                    match &outcome {
                        Outcome::Ok => {
                            d.accepted.push(next);
                            next += 1;
                            pending = false;
                        }
                        Outcome::Busy => {}
                        Outcome::Error(kind) => {
                            pending |= client::answer_lost(kind);
                            count(&mut d, "post_message", &outcome);
                        }
                    }
                    continue;
                }
                other => {
                    d.failure = Some(format!(
                        "run {run} ended {other}: {}",
                        summary["last_error"]
                    ));
                    break;
                }
            }
            tokio::time::sleep(POLL).await;
        }
        d
    }

    /// Resolves every call of the run held uncertain with `complete`; returns how many.
    async fn resolve(&self, base: &str) -> Result<u64, String> {
        let run = self.run;
        let (outcome, body) = self
            .client
            .load(format!("{base}/v1/runs/{run}/receipts"), None)
            .await;
        let body = body.ok_or_else(|| kind_of(&outcome))?;
        let mut n = 0;
        for r in body["items"].as_array().into_iter().flatten() {
            if r["state"] != "uncertain" {
                continue;
            }
            let id = r["id"].as_str().unwrap_or_default();
            let url = format!("{base}/v1/runs/{run}/receipts/{id}/resolve");
            let body = json!({"resolution": "complete",
                              "output": "recorded (resolved by the load harness)"});
            match self.client.load(url, Some(body)).await.0 {
                Outcome::Ok => n += 1,
                other => return Err(kind_of(&other)),
            }
        }
        Ok(n)
    }
}

fn kind_of(o: &Outcome) -> String {
    match o {
        Outcome::Ok => "ok".into(),
        Outcome::Busy => "http_409_run_busy".into(),
        Outcome::Error(k) => k.clone(),
    }
}

fn count(d: &mut Driven, op: &str, o: &Outcome) {
    count_kind(d, op, &kind_of(o));
}

fn count_kind(d: &mut Driven, op: &str, kind: &str) {
    *d.errors.entry(format!("{op}: {kind}")).or_default() += 1;
}

/// What the tool endpoint received against the receipts the runs recorded.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Mutations {
    /// `tool.intent` events: calls the engine meant to make, one receipt each.
    pub intents: u64,
    /// Requests that reached the tool endpoint (answered or abandoned).
    pub calls: u64,
    /// Receipts with an `ok` result.
    pub ok: u64,
    /// Receipts held uncertain (by a replica that adopted the run mid-call).
    pub uncertain: u64,
    /// Receipts resolved by a member.
    pub resolved: u64,
    /// Receipts with a result that is not `ok` and no resolution.
    pub failed: u64,
    /// Receipts with neither result nor resolution at the end.
    pub unfinished: u64,
    /// Calls beyond one per receipt: by idempotency key, or by count against the intents.
    pub duplicated: u64,
    /// Answered calls whose idempotency key is no recorded receipt.
    pub without_intent: u64,
}

/// One receipt as the stream recorded it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Receipt {
    /// `tool.result` outcome, if any.
    pub result: Option<String>,
    pub uncertain: bool,
    pub resolved: bool,
}

/// Counts the mutations: `receipts` by idempotency key (from the events), `calls`
/// requests started at the endpoint, `answered_keys` the idempotency key of each call
/// answered.
pub fn mutations(
    receipts: &HashMap<String, Receipt>,
    calls: u64,
    answered_keys: &[Option<String>],
) -> Mutations {
    let mut m = Mutations {
        intents: receipts.len() as u64,
        calls,
        ..Mutations::default()
    };
    for r in receipts.values() {
        m.uncertain += u64::from(r.uncertain);
        m.resolved += u64::from(r.resolved);
        match (&r.result, r.resolved) {
            (_, true) => {}
            (Some(o), false) if o == "ok" => m.ok += 1,
            (Some(_), false) => m.failed += 1,
            (None, false) => m.unfinished += 1,
        }
    }
    let mut per_key: HashMap<&str, u64> = HashMap::new();
    for key in answered_keys {
        match key.as_deref() {
            Some(k) if receipts.contains_key(k) => *per_key.entry(k).or_default() += 1,
            _ => m.without_intent += 1,
        }
    }
    let by_key: u64 = per_key.values().map(|n| n - 1).sum();
    m.duplicated = by_key.max(calls.saturating_sub(m.intents));
    m
}

/// The receipts of `runs` from their stored events, by idempotency key.
pub async fn receipts(
    pool: &sqlx::PgPool,
    runs: &[uuid::Uuid],
) -> anyhow::Result<HashMap<String, Receipt>> {
    let rows: Vec<(String, Value)> = sqlx::query_as(
        "SELECT type, data FROM events WHERE stream_id = ANY($1) AND type IN \
         ('tool.intent', 'tool.result', 'tool.uncertain', 'tool.resolved') \
         ORDER BY stream_id, version",
    )
    .bind(runs)
    .fetch_all(pool)
    .await
    .context("cannot read the tool events")?;
    // Results and resolutions name the receipt; the intent maps it to the key.
    let mut key_of: HashMap<String, String> = HashMap::new();
    let mut out: HashMap<String, Receipt> = HashMap::new();
    for (t, data) in &rows {
        let receipt = data["receipt_id"].as_str().unwrap_or_default().to_string();
        if t == "tool.intent" {
            let key = data["idempotency_key"]
                .as_str()
                .unwrap_or(&receipt)
                .to_string();
            out.entry(key.clone()).or_default();
            key_of.insert(receipt, key);
            continue;
        }
        let key = key_of.get(&receipt).cloned().unwrap_or(receipt);
        let r = out.entry(key).or_default();
        match t.as_str() {
            "tool.result" => r.result = Some(data["outcome"].as_str().unwrap_or("?").into()),
            "tool.uncertain" => r.uncertain = true,
            _ => r.resolved = true,
        }
    }
    Ok(out)
}

/// Accepted writes against the stored user messages of one run.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Writes {
    pub accepted: u64,
    /// Accepted but not stored.
    pub lost: u64,
    /// Stored more than once.
    pub duplicated: u64,
    /// Stored but never accepted.
    pub unexpected: u64,
}

/// Compares the accepted message numbers with the stored user messages' contents.
pub fn writes(accepted: &[u64], stored: &[String]) -> Writes {
    let mut times: HashMap<&str, u64> = HashMap::new();
    for c in stored {
        *times.entry(c.as_str()).or_default() += 1;
    }
    let want: HashSet<String> = accepted.iter().map(|k| format!("w{k}")).collect();
    let mut w = Writes {
        accepted: want.len() as u64,
        ..Writes::default()
    };
    for k in &want {
        if !times.contains_key(k.as_str()) {
            w.lost += 1;
        }
    }
    for (c, n) in &times {
        w.duplicated += n - 1;
        if !want.contains(*c) {
            w.unexpected += 1;
        }
    }
    w
}

#[cfg(test)]
mod tests;
