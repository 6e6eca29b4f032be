//! Calling a `delegate` tool: the child run of another agent is started (or found again,
//! after a crash: the receipt id is its `request_id`) and waited for within the tool's
//! timeout; its reply, in full up to [`MAX_ANSWER_BYTES`], is the call's output, and the
//! result names the child (`delegated_run`). The child's first message is the call's `message` argument
//! (the arguments as JSON when there is none).

use crate::shared::Shared;
use crate::tools::{Called, Planned};
use baton_core::CoreError;
use baton_core::model::ToolKindSpec;
use baton_core::ports::Delegation;
use baton_events::{ErrorInfo, RunId, TenantId, ToolOutcome, ToolResult};
use std::time::{Duration, Instant};

/// An answer beyond this many bytes is cut, with a note saying so.
pub const MAX_ANSWER_BYTES: usize = 1024 * 1024;
/// A pause before waiting again for an answer after the store or bus was away.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// Runs the delegation `p` of run `parent` (at `depth`, the parent's) and returns its
/// result.
pub(crate) async fn call(
    shared: &Shared,
    tenant: TenantId,
    parent: RunId,
    depth: u32,
    p: &Planned,
) -> Called {
    let started = Instant::now();
    let (child, outcome, output, error, truncated) =
        match delegate(shared, tenant, parent, depth, p).await {
            Ok((run, answer)) => {
                let (text, cut) = cap(answer);
                (Some(run), ToolOutcome::Ok, text, None, cut)
            }
            Err((code, message, run)) => {
                let error = ErrorInfo {
                    code: code.into(),
                    message: message.clone(),
                };
                (run, ToolOutcome::Error, message, Some(error), false)
            }
        };
    metrics::counter!("baton_delegations_total", "outcome" => match outcome {
        ToolOutcome::Ok => "ok",
        _ => "error",
    })
    .increment(1);
    Called::Result(ToolResult {
        receipt_id: p.intent.receipt_id,
        call_id: p.intent.call_id.clone(),
        tool: p.intent.tool.clone(),
        outcome,
        output,
        error,
        duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        truncated,
        from_client: false,
        attempts: Some(1),
        delegated_run: child,
    })
}

/// What went wrong: a code and a message for the model, and the child if one started.
type Failure = (&'static str, String, Option<RunId>);

/// The child's id and reply, or what went wrong.
async fn delegate(
    shared: &Shared,
    tenant: TenantId,
    parent: RunId,
    depth: u32,
    p: &Planned,
) -> Result<(RunId, String), Failure> {
    let ToolKindSpec::Delegate { agent_id } = p.tool.kind else {
        let why = "the tool is not a delegate tool".to_string();
        return Err(("tool_not_delegate", why, None));
    };
    let Some(delegator) = shared.ports.delegator.get() else {
        let why = "this replica cannot start delegated runs".to_string();
        return Err(("delegation_unavailable", why, None));
    };
    let message = match p.intent.arguments.get("message") {
        Some(serde_json::Value::String(m)) => m.clone(),
        _ => p.intent.arguments.to_string(),
    };
    let d = Delegation {
        tenant,
        parent,
        receipt: p.intent.receipt_id,
        agent: agent_id,
        message,
        depth: depth + 1,
    };
    let child = match delegator.start(&d).await {
        Ok(child) => child,
        Err(e) => return Err(("delegation_refused", e.to_string(), None)),
    };
    let run = child.run;
    let timeout = Duration::from_millis(p.tool.timeout_ms);
    let answer = async {
        loop {
            match delegator.answer(&child).await {
                // The store or the bus is briefly away: wait on, within the timeout.
                Err(CoreError::Unavailable(why)) => {
                    tracing::debug!(child = %run, %why, "waiting for a delegated run's answer again");
                    tokio::time::sleep(RETRY_AFTER).await;
                }
                other => return other,
            }
        }
    };
    match tokio::time::timeout(timeout, answer).await {
        Err(_) => Err((
            "timeout",
            format!(
                "the delegated run {run} did not answer within {} ms; it goes on",
                p.tool.timeout_ms
            ),
            Some(run),
        )),
        Ok(Err(e)) => Err(("delegated_run_failed", e.to_string(), Some(run))),
        Ok(Ok(Ok(text))) => Ok((run, text)),
        Ok(Ok(Err(why))) => Err(("delegated_run_failed", why, Some(run))),
    }
}

/// `text` cut to [`MAX_ANSWER_BYTES`] at a character boundary, with a note when cut.
fn cap(text: String) -> (String, bool) {
    let whole = text.len();
    let (mut kept, cut) = baton_egress::cut(text, MAX_ANSWER_BYTES);
    if cut {
        let shown = kept.len();
        kept.push_str(&format!(
            "\n[cut: the answer is {whole} bytes; the first {shown} are shown]"
        ));
    }
    (kept, cut)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_within_the_cap_is_whole_and_a_longer_one_is_cut_with_a_note() {
        let (short, cut) = cap("é".repeat(10));
        assert_eq!((short.as_str(), cut), ("éééééééééé", false));
        let long = "é".repeat(MAX_ANSWER_BYTES); // two bytes each
        let (text, cut) = cap(long);
        assert!(cut);
        assert!(
            text.starts_with(&"é".repeat(MAX_ANSWER_BYTES / 2)),
            "whole characters"
        );
        assert!(text.ends_with(&format!(
            "[cut: the answer is {} bytes; the first {MAX_ANSWER_BYTES} are shown]",
            2 * MAX_ANSWER_BYTES
        )));
    }
}
