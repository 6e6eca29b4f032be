//! Baton's Model Context Protocol client: the Streamable HTTP transport, through the
//! egress client, for the two things Baton asks of a server (list its tools, call one).
//!
//! **Negotiation.** A connection first probes `server/discover` at the stateless revision
//! ([`MODERN_VERSION`]): a server that lists it is spoken to one self-contained POST per
//! request, the protocol version, capabilities and client in each request's `_meta` and
//! its `MCP-Protocol-Version`, `Mcp-Method` (and `Mcp-Name`) headers. Any other answer
//! but a network failure (a JSON-RPC error, a 4xx) falls back to the `initialize`
//! handshake offering [`OFFERED_VERSION`], accepting any of [`HANDSHAKE_VERSIONS`] the
//! server picks, with the session id it hands out on every later request and the session
//! ended (`DELETE`) when the connection is dropped. What a server agreed on is kept per
//! URL and credentials ([`Eras`]).
//!
//! **Answers** are a JSON body or an event stream holding the response and, before it,
//! the server's messages: `notifications/progress` for the call's own progress token is
//! handed to the caller; a server's request is answered (`ping`) or refused (-32601:
//! Baton offers no sampling, elicitation or roots); other notifications are skipped.
//! Bodies and events are read up to caps; nothing a server sends is kept whole beyond
//! them.
//!
//! **Cancellation.** Dropping a connection while a call is in flight (the run was
//! cancelled, or the call got no answer in its time) sends `notifications/cancelled`
//! for it in the handshake era, then ends the session; in the stateless revision closing
//! the response is the cancellation.
//!
//! **What a failure says** ([`McpFailure`]) never holds an address or a secret the
//! connection sent (see [`McpConnection::mask`]); and [`McpFailure::may_have_run`] tells
//! a call that may have reached the tool from one that certainly did not.

mod oauth;
mod sse;

pub use baton_core::ports::ClientCredentials;
pub use oauth::TokenCache;

use crate::{Egress, Mask, TenantEgress, describe, maybe_sent};
use async_trait::async_trait;
use baton_core::egress::HostRule;
use baton_core::model::{McpImplementation, McpToolInfo};
use baton_core::ports::{ListedTools, McpLister};
use serde_json::{Value, json};
use sse::SseReader;
use std::time::Duration;
use tokio::time::Instant;

/// The stateless revision, tried first.
pub const MODERN_VERSION: &str = "2026-07-28";
/// The revisions of the `initialize` handshake Baton accepts, newest first.
pub const HANDSHAKE_VERSIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];
/// The handshake revision Baton offers. 2025-11-25 lets a server close a call's stream
/// and expect the client to resume it by `Last-Event-ID`, which Baton does not do (a
/// mutation cut off that way would be held uncertain), so it is accepted from a server
/// that insists, not offered.
pub const OFFERED_VERSION: &str = "2025-06-18";
/// The `_meta` key carrying a call's idempotency key (its receipt id); the same value goes
/// in the `Idempotency-Key` header.
pub const IDEMPOTENCY_META_KEY: &str = "baton/idempotency_key";
/// The largest JSON body or event read.
const MAX_MESSAGE_BYTES: usize = 8 * 1024 * 1024;
/// The most pages of a tool list followed.
const MAX_LIST_PAGES: usize = 50;
/// The most tools a listing holds, and the most bytes of tool definitions (names,
/// descriptions, schemas, annotations) kept of it, across its pages.
pub const MAX_LISTED_TOOLS: usize = 500;
pub const MAX_LISTED_BYTES: usize = 4 * 1024 * 1024;
/// The most characters of a tool's description or title kept.
const MAX_DESCRIPTION_CHARS: usize = 4_000;
/// The most characters of a failure's words kept.
const MAX_FAILURE_CHARS: usize = 1_000;
/// The most characters of a progress message kept.
const MAX_PROGRESS_CHARS: usize = 500;
/// How long ending a session (and cancelling a call) may take, after the fact.
const GOODBYE_TIMEOUT: Duration = Duration::from_secs(5);

const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
const META_CLIENT: &str = "io.modelcontextprotocol/clientInfo";
const META_SERVER: &str = "io.modelcontextprotocol/serverInfo";

/// Why a request to a server came to nothing. Never holds an address or a header value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpFailure {
    /// The egress policy refused the URL or what its host resolved to: the rule.
    Denied(String),
    /// Nothing was sent (the server could not be reached), in a few words.
    Unreachable(String),
    /// The request was sent and no answer came (a timeout, a broken connection, a stream
    /// that ended first, an answer that was not MCP), in a few words.
    NoAnswer(String),
    /// The server answered the request with an HTTP error.
    Status(u16),
    /// The server answered with a JSON-RPC error.
    Rpc { code: i64, message: String },
    /// The server speaks no protocol revision Baton does, or broke the protocol before
    /// the request that matters was sent.
    Protocol(String),
    /// No OAuth access token could be had for the server: why, in a few words.
    Auth(String),
}

impl McpFailure {
    /// The request may have reached the tool and taken effect.
    pub fn may_have_run(&self) -> bool {
        matches!(self, McpFailure::NoAnswer(_))
    }

    /// The failure with `mask` applied to what it says, then cut to
    /// [`MAX_FAILURE_CHARS`] (a server's words can be long).
    fn masked(self, mask: &Mask) -> McpFailure {
        let m = |text: String| -> String {
            mask.apply(&text).chars().take(MAX_FAILURE_CHARS).collect()
        };
        match self {
            McpFailure::Denied(why) => McpFailure::Denied(m(why)),
            McpFailure::Unreachable(why) => McpFailure::Unreachable(m(why)),
            McpFailure::NoAnswer(why) => McpFailure::NoAnswer(m(why)),
            McpFailure::Status(status) => McpFailure::Status(status),
            McpFailure::Rpc { code, message } => McpFailure::Rpc {
                code,
                message: m(message),
            },
            McpFailure::Protocol(why) => McpFailure::Protocol(m(why)),
            McpFailure::Auth(why) => McpFailure::Auth(m(why)),
        }
    }
}

impl std::fmt::Display for McpFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            McpFailure::Denied(rule) => write!(f, "{rule}"),
            McpFailure::Unreachable(why) => write!(f, "the server could not be reached: {why}"),
            McpFailure::NoAnswer(why) => write!(f, "no answer came: {why}"),
            McpFailure::Status(401 | 403) => write!(
                f,
                "the server refused Baton's credentials (HTTP 401/403): check its secret headers"
            ),
            McpFailure::Status(status) => write!(f, "the server answered HTTP {status}"),
            McpFailure::Rpc { code, message } => {
                write!(f, "the server answered error {code}: {message}")
            }
            McpFailure::Protocol(why) => write!(f, "{why}"),
            McpFailure::Auth(why) => write!(f, "OAuth: {why}"),
        }
    }
}

/// Where a server is and the credentials it is called with.
#[derive(Clone)]
pub struct McpEndpoint {
    pub url: url::Url,
    /// Sent with every request (from the tenant's secrets).
    pub headers: Vec<(String, String)>,
    /// OAuth client credentials, used when the server answers `401` (their tokens are
    /// kept and sent as `Authorization: Bearer`).
    pub oauth: Option<ClientCredentials>,
}

impl McpEndpoint {
    /// The secrets the endpoint carries (and `bearer`, a token bought for it), masked in
    /// whatever a server sends back.
    fn mask(&self, bearer: Option<&str>) -> Mask {
        let headers = self.headers.iter().map(|(_, v)| v.clone());
        let client_secret = self.oauth.iter().map(|o| o.client_secret.clone());
        Mask::new(
            headers
                .chain(client_secret)
                .chain(bearer.map(str::to_string)),
        )
    }
}

impl std::fmt::Debug for McpEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(h, _)| h.as_str()).collect();
        f.debug_struct("McpEndpoint")
            .field("url", &self.url.as_str())
            .field("headers", &names)
            .field("oauth", &self.oauth)
            .finish()
    }
}

/// A server's progress notification for a call.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    pub progress: f64,
    pub total: Option<f64>,
    pub message: Option<String>,
}

/// What a server agreed on before.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Known {
    /// The stateless revision, at this version.
    Modern(String),
    /// The `initialize` handshake.
    Handshake,
}

/// The revision each server agreed on last, so a call needs no probe; shared by the
/// process's connections, forgotten when a server answers as if it no longer spoke it.
/// Kept per URL and credentials: what a server speaks may depend on who asks (a gateway
/// in front of it), and one tenant's answers never steer another's calls.
#[derive(Clone, Default)]
pub struct Eras {
    known: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, Known>>>,
}

impl Eras {
    /// Servers remembered at most (all are forgotten beyond it).
    const MAX: usize = 4096;

    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, Known>> {
        self.known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn key(endpoint: &McpEndpoint) -> String {
        let mut key = endpoint.url.to_string();
        for (h, v) in &endpoint.headers {
            key.push_str(&format!("\n{h}: {v}"));
        }
        if let Some(o) = &endpoint.oauth {
            key.push_str(&format!("\noauth: {}", o.client_id));
        }
        key
    }

    pub(crate) fn get(&self, endpoint: &McpEndpoint) -> Option<Known> {
        self.lock().get(&Self::key(endpoint)).cloned()
    }

    pub(crate) fn put(&self, endpoint: &McpEndpoint, known: Known) {
        let mut map = self.lock();
        if map.len() >= Self::MAX {
            map.clear();
        }
        map.insert(Self::key(endpoint), known);
    }

    pub(crate) fn forget(&self, endpoint: &McpEndpoint) {
        self.lock().remove(&Self::key(endpoint));
    }
}

/// How the connection talks to the server.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Era {
    /// One POST per request, the version in each.
    Modern,
    /// After `initialize`, with the session id the server gave, if any.
    Handshake { session: Option<String> },
}

/// A negotiated conversation with one server.
pub struct McpConnection {
    egress: TenantEgress,
    endpoint: McpEndpoint,
    mask: Mask,
    era: Era,
    /// The protocol revision agreed on.
    pub version: String,
    pub server_info: Option<McpImplementation>,
    next_id: i64,
    /// The request id of a call sent and not answered yet: cancelled if the connection is
    /// dropped.
    in_flight: Option<i64>,
    /// The OAuth access token sent, if any; `authorized`: one was bought for this
    /// connection (a second `401` is final).
    bearer: Option<String>,
    authorized: bool,
}

impl std::fmt::Debug for McpConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpConnection")
            .field("version", &self.version)
            .field("era", &self.era)
            .finish_non_exhaustive()
    }
}

/// One JSON-RPC request to send.
struct Request<'a> {
    method: &'a str,
    params: Value,
    /// Extra headers (a call's idempotency key).
    headers: Vec<(&'static str, String)>,
    /// `Mcp-Name` in the stateless revision.
    name: Option<&'a str>,
}

impl McpConnection {
    /// Connects to `endpoint` and agrees on a protocol revision, by `deadline`. The
    /// revision a server agreed on before (kept per URL, see [`Eras`]) is used without
    /// asking again: a stateless server is spoken to at once, a handshake server gets no
    /// probe first.
    pub async fn open(
        egress: &TenantEgress,
        endpoint: McpEndpoint,
        deadline: Instant,
    ) -> Result<McpConnection, McpFailure> {
        let known = egress.mcp_eras().get(&endpoint);
        let mut c = Self::new(egress, endpoint);
        match known {
            Some(Known::Modern(version)) => {
                c.version = version;
                Ok(c)
            }
            Some(Known::Handshake) => {
                c.handshake(deadline).await?;
                Ok(c)
            }
            None => c.negotiate(deadline).await.map(|()| c),
        }
    }

    /// Connects to `endpoint`, asking the server which revisions it speaks (a discovery
    /// does, so it sees the server as it is now), by `deadline`.
    pub async fn probe(
        egress: &TenantEgress,
        endpoint: McpEndpoint,
        deadline: Instant,
    ) -> Result<McpConnection, McpFailure> {
        let mut c = Self::new(egress, endpoint);
        c.negotiate(deadline).await?;
        Ok(c)
    }

    fn new(egress: &TenantEgress, endpoint: McpEndpoint) -> McpConnection {
        let bearer = endpoint
            .oauth
            .as_ref()
            .and_then(|o| egress.mcp_tokens().get(&endpoint.url, o));
        let mask = endpoint.mask(bearer.as_deref());
        McpConnection {
            egress: egress.clone(),
            endpoint,
            mask,
            era: Era::Modern,
            version: MODERN_VERSION.to_string(),
            server_info: None,
            next_id: 0,
            in_flight: None,
            bearer,
            authorized: false,
        }
    }

    /// `server/discover` at the stateless revision, else the handshake; the outcome is
    /// kept for the URL.
    async fn negotiate(&mut self, deadline: Instant) -> Result<(), McpFailure> {
        let c = self;
        let probe = Request {
            method: "server/discover",
            params: json!({}),
            headers: Vec::new(),
            name: None,
        };
        match c.exchange(probe, deadline, &mut |_| {}).await {
            Ok(result) if lists_modern(&result) => {
                c.server_info = result
                    .pointer(&format!("/_meta/{}", META_SERVER.replace('/', "~1")))
                    .and_then(implementation);
                let eras = c.egress.mcp_eras();
                eras.put(&c.endpoint, Known::Modern(c.version.clone()));
                return Ok(());
            }
            // A network failure, a refusal, a timeout: no verdict on the era.
            Err(
                e @ (McpFailure::Denied(_)
                | McpFailure::Unreachable(_)
                | McpFailure::NoAnswer(_)
                | McpFailure::Auth(_)
                | McpFailure::Status(401 | 403)),
            ) => return Err(e),
            // Anything else (an error, a 4xx, a result listing no modern revision) says
            // the server speaks the handshake.
            Ok(_) | Err(_) => {}
        }
        c.handshake(deadline).await?;
        c.egress.mcp_eras().put(&c.endpoint, Known::Handshake);
        Ok(())
    }

    /// `initialize`, then `notifications/initialized`.
    async fn handshake(&mut self, deadline: Instant) -> Result<(), McpFailure> {
        self.era = Era::Handshake { session: None };
        let init = Request {
            method: "initialize",
            params: json!({
                "protocolVersion": OFFERED_VERSION,
                "capabilities": {},
                "clientInfo": client_info(),
            }),
            headers: Vec::new(),
            name: None,
        };
        let result = self
            .exchange(init, deadline, &mut |_| {})
            .await
            .inspect_err(|_| self.egress.mcp_eras().forget(&self.endpoint))?;
        let version = result
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !HANDSHAKE_VERSIONS.contains(&version) {
            return Err(McpFailure::Protocol(format!(
                "the server speaks MCP revision {:?}, which Baton does not (it speaks {} and {})",
                version.chars().take(32).collect::<String>(),
                MODERN_VERSION,
                HANDSHAKE_VERSIONS.join(", ")
            )));
        }
        self.version = version.to_string();
        self.server_info = result.get("serverInfo").and_then(implementation);
        self.notify("notifications/initialized", json!({}), deadline)
            .await
    }

    /// The secrets this connection sends (secret headers, the OAuth client secret and
    /// token): whatever a server answers is to be shown through it. Failures and
    /// progress messages are masked already.
    pub fn mask(&self) -> &Mask {
        &self.mask
    }

    /// Every tool the server lists, following its pages.
    pub async fn list_tools(&mut self, deadline: Instant) -> Result<Vec<McpToolInfo>, McpFailure> {
        let mut tools = Vec::new();
        let mut bytes = 0;
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_LIST_PAGES {
            let params = match &cursor {
                Some(c) => json!({"cursor": c}),
                None => json!({}),
            };
            let list = Request {
                method: "tools/list",
                params,
                headers: Vec::new(),
                name: None,
            };
            let page = self.exchange(list, deadline, &mut |_| {}).await?;
            let Some(listed) = page.get("tools").and_then(Value::as_array) else {
                return Err(McpFailure::Protocol(
                    "the tool list holds no tools array".into(),
                ));
            };
            for t in listed {
                let tool = tool_info(t)?;
                bytes += tool.name.len()
                    + tool.description.len()
                    + tool.title.as_ref().map_or(0, String::len)
                    + tool.input_schema.to_string().len()
                    + tool.annotations.as_ref().map_or(0, |a| a.to_string().len());
                tools.push(tool);
                if tools.len() > MAX_LISTED_TOOLS || bytes > MAX_LISTED_BYTES {
                    return Err(McpFailure::Protocol(format!(
                        "the server lists more than {MAX_LISTED_TOOLS} tools or {} MiB of \
                         tool definitions",
                        MAX_LISTED_BYTES / (1024 * 1024)
                    )));
                }
            }
            match page.get("nextCursor").and_then(Value::as_str) {
                Some(next) if !next.is_empty() => cursor = Some(next.to_string()),
                _ => return Ok(tools),
            }
        }
        Err(McpFailure::Protocol(format!(
            "the tool list runs past {MAX_LIST_PAGES} pages"
        )))
    }

    /// Calls tool `name` with `arguments`: `idempotency_key` in `_meta` and as the
    /// `Idempotency-Key` header, a progress token so the server may report progress to
    /// `progress`. The result object as the server gave it (`content`,
    /// `structuredContent`, `isError`).
    pub async fn call_tool(
        &mut self,
        name: &str,
        arguments: &Value,
        idempotency_key: &str,
        deadline: Instant,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<Value, McpFailure> {
        let call = Request {
            method: "tools/call",
            params: json!({
                "name": name,
                "arguments": arguments,
                "_meta": {
                    "progressToken": idempotency_key,
                    IDEMPOTENCY_META_KEY: idempotency_key,
                },
            }),
            headers: vec![("Idempotency-Key", idempotency_key.to_string())],
            name: Some(name),
        };
        let result = self.exchange(call, deadline, progress).await;
        // A call that got no answer may still be running: dropping the connection
        // cancels it.
        if !matches!(result, Err(McpFailure::NoAnswer(_))) {
            self.in_flight = None;
        }
        result
    }

    /// Sends a notification; the server acknowledges it with 202 (or 200).
    async fn notify(
        &mut self,
        method: &str,
        params: Value,
        deadline: Instant,
    ) -> Result<(), McpFailure> {
        let body = json!({"jsonrpc": "2.0", "method": method, "params": params});
        let response = self.post(method, None, Vec::new(), body, deadline).await?;
        let status = response.status().as_u16();
        if (200..300).contains(&status) {
            Ok(())
        } else {
            Err(McpFailure::Status(status))
        }
    }

    /// Sends request `r` and reads its answer, handing progress notifications to
    /// `progress` on the way; a failure says nothing the connection's secrets are in.
    async fn exchange(
        &mut self,
        r: Request<'_>,
        deadline: Instant,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<Value, McpFailure> {
        let answer = self.round_trip(r, deadline, progress).await;
        answer.map_err(|f| f.masked(&self.mask))
    }

    async fn round_trip(
        &mut self,
        r: Request<'_>,
        deadline: Instant,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<Value, McpFailure> {
        self.next_id += 1;
        let id = self.next_id;
        let mut params = r.params;
        if self.era == Era::Modern {
            let meta = params
                .as_object_mut()
                .map(|p| p.entry("_meta").or_insert_with(|| json!({})));
            if let Some(Value::Object(meta)) = meta {
                meta.insert(META_VERSION.into(), json!(self.version));
                meta.insert(META_CAPABILITIES.into(), json!({}));
                meta.insert(META_CLIENT.into(), client_info());
            }
        }
        let token = params.pointer("/_meta/progressToken").cloned();
        let body = json!({"jsonrpc": "2.0", "id": id, "method": r.method, "params": params});
        let is_call = r.method == "tools/call";
        if is_call {
            self.in_flight = Some(id);
        }
        let mut response = self
            .post(r.method, r.name, r.headers.clone(), body.clone(), deadline)
            .await?;
        // A server asking for OAuth (or whose token expired) answers 401 before it does
        // anything: buy a token with the client credentials and send the request again.
        if response.status().as_u16() == 401
            && !self.authorized
            && let Some(creds) = self.endpoint.oauth.clone()
        {
            let challenge = response
                .headers()
                .get(reqwest::header::WWW_AUTHENTICATE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let tokens = self.egress.mcp_tokens();
            tokens.forget(&self.endpoint.url, &creds);
            self.authorized = true;
            let token = oauth::token(
                &self.egress,
                &tokens,
                &self.endpoint.url,
                challenge.as_deref(),
                &creds,
                deadline,
            )
            .await?;
            self.mask = self.endpoint.mask(Some(&token));
            self.bearer = Some(token);
            response = self
                .post(r.method, r.name, r.headers, body, deadline)
                .await?;
        }
        if r.method == "initialize"
            && let Some(session) = response
                .headers()
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
                .filter(|s| {
                    !s.is_empty() && s.len() <= 256 && s.bytes().all(|b| (0x21..=0x7e).contains(&b))
                })
        {
            self.era = Era::Handshake {
                session: Some(session.to_string()),
            };
        }
        let status = response.status().as_u16();
        if !(200..300).contains(&status) {
            // A JSON-RPC error in the body says more than the status (but for a refusal
            // of the credentials).
            // What a server answers to a revision it no longer speaks: the next
            // connection asks again.
            if matches!(status, 400 | 404 | 405 | 406) {
                self.egress.mcp_eras().forget(&self.endpoint);
            }
            if !matches!(status, 401 | 403)
                && let Ok(message) = self.read_json(response, deadline).await
                && let Some(e) = rpc_error(&message)
            {
                return Err(e);
            }
            return Err(McpFailure::Status(status));
        }
        let stream = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if stream {
            let token = token.as_ref();
            self.read_stream(response, id, token, deadline, progress)
                .await
        } else {
            let message = self.read_json(response, deadline).await?;
            answer_of(&message, id)
        }
    }

    /// POSTs `body` with the transport's headers, by `deadline`.
    async fn post(
        &self,
        method: &str,
        name: Option<&str>,
        extra: Vec<(&'static str, String)>,
        body: Value,
        deadline: Instant,
    ) -> Result<reqwest::Response, McpFailure> {
        let mut req = request(
            &self.egress,
            &self.endpoint,
            self.bearer.as_deref(),
            reqwest::Method::POST,
            time_left(deadline)?,
        )?
        .json(&body);
        for (h, v) in extra {
            req = req.header(h, v);
        }
        match &self.era {
            Era::Modern => {
                req = req
                    .header("MCP-Protocol-Version", &self.version)
                    .header("Mcp-Method", method);
                if let Some(name) = name.filter(|n| n.bytes().all(|b| (0x20..0x7f).contains(&b))) {
                    req = req.header("Mcp-Name", name);
                }
            }
            Era::Handshake { session } => {
                if method != "initialize" {
                    req = req.header("MCP-Protocol-Version", &self.version);
                }
                if let Some(session) = session {
                    req = req.header("Mcp-Session-Id", session);
                }
            }
        }
        req.send().await.map_err(|e| failure(&e))
    }

    /// A JSON body, read up to the cap by `deadline`.
    async fn read_json(
        &self,
        response: reqwest::Response,
        deadline: Instant,
    ) -> Result<Value, McpFailure> {
        let bytes = read_body(response, deadline, MAX_MESSAGE_BYTES).await?;
        serde_json::from_slice(&bytes).map_err(|_| {
            McpFailure::NoAnswer(format!("the answer is not JSON: {}", self.excerpt(&bytes)))
        })
    }

    /// The answer to request `id` out of an event stream: progress for `token` handed on,
    /// the server's requests answered, other notifications skipped.
    async fn read_stream(
        &self,
        mut response: reqwest::Response,
        id: i64,
        token: Option<&Value>,
        deadline: Instant,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<Value, McpFailure> {
        let mut reader = SseReader::default();
        loop {
            let chunk = match tokio::time::timeout_at(deadline, response.chunk()).await {
                Err(_) => {
                    return Err(McpFailure::NoAnswer(
                        "the answer did not come in time".into(),
                    ));
                }
                Ok(Err(e)) => return Err(McpFailure::NoAnswer(describe(&e).into())),
                Ok(Ok(None)) => {
                    return Err(McpFailure::NoAnswer(
                        "the server's stream ended before the answer".into(),
                    ));
                }
                Ok(Ok(Some(chunk))) => chunk,
            };
            let events = reader.feed(&chunk, MAX_MESSAGE_BYTES).map_err(|_| {
                McpFailure::NoAnswer(format!("an event is larger than {MAX_MESSAGE_BYTES} bytes"))
            })?;
            for data in events {
                let Ok(message) = serde_json::from_str::<Value>(&data) else {
                    continue;
                };
                let method = message.get("method").and_then(Value::as_str);
                if method == Some("notifications/progress") {
                    let params = message.get("params");
                    let ours =
                        token.is_some() && params.and_then(|p| p.get("progressToken")) == token;
                    if ours && let Some(p) = params.and_then(progress_of) {
                        let message = p.message.map(|m| {
                            self.mask
                                .apply(&m)
                                .chars()
                                .take(MAX_PROGRESS_CHARS)
                                .collect()
                        });
                        progress(Progress { message, ..p });
                    }
                    continue;
                }
                if let (Some(method), Some(request)) = (method, message.get("id")) {
                    self.answer_server(method, request, deadline).await;
                    continue;
                }
                if message.get("id") == Some(&json!(id)) && method.is_none() {
                    return answer_of(&message, id);
                }
            }
        }
    }

    /// Answers the server's request `id` (it may ask while a call runs): `ping` with an
    /// empty result; anything else (sampling, elicitation, roots) is refused as a method
    /// Baton does not offer, so the server's tool fails at once instead of waiting. Only
    /// a session of the handshake era has a place to send the answer; a failure to send
    /// it is the server's to notice.
    async fn answer_server(&self, method: &str, id: &Value, deadline: Instant) {
        if !matches!(self.era, Era::Handshake { .. }) {
            return;
        }
        let body = if method == "ping" {
            json!({"jsonrpc": "2.0", "id": id, "result": {}})
        } else {
            json!({"jsonrpc": "2.0", "id": id, "error": {
                "code": -32601, "message": "Baton does not offer this method"}})
        };
        if let Err(e) = self
            .post("response", None, Vec::new(), body, deadline)
            .await
        {
            tracing::debug!(error = %e, "could not answer an MCP server's request");
        }
    }

    /// The start of a body as text, masked (before it is cut, so a secret across the
    /// cut is not shown in part), for a message.
    fn excerpt(&self, bytes: &[u8]) -> String {
        let start = &bytes[..bytes.len().min(200 + self.mask.longest())];
        self.mask
            .apply(&String::from_utf8_lossy(start))
            .chars()
            .take(200)
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect()
    }
}

impl Drop for McpConnection {
    /// Ends the session, cancelling a call still in flight first (after the fact, on
    /// the runtime, within [`GOODBYE_TIMEOUT`]).
    fn drop(&mut self) {
        let Era::Handshake { session } = &self.era else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (egress, endpoint, version) = (
            self.egress.clone(),
            self.endpoint.clone(),
            self.version.clone(),
        );
        let (session, in_flight, bearer) = (session.clone(), self.in_flight, self.bearer.clone());
        runtime.spawn(async move {
            let send = |method: reqwest::Method, body: Option<Value>| {
                let mut req = request(
                    &egress,
                    &endpoint,
                    bearer.as_deref(),
                    method,
                    GOODBYE_TIMEOUT,
                )
                .ok()?
                .header("MCP-Protocol-Version", &version);
                if let Some(session) = &session {
                    req = req.header("Mcp-Session-Id", session);
                }
                if let Some(body) = body {
                    req = req.json(&body);
                }
                Some(req.send())
            };
            if let Some(id) = in_flight
                && let Some(sent) = send(
                    reqwest::Method::POST,
                    Some(json!({
                        "jsonrpc": "2.0",
                        "method": "notifications/cancelled",
                        "params": {"requestId": id, "reason": "the run was cancelled"},
                    })),
                )
            {
                let _ = sent.await;
            }
            if session.is_some()
                && let Some(sent) = send(reqwest::Method::DELETE, None)
            {
                let _ = sent.await;
            }
        });
    }
}

/// A request to `endpoint` through the egress client, with its credentials (the secret
/// headers, the OAuth `bearer` token) and the transport's `Accept`, taking at most
/// `timeout`.
fn request(
    egress: &TenantEgress,
    endpoint: &McpEndpoint,
    bearer: Option<&str>,
    method: reqwest::Method,
    timeout: Duration,
) -> Result<reqwest::RequestBuilder, McpFailure> {
    let mut req = egress
        .request(method, &endpoint.url)
        .map_err(|denied| McpFailure::Denied(denied.to_string()))?
        .timeout(timeout)
        .header(
            reqwest::header::ACCEPT,
            "application/json, text/event-stream",
        )
        .header(reqwest::header::USER_AGENT, "Baton-MCP/1");
    for (h, v) in &endpoint.headers {
        req = req.header(h.as_str(), v.as_str());
    }
    if let Some(token) = bearer {
        req = req.bearer_auth(token);
    }
    Ok(req)
}

/// The time left until `deadline`; none left is a failure before anything is sent.
pub(super) fn time_left(deadline: Instant) -> Result<Duration, McpFailure> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(McpFailure::Unreachable("the time allowed ran out".into()));
    }
    Ok(left)
}

/// A body read whole by `deadline`, up to `max` bytes; anything else is
/// [`McpFailure::NoAnswer`].
pub(super) async fn read_body(
    mut response: reqwest::Response,
    deadline: Instant,
    max: usize,
) -> Result<Vec<u8>, McpFailure> {
    let mut bytes = Vec::new();
    loop {
        match tokio::time::timeout_at(deadline, response.chunk()).await {
            Err(_) => {
                return Err(McpFailure::NoAnswer(
                    "the answer did not come in time".into(),
                ));
            }
            Ok(Err(e)) => return Err(McpFailure::NoAnswer(describe(&e).into())),
            Ok(Ok(None)) => return Ok(bytes),
            Ok(Ok(Some(chunk))) => {
                if bytes.len() + chunk.len() > max {
                    return Err(McpFailure::NoAnswer(format!(
                        "the answer is larger than {max} bytes"
                    )));
                }
                bytes.extend_from_slice(&chunk);
            }
        }
    }
}

/// Baton as an MCP client.
fn client_info() -> Value {
    json!({"name": "baton", "version": env!("CARGO_PKG_VERSION")})
}

/// A `server/discover` result that lists the stateless revision.
fn lists_modern(result: &Value) -> bool {
    result
        .get("supportedVersions")
        .and_then(Value::as_array)
        .is_some_and(|v| v.iter().any(|v| v == MODERN_VERSION))
}

fn implementation(v: &Value) -> Option<McpImplementation> {
    let text = |key: &str| {
        v.get(key)
            .and_then(Value::as_str)
            .map(|s| s.chars().take(200).collect::<String>())
    };
    Some(McpImplementation {
        name: text("name")?,
        version: text("version").unwrap_or_default(),
    })
}

/// The result of JSON-RPC response `message` to request `id`, or its error.
fn answer_of(message: &Value, id: i64) -> Result<Value, McpFailure> {
    if message.get("id") != Some(&json!(id)) {
        return Err(rpc_error(message)
            .unwrap_or_else(|| McpFailure::NoAnswer("the answer is not for the request".into())));
    }
    if let Some(e) = rpc_error(message) {
        return Err(e);
    }
    message.get("result").cloned().ok_or_else(|| {
        McpFailure::NoAnswer("the answer holds neither a result nor an error".into())
    })
}

/// The JSON-RPC error `message` holds, if it is one.
fn rpc_error(message: &Value) -> Option<McpFailure> {
    let error = message.get("error").filter(|e| e.is_object())?;
    let code = error.get("code").and_then(Value::as_i64).unwrap_or(0);
    let message = error.get("message").and_then(Value::as_str).unwrap_or("");
    Some(McpFailure::Rpc {
        code,
        message: message.to_string(),
    })
}

fn progress_of(params: &Value) -> Option<Progress> {
    Some(Progress {
        progress: params.get("progress")?.as_f64()?,
        total: params.get("total").and_then(Value::as_f64),
        message: params
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_string),
    })
}

/// One listed tool as Baton keeps it.
fn tool_info(t: &Value) -> Result<McpToolInfo, McpFailure> {
    let name = t
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| McpFailure::Protocol("a listed tool has no name".into()))?;
    let input_schema = t
        .get("inputSchema")
        .filter(|s| s.is_object())
        .cloned()
        .ok_or_else(|| McpFailure::Protocol(format!("tool {name:?} has no input schema")))?;
    let text = |key: &str| {
        t.get(key)
            .and_then(Value::as_str)
            .map(|s| s.chars().take(MAX_DESCRIPTION_CHARS).collect::<String>())
    };
    Ok(McpToolInfo {
        name: name.to_string(),
        title: text("title"),
        description: text("description").unwrap_or_default(),
        input_schema,
        annotations: t.get("annotations").filter(|a| a.is_object()).cloned(),
    })
}

/// A listed tool with `mask` applied to everything it says (a server could echo the
/// secrets it was sent into a description for members to read).
fn masked_tool(t: McpToolInfo, mask: &Mask) -> Result<McpToolInfo, McpFailure> {
    let json = |v: Value| -> Result<Value, McpFailure> {
        let text = v.to_string();
        let shown = mask.apply(&text);
        if shown == text {
            return Ok(v);
        }
        serde_json::from_str(&shown).map_err(|_| {
            McpFailure::Protocol(format!(
                "tool {:?}'s definition holds a secret Baton sent",
                mask.apply(&t.name)
            ))
        })
    };
    Ok(McpToolInfo {
        name: mask.apply(&t.name),
        title: t.title.as_deref().map(|s| mask.apply(s)),
        description: mask.apply(&t.description),
        input_schema: json(t.input_schema.clone())?,
        annotations: t.annotations.clone().map(json).transpose()?,
    })
}

/// What a failed send says: the policy's rule, or the kind of failure.
pub(crate) fn failure(e: &reqwest::Error) -> McpFailure {
    if let Some(denied) = Egress::denied(e) {
        return McpFailure::Denied(denied.to_string());
    }
    if maybe_sent(e) {
        McpFailure::NoAnswer(describe(e).into())
    } else {
        McpFailure::Unreachable(describe(e).into())
    }
}

#[async_trait]
impl McpLister for Egress {
    async fn list_tools(
        &self,
        hosts: Vec<HostRule>,
        url: &url::Url,
        headers: Vec<(String, String)>,
        oauth: Option<ClientCredentials>,
        timeout: Duration,
    ) -> Result<ListedTools, String> {
        let deadline = Instant::now() + timeout;
        let egress = self.for_tenant(hosts);
        let endpoint = McpEndpoint {
            url: url.clone(),
            headers,
            oauth,
        };
        let said = |e: McpFailure| e.to_string();
        let mut c = McpConnection::probe(&egress, endpoint, deadline)
            .await
            .map_err(said)?;
        let tools = c.list_tools(deadline).await.map_err(said)?;
        let tools = tools
            .into_iter()
            .map(|t| masked_tool(t, c.mask()))
            .collect::<Result<_, _>>()
            .map_err(said)?;
        Ok(ListedTools {
            protocol_version: c.version.clone(),
            server_info: c.server_info.clone(),
            tools,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_is_masked_before_it_is_cut() {
        let mask = Mask::new(["Bearer tok-5e4d3c2b1a".to_string()]);
        let long = format!("{}tok-5e4d3c2b1a", "x".repeat(MAX_FAILURE_CHARS - 4));
        let f = McpFailure::Rpc {
            code: -1,
            message: long,
        }
        .masked(&mask);
        let McpFailure::Rpc { message, .. } = f else {
            panic!("{f:?}")
        };
        assert!(message.chars().count() <= MAX_FAILURE_CHARS);
        assert!(message.ends_with("x***"), "{}", &message[980..]);
        let very_long = McpFailure::Protocol("y".repeat(5_000)).masked(&mask);
        assert_eq!(very_long.to_string().len(), MAX_FAILURE_CHARS);
    }

    #[test]
    fn a_listed_tool_shows_no_secret_it_was_sent() {
        let mask = Mask::new(["hdr-secret-Q1w2E3r4".to_string()]);
        let tool = McpToolInfo {
            name: "echo".into(),
            title: Some("hdr-secret-Q1w2E3r4".into()),
            description: "sent hdr-secret-Q1w2E3r4".into(),
            input_schema: json!({"type": "object", "default": "hdr-secret-Q1w2E3r4"}),
            annotations: None,
        };
        let shown = masked_tool(tool, &mask).expect("masked");
        assert_eq!(shown.title.as_deref(), Some("***"));
        assert_eq!(shown.description, "sent ***");
        assert_eq!(shown.input_schema["default"], "***");
    }

    #[test]
    fn an_endpoint_debug_names_headers_not_their_values() {
        let e = McpEndpoint {
            url: url::Url::parse("https://mcp.example/mcp").expect("url"),
            headers: vec![("X-Key".into(), "hdr-secret-Q1w2E3r4".into())],
            oauth: None,
        };
        let shown = format!("{e:?}");
        assert!(
            shown.contains("X-Key") && !shown.contains("Q1w2E3r4"),
            "{shown}"
        );
    }
}
