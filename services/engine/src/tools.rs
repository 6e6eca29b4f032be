//! Calling an `http` tool, the one place it is done: its secret headers revealed
//! before anything is recorded ([`plan`]), then a POST of the arguments through the
//! egress client with the receipt id as `Idempotency-Key` within the tool's timeout,
//! retried while safe to repeat, and its answer, secrets masked and size-capped, captured
//! as the call's result ([`call`]). A mutation that was sent and got no answer is not an
//! error but an uncertainty a member resolves.

mod mcp;

use crate::outcome::{StepError, info};
use crate::secrets;
use crate::shared::EnginePorts;
use baton_core::TenantId;
use baton_core::model::{McpServer, Tool, ToolKindSpec};
use baton_core::ports::ClientCredentials;
use baton_egress::{Egress, Mask, TenantEgress};
use baton_events::{
    ErrorInfo, RunEvent, ToolEffect, ToolIntent, ToolOutcome, ToolResult, ToolUncertain,
};
use std::time::{Duration, Instant};
use tracing::Instrument;

/// Output beyond this many bytes is cut, with a marker saying so.
pub const MAX_OUTPUT_BYTES: usize = 64 * 1024;
/// Retries of a call that is safe to repeat.
const MAX_RETRIES: u32 = 2;
const RETRY_AFTER: Duration = Duration::from_millis(100);

/// A call ready to run: its intent (to commit first) and its tool.
pub(crate) struct Planned {
    pub(crate) intent: ToolIntent,
    pub(crate) tool: Tool,
    headers: Vec<(String, String)>,
    /// An `mcp` tool's server, as it is now, and its OAuth client credentials.
    server: Option<McpServer>,
    oauth: Option<ClientCredentials>,
}

impl Planned {
    /// An `mcp` tool's server's URL.
    pub(crate) fn server_url(&self) -> Option<&str> {
        self.server.as_ref().map(|s| s.url.as_str())
    }
}

/// The call of `tool` that `intent` records, its secret headers (an `http` tool's, or an
/// `mcp` tool's server's) revealed. A secret that is missing or cannot be read, or an
/// `mcp` tool's server that is gone, fails the turn before anything is recorded.
pub(crate) async fn plan(
    ports: &EnginePorts,
    tenant: TenantId,
    intent: ToolIntent,
    tool: Tool,
) -> Result<Planned, StepError> {
    let secrets = &*ports.secrets;
    let mut headers = Vec::new();
    let mut server = None;
    let mut oauth = None;
    let secret_headers = match &tool.kind {
        ToolKindSpec::Http { secret_headers, .. } => secret_headers.clone(),
        ToolKindSpec::Mcp { server_id, .. } => {
            let Some(found) = ports.mcp_servers.get_mcp_server(tenant, *server_id).await? else {
                return Err(StepError::Turn(info(
                    "mcp_server_missing",
                    format!("tool {}'s MCP server {server_id} is gone", tool.name),
                )));
            };
            if let Some(o) = &found.oauth {
                let what = format!("tool {}'s MCP server's OAuth client secret", tool.name);
                oauth = Some(ClientCredentials {
                    client_id: o.client_id.clone(),
                    client_secret: secrets::reveal(secrets, tenant, &o.client_secret, &what)
                        .await?,
                    scope: o.scope.clone(),
                    issuer: o.issuer.clone(),
                });
            }
            let h = found.secret_headers.clone();
            server = Some(found);
            h
        }
        ToolKindSpec::Client | ToolKindSpec::Delegate { .. } | ToolKindSpec::Workspace { .. } => {
            Vec::new()
        }
    };
    for h in &secret_headers {
        let what = format!("tool {}'s header secret {:?}", tool.name, h.secret);
        let value = secrets::reveal(secrets, tenant, &h.secret, &what).await?;
        headers.push((h.header.clone(), value));
    }
    Ok(Planned {
        intent,
        tool,
        headers,
        server,
        oauth,
    })
}

/// What a call came to: a result the model sees next, or, for a mutation that was sent
/// and got no answer, an uncertainty a member must resolve (it may have taken effect).
pub(crate) enum Called {
    Result(ToolResult),
    Uncertain(ToolUncertain),
    /// A workspace write or command's result, with the files it changed: they land
    /// together or not at all.
    Promote(ToolResult, crate::workspace::Promotion),
}

impl Called {
    pub(crate) fn receipt(&self) -> baton_events::ReceiptId {
        match self {
            Called::Result(r) | Called::Promote(r, _) => r.receipt_id,
            Called::Uncertain(u) => u.receipt_id,
        }
    }

    pub(crate) fn into_event(self) -> RunEvent {
        match self {
            Called::Result(r) => RunEvent::ToolResult(r),
            Called::Uncertain(u) => RunEvent::ToolUncertain(u),
            // Without its files (a promotion is recorded by `calls::execute`).
            Called::Promote(r, _) => RunEvent::ToolResult(r),
        }
    }

    /// The egress rule that refused the call, if one did.
    pub(crate) fn denied(&self) -> Option<&str> {
        match self {
            Called::Result(r) => r
                .error
                .as_ref()
                .filter(|e| e.code == EGRESS_DENIED)
                .map(|e| e.message.as_str()),
            Called::Uncertain(_) | Called::Promote(..) => None,
        }
    }
}

/// The error code of a call the egress policy refused.
pub(crate) const EGRESS_DENIED: &str = "egress_denied";

/// Makes a planned `http` call through `egress` and returns what it came to; `retry`
/// when the call is safe to repeat. A tool that is not `http` (the engine never runs
/// `client` tools) gets an error result rather than a call.
/// Where a call's progress goes (the run's live subscribers).
pub(crate) type ProgressSink = Box<dyn Fn(baton_egress::mcp::Progress) + Send + Sync>;

pub(crate) async fn call(
    egress: &TenantEgress,
    p: &Planned,
    retry: bool,
    progress: ProgressSink,
) -> Called {
    let effect = match p.tool.effect {
        ToolEffect::Read => "read",
        ToolEffect::Mutation => "mutation",
    };
    let (kind, server, remote) = match (&p.tool.kind, &p.server) {
        (ToolKindSpec::Mcp { tool, .. }, Some(s)) => {
            ("mcp", Some(s.name.as_str()), Some(tool.as_str()))
        }
        _ => ("http", None, None),
    };
    let span = tracing::info_span!(
        "tool_call",
        tool = %p.tool.name,
        effect,
        kind,
        gen_ai.tool.name = %p.tool.name,
        mcp.server = server,
        mcp.tool = remote,
        otel.name = format!("tool call {}", p.tool.name),
    );
    let outcome = match (&p.tool.kind, &p.server) {
        (ToolKindSpec::Mcp { tool, .. }, Some(server)) => {
            mcp::call(egress, p, server, tool, retry, &progress)
                .instrument(span)
                .await
        }
        _ => call_http_tool(egress, p, retry).instrument(span).await,
    };
    let label = match (&outcome.end, outcome.outcome) {
        (End::NoAnswer(_), _) => "uncertain",
        (_, ToolOutcome::Ok) => "ok",
        (_, ToolOutcome::Error) => "error",
        (_, ToolOutcome::Cancelled) => "cancelled",
    };
    if let Some(e) = &outcome.error {
        metrics::counter!(
            "baton_tool_call_errors_total",
            "kind" => kind,
            "effect" => effect,
            "code" => e.code.clone(),
        )
        .increment(1);
    }
    metrics::histogram!(
        "baton_tool_call_duration_seconds",
        "kind" => kind,
        "effect" => effect,
        "outcome" => label,
    )
    .record(Duration::from_millis(outcome.duration_ms));
    match &outcome.end {
        // Sent and unanswered, and not safe to repeat: it may have taken effect.
        End::NoAnswer(why) if !retry => Called::Uncertain(ToolUncertain {
            receipt_id: p.intent.receipt_id,
            reason: format!("the call was sent but {why}; it may or may not have taken effect"),
        }),
        _ => Called::Result(result_of(&p.intent, outcome)),
    }
}

async fn call_http_tool(egress: &TenantEgress, p: &Planned, retry: bool) -> CallOutcome {
    let ToolKindSpec::Http { url, .. } = &p.tool.kind else {
        return CallOutcome::error("tool_not_http", "the tool is not an http tool");
    };
    let Ok(url) = url::Url::parse(url) else {
        return CallOutcome::error("tool_unreachable", "the tool's URL does not parse");
    };
    let call = HttpCall {
        url,
        arguments: &p.intent.arguments,
        idempotency_key: &p.intent.idempotency_key,
        mask: Mask::new(p.headers.iter().map(|(_, value)| value.clone())),
        headers: p.headers.clone(),
        timeout: Duration::from_millis(p.tool.timeout_ms),
        retry,
    };
    call_http(egress, call).await
}

fn result_of(intent: &ToolIntent, o: CallOutcome) -> ToolResult {
    ToolResult {
        receipt_id: intent.receipt_id,
        call_id: intent.call_id.clone(),
        tool: intent.tool.clone(),
        outcome: o.outcome,
        output: o.output,
        error: o.error,
        duration_ms: o.duration_ms,
        truncated: o.truncated,
        from_client: false,
        attempts: Some(o.sent),
        delegated_run: None,
    }
}

/// One call to make.
struct HttpCall<'a> {
    url: url::Url,
    arguments: &'a serde_json::Value,
    idempotency_key: &'a str,
    headers: Vec<(String, String)>,
    /// The secret header values, masked in whatever comes back.
    mask: Mask,
    timeout: Duration,
    retry: bool,
}

/// How the last attempt ended, for what a failure may become.
#[derive(Debug, Clone, PartialEq, Eq)]
enum End {
    /// An answer came, or nothing was sent.
    Settled,
    /// The request may have reached the tool, and no answer came (why, in words).
    NoAnswer(String),
}

/// How a call ended, ready to become `tool.result`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct CallOutcome {
    outcome: ToolOutcome,
    output: String,
    error: Option<ErrorInfo>,
    duration_ms: u64,
    truncated: bool,
    /// Requests sent (that may have reached the tool).
    sent: u32,
    end: End,
}

impl CallOutcome {
    /// The tool's answer (`truncated`: cut to the output cap).
    fn answered(output: String, truncated: bool) -> Self {
        Self {
            outcome: ToolOutcome::Ok,
            output,
            error: None,
            duration_ms: 0,
            truncated,
            sent: 1,
            end: End::Settled,
        }
    }

    fn error(code: &str, message: impl Into<String>) -> Self {
        let message = message.into();
        Self {
            outcome: ToolOutcome::Error,
            output: message.clone(),
            error: Some(ErrorInfo {
                code: code.into(),
                message,
            }),
            duration_ms: 0,
            truncated: false,
            sent: 0,
            end: End::Settled,
        }
    }
}

/// POSTs the arguments as JSON. The (size-capped, secrets masked) body of a 2xx answer is
/// the output; anything else is an error result the model sees. A call safe to repeat
/// (`retry`) is tried again on timeouts, transport errors and 5xx while the tool's budget
/// lasts; one that is not is never sent twice.
async fn call_http(egress: &TenantEgress, call: HttpCall<'_>) -> CallOutcome {
    let started = Instant::now();
    let deadline = started + call.timeout;
    let mut attempt = 0;
    let mut sent = 0;
    let mut outcome = loop {
        attempt += 1;
        let left = deadline.saturating_duration_since(Instant::now());
        let (outcome, retryable) = attempt_once(egress, &call, left).await;
        sent += outcome.sent;
        let wait = RETRY_AFTER * attempt;
        if !(retryable && call.retry && attempt <= MAX_RETRIES) || Instant::now() + wait >= deadline
        {
            break outcome;
        }
        tracing::debug!(attempt, "tool call failed; retrying");
        tokio::time::sleep(wait).await;
    };
    outcome.sent = sent;
    outcome.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    outcome
}

/// One HTTP attempt and whether a failure may be retried.
async fn attempt_once(
    egress: &TenantEgress,
    call: &HttpCall<'_>,
    left: Duration,
) -> (CallOutcome, bool) {
    if left.is_zero() {
        return (timed_out(call.timeout), false);
    }
    let mut req = match egress.request(reqwest::Method::POST, &call.url) {
        Ok(req) => req,
        Err(denied) => return (CallOutcome::error(EGRESS_DENIED, denied.to_string()), false),
    };
    req = req
        .timeout(left)
        .header("Idempotency-Key", call.idempotency_key)
        .json(call.arguments);
    for (name, value) in &call.headers {
        req = req.header(name.as_str(), value.as_str());
    }
    let resp = match req.send().await {
        Ok(resp) => resp,
        Err(e) => return (unanswered(&e, call.timeout), true),
    };
    let status = resp.status();
    let (body, truncated) = match read_capped(resp, &call.mask).await {
        Ok(b) => b,
        Err(e) => {
            let mut outcome = unanswered(&e, call.timeout);
            // The answer began: the request was sent.
            outcome.sent = 1;
            if outcome.end == End::Settled {
                outcome.end = End::NoAnswer(baton_egress::describe(&e).into());
            }
            return (outcome, true);
        }
    };
    let mut outcome = if status.is_success() {
        CallOutcome::answered(body, truncated)
    } else if status.is_client_error() {
        // What the tool says was wrong with the call helps the model fix it.
        CallOutcome::error(
            "tool_http_status",
            format!("the tool answered HTTP {}: {body}", status.as_u16()),
        )
    } else {
        // A server's failure page is not the model's (nor the tenant's) to read.
        CallOutcome::error(
            "tool_http_status",
            format!("the tool answered HTTP {}", status.as_u16()),
        )
    };
    outcome.sent = 1;
    outcome.truncated = truncated;
    (outcome, status.is_server_error())
}

/// A request that got no answer: a timeout, a refused or broken connection. Says what
/// kind of failure it was, never the operating system's words or an address.
fn unanswered(e: &reqwest::Error, timeout: Duration) -> CallOutcome {
    if let Some(denied) = Egress::denied(e) {
        return CallOutcome::error(EGRESS_DENIED, denied.to_string());
    }
    let mut outcome = if e.is_timeout() && !e.is_connect() {
        timed_out(timeout)
    } else {
        CallOutcome::error(
            "tool_unreachable",
            format!(
                "the tool endpoint could not be reached: {}",
                baton_egress::describe(e)
            ),
        )
    };
    if baton_egress::maybe_sent(e) {
        outcome.sent = 1;
        outcome.end = End::NoAnswer(if e.is_timeout() {
            format!("no answer came within {} ms", timeout.as_millis())
        } else {
            "the connection broke before an answer came".to_string()
        });
    }
    outcome
}

fn timed_out(timeout: Duration) -> CallOutcome {
    CallOutcome::error(
        "tool_timeout",
        format!("the tool did not answer within {} ms", timeout.as_millis()),
    )
}

/// The body as text, its secrets masked and then cut at [`MAX_OUTPUT_BYTES`] (on a
/// character boundary) with a marker naming how much was left out. Reads as far past the
/// cap as the longest secret, so a secret across the cut is masked whole.
async fn read_capped(
    mut resp: reqwest::Response,
    mask: &Mask,
) -> Result<(String, bool), reqwest::Error> {
    let keep = MAX_OUTPUT_BYTES + mask.longest();
    let mut bytes = Vec::new();
    let mut total: u64 = 0;
    while let Some(chunk) = resp.chunk().await? {
        total += chunk.len() as u64;
        let room = keep.saturating_sub(bytes.len());
        bytes.extend_from_slice(&chunk[..room.min(chunk.len())]);
    }
    let text = String::from_utf8_lossy(&bytes);
    let (mut text, cut) = mask.apply_and_cut(&text, MAX_OUTPUT_BYTES);
    if !cut && total <= keep as u64 {
        return Ok((text, false));
    }
    // A cut may split a character: lossy decoding turns its tail into U+FFFD; drop it.
    while text.ends_with('\u{FFFD}') {
        text.pop();
    }
    let left = total.saturating_sub(MAX_OUTPUT_BYTES as u64);
    text.push_str(&format!("\n[output truncated: {left} more bytes]"));
    Ok((text, true))
}
