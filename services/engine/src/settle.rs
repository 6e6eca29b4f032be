//! Ending a turn early — a cancel, a failure: what each call of the latest model step
//! that has no output records, so that no receipt is left pending. A mutation in
//! flight may have taken effect and becomes `uncertain`; anything else with a receipt
//! is `cancelled`; a result this driver holds but could not write yet is written as
//! it is. No I/O.

use crate::state::{CallState, RunState};
use baton_events::{ReceiptId, RunEvent, ToolEffect, ToolOutcome, ToolResult, ToolUncertain};
use std::collections::HashMap;

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
