//! Calling an `http` tool, the one place it is done: its secret headers revealed
//! before anything is recorded ([`plan`]), then a POST of the arguments with the
//! receipt id as `Idempotency-Key` within the tool's timeout, retried while safe to
//! repeat, and its (size-capped) answer captured as the call's result ([`call`]).

use crate::outcome::StepError;
use crate::secrets;
use baton_core::TenantId;
use baton_core::model::{Tool, ToolKindSpec};
use baton_core::ports::SecretReader;
use baton_events::{ErrorInfo, ToolEffect, ToolIntent, ToolOutcome, ToolResult};
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
}

/// The call of `tool` that `intent` records, its secret headers revealed. A secret that
/// is missing or cannot be read fails the turn before anything is recorded.
pub(crate) async fn plan(
    secrets: &dyn SecretReader,
    tenant: TenantId,
    intent: ToolIntent,
    tool: Tool,
) -> Result<Planned, StepError> {
    let mut headers = Vec::new();
    if let ToolKindSpec::Http { secret_headers, .. } = &tool.kind {
        for h in secret_headers {
            let what = format!("tool {}'s header secret {:?}", tool.name, h.secret);
            let value = secrets::reveal(secrets, tenant, &h.secret, &what).await?;
            headers.push((h.header.clone(), value));
        }
    }
    Ok(Planned {
        intent,
        tool,
        headers,
    })
}

/// Makes a planned `http` call and returns its result. A tool that is not `http` (the
/// engine never runs `client` tools) gets an error result rather than a call.
pub(crate) async fn call(http: &reqwest::Client, p: &Planned, retry: bool) -> ToolResult {
    let effect = match p.tool.effect {
        ToolEffect::Read => "read",
        ToolEffect::Mutation => "mutation",
    };
    let span = tracing::info_span!(
        "tool_call",
        tool = %p.tool.name,
        effect,
        otel.name = format!("tool call {}", p.tool.name),
    );
    let outcome = call_http_tool(http, p, retry).instrument(span).await;
    let label = match outcome.outcome {
        ToolOutcome::Ok => "ok",
        ToolOutcome::Error => "error",
        ToolOutcome::Cancelled => "cancelled",
    };
    if let Some(e) = &outcome.error {
        metrics::counter!(
            "baton_tool_call_errors_total",
            "effect" => effect,
            "code" => e.code.clone(),
        )
        .increment(1);
    }
    metrics::histogram!(
        "baton_tool_call_duration_seconds",
        "effect" => effect,
        "outcome" => label,
    )
    .record(Duration::from_millis(outcome.duration_ms));
    result_of(&p.intent, outcome)
}

async fn call_http_tool(http: &reqwest::Client, p: &Planned, retry: bool) -> CallOutcome {
    let ToolKindSpec::Http { url, .. } = &p.tool.kind else {
        return CallOutcome::error("tool_not_http", "the tool is not an http tool");
    };
    let call = HttpCall {
        url,
        arguments: &p.intent.arguments,
        idempotency_key: &p.intent.idempotency_key,
        headers: p.headers.clone(),
        timeout: Duration::from_millis(p.tool.timeout_ms),
        retry,
    };
    call_http(http, call).await
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
    }
}

/// One call to make.
struct HttpCall<'a> {
    pub url: &'a str,
    pub arguments: &'a serde_json::Value,
    pub idempotency_key: &'a str,
    pub headers: Vec<(String, String)>,
    pub timeout: Duration,
    pub retry: bool,
}

/// How a call ended, ready to become `tool.result`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct CallOutcome {
    pub outcome: ToolOutcome,
    pub output: String,
    pub error: Option<ErrorInfo>,
    pub duration_ms: u64,
    pub truncated: bool,
}

impl CallOutcome {
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
        }
    }
}

/// POSTs the arguments as JSON. The (size-capped) body of a 2xx answer is the output;
/// anything else is an error result the model sees. A call safe to repeat (`retry`) is
/// tried again on timeouts, transport errors and 5xx while the tool's budget lasts.
async fn call_http(client: &reqwest::Client, call: HttpCall<'_>) -> CallOutcome {
    let started = Instant::now();
    let deadline = started + call.timeout;
    let mut attempt = 0;
    let mut outcome = loop {
        attempt += 1;
        let left = deadline.saturating_duration_since(Instant::now());
        let (outcome, retryable) = attempt_once(client, &call, left).await;
        let wait = RETRY_AFTER * attempt;
        if !(retryable && call.retry && attempt <= MAX_RETRIES) || Instant::now() + wait >= deadline
        {
            break outcome;
        }
        tracing::debug!(attempt, "tool call failed; retrying");
        tokio::time::sleep(wait).await;
    };
    outcome.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    outcome
}

/// One HTTP attempt and whether a failure may be retried.
async fn attempt_once(
    client: &reqwest::Client,
    call: &HttpCall<'_>,
    left: Duration,
) -> (CallOutcome, bool) {
    if left.is_zero() {
        return (timed_out(call.timeout), false);
    }
    let mut req = client
        .post(call.url)
        .timeout(left)
        .header("Idempotency-Key", call.idempotency_key)
        .json(call.arguments);
    for (name, value) in &call.headers {
        req = req.header(name.as_str(), value.as_str());
    }
    let resp = match req.send().await {
        Ok(resp) => resp,
        Err(e) if e.is_timeout() => return (timed_out(call.timeout), true),
        Err(e) => {
            // The URL is the tenant's own; the error text carries no secret header.
            let msg = format!("the tool endpoint could not be reached: {}", root_cause(&e));
            return (CallOutcome::error("tool_unreachable", msg), true);
        }
    };
    let status = resp.status();
    let (body, truncated) = match read_capped(resp).await {
        Ok(b) => b,
        Err(e) if e.is_timeout() => return (timed_out(call.timeout), true),
        Err(e) => {
            let msg = format!("the tool's answer broke off: {}", root_cause(&e));
            return (CallOutcome::error("tool_unreachable", msg), true);
        }
    };
    if status.is_success() {
        let outcome = CallOutcome {
            outcome: ToolOutcome::Ok,
            output: body,
            error: None,
            duration_ms: 0,
            truncated,
        };
        return (outcome, false);
    }
    let mut outcome = CallOutcome::error(
        "tool_http_status",
        format!("the tool answered HTTP {}: {body}", status.as_u16()),
    );
    outcome.truncated = truncated;
    (outcome, status.is_server_error())
}

fn timed_out(timeout: Duration) -> CallOutcome {
    CallOutcome::error(
        "tool_timeout",
        format!("the tool did not answer within {} ms", timeout.as_millis()),
    )
}

/// The body as text, cut at [`MAX_OUTPUT_BYTES`] (on a character boundary) with a
/// marker naming how much was left out.
async fn read_capped(mut resp: reqwest::Response) -> Result<(String, bool), reqwest::Error> {
    let mut bytes = Vec::new();
    let mut dropped: u64 = 0;
    while let Some(chunk) = resp.chunk().await? {
        let room = MAX_OUTPUT_BYTES.saturating_sub(bytes.len());
        let take = room.min(chunk.len());
        bytes.extend_from_slice(&chunk[..take]);
        dropped += (chunk.len() - take) as u64;
    }
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    if dropped == 0 {
        return Ok((text, false));
    }
    // A cut may split a character: lossy decoding turns its tail into U+FFFD; drop it.
    while text.ends_with('\u{FFFD}') {
        text.pop();
    }
    text.push_str(&format!("\n[output truncated: {dropped} more bytes]"));
    Ok((text, true))
}

fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}
