//! A local tool endpoint for tests of `http` tools: answers `POST /tools/{name}` as
//! each tool is set up to (status, body, delay), and counts what it received, per tool
//! and per `Idempotency-Key`, so a test can prove a mutation ran exactly once.

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// How a tool answers.
#[derive(Debug, Clone)]
pub struct Behaviour {
    pub status: u16,
    /// The body; `None` echoes `{"tool": name, "arguments": ...}`.
    pub body: Option<String>,
    pub delay: Duration,
}

impl Default for Behaviour {
    fn default() -> Self {
        Self {
            status: 200,
            body: None,
            delay: Duration::ZERO,
        }
    }
}

/// One request a tool received.
#[derive(Debug, Clone)]
pub struct ToolRequest {
    pub tool: String,
    pub arguments: serde_json::Value,
    pub idempotency_key: Option<String>,
    pub headers: HeaderMap,
}

#[derive(Default)]
struct Shared {
    behaviours: HashMap<String, Behaviour>,
    received: Vec<ToolRequest>,
    /// Requests started, including ones whose caller gave up.
    started: HashMap<String, usize>,
    in_flight: usize,
    max_in_flight: usize,
}

/// A running tool endpoint; it stops when dropped.
pub struct ToolServer {
    addr: std::net::SocketAddr,
    shared: Arc<Mutex<Shared>>,
    task: JoinHandle<()>,
}

impl ToolServer {
    pub async fn start() -> ToolServer {
        let shared = Arc::new(Mutex::new(Shared::default()));
        let app = Router::new()
            .route("/tools/{name}", axum::routing::post(answer))
            .with_state(shared.clone());
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        let addr = listener.local_addr().expect("local addr");
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        ToolServer { addr, shared, task }
    }

    /// The URL of tool `name`.
    pub fn url(&self, name: &str) -> String {
        format!("http://{}/tools/{name}", self.addr)
    }

    pub fn set(&self, name: &str, b: Behaviour) {
        self.lock().behaviours.insert(name.to_string(), b);
    }

    /// Requests of `name` that reached the endpoint (started, whether or not the
    /// caller waited for the answer).
    pub fn calls(&self, name: &str) -> usize {
        self.lock().started.get(name).copied().unwrap_or(0)
    }

    /// Requests of `name` that were answered, in order.
    pub fn received(&self, name: &str) -> Vec<ToolRequest> {
        self.lock()
            .received
            .iter()
            .filter(|r| r.tool == name)
            .cloned()
            .collect()
    }

    /// The most requests that were in flight at once.
    pub fn max_in_flight(&self) -> usize {
        self.lock().max_in_flight
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for ToolServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Leaves the in-flight count when the request ends, answered or abandoned.
struct InFlight(Arc<Mutex<Shared>>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .in_flight -= 1;
    }
}

async fn answer(
    State(shared): State<Arc<Mutex<Shared>>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: String,
) -> (StatusCode, String) {
    let behaviour = {
        let mut s = shared.lock().unwrap_or_else(PoisonError::into_inner);
        *s.started.entry(name.clone()).or_default() += 1;
        s.in_flight += 1;
        s.max_in_flight = s.max_in_flight.max(s.in_flight);
        s.behaviours.get(&name).cloned().unwrap_or_default()
    };
    let _guard = InFlight(shared.clone());
    tokio::time::sleep(behaviour.delay).await;
    let arguments: serde_json::Value =
        serde_json::from_str(&body).unwrap_or(serde_json::Value::String(body));
    let idempotency_key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let echo = serde_json::json!({"tool": name, "arguments": arguments}).to_string();
    shared
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .received
        .push(ToolRequest {
            tool: name,
            arguments,
            idempotency_key,
            headers,
        });
    let status = StatusCode::from_u16(behaviour.status).unwrap_or(StatusCode::OK);
    (status, behaviour.body.unwrap_or(echo))
}
