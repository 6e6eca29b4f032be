//! Calling an `mcp` tool: a connection to its server through the egress client (the
//! server's URL as it is now, its secret headers), one `tools/call` with the receipt id as
//! the idempotency key (in `_meta` and as `Idempotency-Key`), and the result turned into
//! the call's output: text and structured content, resources shown as text or named,
//! secrets masked, cut at [`MAX_OUTPUT_BYTES`] with a note.
//!
//! Only `tools/call` can have an effect: a failure while connecting (the probe, the
//! handshake) settles the call as an error that may be retried. A call sent without an
//! answer is [`End::NoAnswer`]: a read or idempotent call is made again while its time
//! lasts, a mutation is held `uncertain` by the caller.

use super::{
    CallOutcome, EGRESS_DENIED, End, MAX_OUTPUT_BYTES, MAX_RETRIES, Planned, ProgressSink,
    RETRY_AFTER,
};
use baton_core::model::McpServer;
use baton_egress::mcp::{McpConnection, McpEndpoint, McpFailure, Progress};
use baton_egress::{Mask, TenantEgress};
use serde_json::Value;
use std::time::Duration;
use tokio::time::Instant;

/// Calls `remote` (the tool's name on `server`) for planned call `p`; `retry`: it is
/// safe to repeat.
pub(super) async fn call(
    egress: &TenantEgress,
    p: &Planned,
    server: &McpServer,
    remote: &str,
    retry: bool,
    progress: &ProgressSink,
) -> CallOutcome {
    let started = Instant::now();
    let timeout = Duration::from_millis(p.tool.timeout_ms);
    let deadline = started + timeout;
    let Ok(url) = url::Url::parse(&server.url) else {
        return CallOutcome::error("tool_unreachable", "the MCP server's URL does not parse");
    };
    let endpoint = McpEndpoint {
        url,
        headers: p.headers.clone(),
        oauth: p.oauth.clone(),
    };
    let call = Attempt {
        egress,
        endpoint,
        p,
        remote,
        deadline,
        timeout,
        sink: progress,
    };
    let mut attempt = 0;
    let mut sent = 0;
    let mut outcome = loop {
        attempt += 1;
        let (outcome, retryable) = call.once().await;
        sent += outcome.sent;
        let wait = RETRY_AFTER * attempt;
        if !(retryable && retry && attempt <= MAX_RETRIES) || Instant::now() + wait >= deadline {
            break outcome;
        }
        tracing::debug!(attempt, "MCP tool call failed; retrying");
        tokio::time::sleep(wait).await;
    };
    outcome.sent = sent;
    outcome.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    outcome
}

/// What each attempt of one call needs.
struct Attempt<'a> {
    egress: &'a TenantEgress,
    endpoint: McpEndpoint,
    p: &'a Planned,
    /// The tool's name on the server.
    remote: &'a str,
    deadline: Instant,
    timeout: Duration,
    sink: &'a ProgressSink,
}

impl Attempt<'_> {
    /// One connection and call, and whether a failure may be retried.
    async fn once(&self) -> (CallOutcome, bool) {
        let (deadline, timeout) = (self.deadline, self.timeout);
        let mut conn = match McpConnection::open(self.egress, self.endpoint.clone(), deadline).await
        {
            Ok(conn) => conn,
            // Nothing reached the tool.
            Err(f) => {
                let retryable = !matches!(
                    f,
                    McpFailure::Denied(_) | McpFailure::Protocol(_) | McpFailure::Auth(_)
                );
                return (failed(f, deadline, timeout, false), retryable);
            }
        };
        let sink = self.sink;
        let mut progress = |p: Progress| {
            tracing::debug!(progress = p.progress, total = p.total, "MCP tool progress");
            metrics::counter!("baton_mcp_progress_notifications_total").increment(1);
            sink(p);
        };
        let called = conn
            .call_tool(
                self.remote,
                &self.p.intent.arguments,
                &self.p.intent.idempotency_key,
                deadline,
                &mut progress,
            )
            .await;
        match called {
            Ok(result) => (output(&result, conn.mask()), false),
            Err(f) => {
                let retryable = matches!(f, McpFailure::NoAnswer(_) | McpFailure::Unreachable(_))
                    || matches!(f, McpFailure::Status(s) if s >= 500);
                (failed(f, deadline, timeout, true), retryable)
            }
        }
    }
}

/// A failure (masked by the connection) as the call's outcome; `calling`: it happened on
/// `tools/call` (not while connecting), so a request may have reached the tool.
fn failed(f: McpFailure, deadline: Instant, timeout: Duration, calling: bool) -> CallOutcome {
    let timed_out = Instant::now() >= deadline;
    let mut outcome = match &f {
        McpFailure::Denied(rule) => CallOutcome::error(EGRESS_DENIED, rule.clone()),
        _ if timed_out => super::timed_out(timeout),
        McpFailure::Unreachable(_) | McpFailure::NoAnswer(_) => {
            CallOutcome::error("tool_unreachable", f.to_string())
        }
        McpFailure::Status(_) => CallOutcome::error("tool_http_status", f.to_string()),
        McpFailure::Rpc { .. } | McpFailure::Protocol(_) | McpFailure::Auth(_) => {
            CallOutcome::error("tool_mcp_error", f.to_string())
        }
    };
    if calling && !matches!(f, McpFailure::Denied(_) | McpFailure::Unreachable(_)) {
        outcome.sent = 1;
    }
    if calling && f.may_have_run() {
        outcome.end = End::NoAnswer(match timed_out {
            true => format!("no answer came within {} ms", timeout.as_millis()),
            false => f.to_string(),
        });
    }
    outcome
}

/// A `tools/call` result as the call's outcome: its content as text (the structured
/// content as JSON when there is no text), masked and cut; `isError` makes it an error
/// result the model sees.
fn output(result: &Value, mask: &Mask) -> CallOutcome {
    let text = render(result);
    let (mut text, cut) = mask.apply_and_cut(&text, MAX_OUTPUT_BYTES);
    if cut {
        text.push_str(&format!(
            "\n[output truncated: the result was longer than {MAX_OUTPUT_BYTES} bytes]"
        ));
    }
    let is_error = result.get("isError").and_then(Value::as_bool) == Some(true);
    if !is_error {
        return CallOutcome::answered(text, cut);
    }
    let mut outcome = CallOutcome::error("tool_error", text);
    outcome.sent = 1;
    outcome.truncated = cut;
    outcome
}

/// The content of a result as text, one block after another.
fn render(result: &Value) -> String {
    let blocks = result
        .get("content")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut parts: Vec<String> = Vec::new();
    let has_text = blocks
        .iter()
        .any(|b| b.get("type").and_then(Value::as_str) == Some("text"));
    if !has_text && let Some(structured) = result.get("structuredContent") {
        parts.push(structured.to_string());
    }
    for b in blocks {
        let str_of = |key: &str| b.get(key).and_then(Value::as_str).unwrap_or_default();
        match str_of("type") {
            "text" => parts.push(str_of("text").to_string()),
            "image" | "audio" => parts.push(format!(
                "[{}: {}, {} bytes of base64 not shown]",
                str_of("type"),
                str_of("mimeType"),
                str_of("data").len()
            )),
            "resource_link" => parts.push(format!(
                "[resource link: {} {}]",
                str_of("uri"),
                str_of("name")
            )),
            "resource" => {
                let r = b.get("resource").cloned().unwrap_or_default();
                let uri = r.get("uri").and_then(Value::as_str).unwrap_or_default();
                match (
                    r.get("text").and_then(Value::as_str),
                    r.get("blob").and_then(Value::as_str),
                ) {
                    (Some(text), _) => parts.push(format!("[resource {uri}]\n{text}")),
                    (None, Some(blob)) => parts.push(format!(
                        "[resource {uri}: {}, {} bytes of base64 not shown]",
                        r.get("mimeType")
                            .and_then(Value::as_str)
                            .unwrap_or("binary"),
                        blob.len()
                    )),
                    (None, None) => parts.push(format!("[resource {uri}]")),
                }
            }
            other => parts.push(format!(
                "[{} content not shown]",
                other.chars().take(32).collect::<String>()
            )),
        }
    }
    parts.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_events::ToolOutcome;
    use serde_json::json;

    #[test]
    fn text_comes_first_and_structured_content_stands_in_for_none() {
        let r = json!({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                       "structuredContent": {"n": 1}});
        assert_eq!(render(&r), "a\nb");
        let r = json!({"content": [], "structuredContent": {"n": 1}});
        assert_eq!(render(&r), "{\"n\":1}");
    }

    #[test]
    fn binary_content_is_named_not_shown() {
        let r = json!({"content": [
            {"type": "image", "mimeType": "image/png", "data": "AAAA"},
            {"type": "resource", "resource": {"uri": "file:///a", "text": "hello"}},
            {"type": "resource", "resource": {"uri": "file:///b", "blob": "AAAAAAAA", "mimeType": "application/pdf"}},
            {"type": "resource_link", "uri": "file:///c", "name": "c"},
        ]});
        assert_eq!(
            render(&r),
            "[image: image/png, 4 bytes of base64 not shown]\n[resource file:///a]\nhello\n\
             [resource file:///b: application/pdf, 8 bytes of base64 not shown]\n\
             [resource link: file:///c c]"
        );
    }

    #[test]
    fn an_error_result_is_an_error_and_output_is_masked_and_cut() {
        let mask = Mask::new(["s3cret".to_string()]);
        let r = json!({"content": [{"type": "text", "text": "bad s3cret"}], "isError": true});
        let o = output(&r, &mask);
        assert_eq!(o.outcome, ToolOutcome::Error);
        assert_eq!(o.output, "bad ***");
        let long = "x".repeat(MAX_OUTPUT_BYTES + 10);
        let o = output(&json!({"content": [{"type": "text", "text": long}]}), &mask);
        assert!(
            o.truncated && o.output.ends_with("bytes]"),
            "{}",
            &o.output[o.output.len() - 80..]
        );
    }
}
