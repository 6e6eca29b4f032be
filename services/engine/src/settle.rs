//! Ending a turn early — a cancel, a failure — and what each call of the latest model
//! step that has no output records then, so that no receipt is left pending: a
//! mutation in flight may have taken effect and becomes `uncertain`; anything else with
//! a receipt is `cancelled`; a result this driver holds but could not write yet is
//! written as it is.

use crate::outcome::{Next, StepError};
use crate::state::{CallState, RunState};
use crate::stream::RunStream;
use baton_core::model::RunSummary;
use baton_core::ports::Release;
use baton_events::{
    ErrorInfo, ReceiptId, RunCancelled, RunEvent, ToolEffect, ToolOutcome, ToolResult,
    ToolUncertain, TurnFailed,
};
use std::collections::HashMap;

/// Ends the run as cancelled, settling its open calls.
pub(crate) async fn cancel(stream: &mut RunStream, run: &RunSummary) -> Result<Next, StepError> {
    stream.refresh(run).await?;
    let mut events = settle(&stream.state, &stream.unsaved, "the run was cancelled");
    events.push(RunEvent::RunCancelled(RunCancelled { reason: None }));
    stream.append(run, events, Some(Release::Idle)).await
}

/// Ends the turn as failed with `error`, settling its open calls.
pub(crate) async fn fail_turn(
    stream: &mut RunStream,
    run: &RunSummary,
    error: ErrorInfo,
) -> Result<Next, StepError> {
    tracing::warn!(code = %error.code, "the turn failed");
    stream.refresh(run).await?;
    let why = format!("the turn failed ({})", error.code);
    let mut events = settle(&stream.state, &stream.unsaved, &why);
    events.push(RunEvent::TurnFailed(TurnFailed {
        turn: run.turn_count,
        error,
    }));
    stream.append(run, events, Some(Release::Idle)).await
}

/// What ending the turn now records for each call of the latest step that has no
/// output: the result this driver holds but could not write yet (`unsaved`);
/// `uncertain` for a mutation in flight (it may have taken effect, idempotent or not);
/// `cancelled` for anything else that has a receipt. `why` says what ended the turn.
pub(crate) fn settle(
    state: &RunState,
    unsaved: &HashMap<ReceiptId, ToolResult>,
    why: &str,
) -> Vec<RunEvent> {
    let mut events = Vec::new();
    for call in &state.calls {
        let Some(receipt) = call.receipt else {
            continue;
        };
        if let Some(result) = unsaved.get(&receipt) {
            events.push(RunEvent::ToolResult(result.clone()));
            continue;
        }
        match &call.state {
            CallState::Running(i) if i.effect == ToolEffect::Mutation => {
                events.push(RunEvent::ToolUncertain(ToolUncertain {
                    receipt_id: receipt,
                    reason: format!("{why} while the call was in flight"),
                }));
            }
            CallState::Done | CallState::Uncertain(_) => {}
            _ => events.push(RunEvent::ToolResult(ToolResult {
                receipt_id: receipt,
                call_id: call.request.id.clone(),
                tool: call.request.name.clone(),
                outcome: ToolOutcome::Cancelled,
                output: format!("The call did not finish: {why}."),
                error: None,
                duration_ms: 0,
                truncated: false,
                from_client: false,
            })),
        }
    }
    events
}
