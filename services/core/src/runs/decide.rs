//! What each run command appends, decided from the run (and its receipts) as read: pure
//! functions, no I/O. The use cases in [`super`] read, call one of these, and append the
//! events against the version they read; `tests.rs` drives them given/when/then.

use super::requests::{ApprovalDecision, ReceiptResolution, ToolOutput};
use crate::error::CoreError;
use crate::model::{MessageStrategy, Receipt, ReceiptState, RunStatus, RunSummary};
use baton_events::{
    ApprovalDecided, ApprovalId, MessageAppended, MessageId, MessageQueued, MessageRole, ReceiptId,
    Resolution, RunCancelRequested, RunCancelled, RunEvent, ToolOutcome, ToolResolved, ToolResult,
    TurnRequested,
};

#[cfg(test)]
mod tests;

/// The two events of a user message that asks for turn `turn`.
pub fn user_turn(message_id: MessageId, content: &str, turn: i64) -> Vec<RunEvent> {
    vec![
        RunEvent::MessageAppended(MessageAppended {
            message_id,
            role: MessageRole::User,
            content: content.to_string(),
            queued: false,
        }),
        RunEvent::TurnRequested(TurnRequested { turn, message_id }),
    ]
}

/// What a posted user message appends.
#[derive(Debug, Clone, PartialEq)]
pub enum Posting {
    /// The run was idle: the message starts turn `turn` at once.
    Turn { events: Vec<RunEvent>, turn: i64 },
    /// A turn is in progress: the message waits in the queue at 1-based `position`.
    Queued {
        events: Vec<RunEvent>,
        position: i64,
    },
}

/// A user message posted to `run`, which must not have ended. An idle run starts a turn
/// with it; a run within a turn (queued, running, or waiting for an action) refuses it
/// (`reject`), queues it behind the turn (`enqueue`), or queues it at the head and asks
/// the engine to end the turn early (`interrupt`, `rollback`), with at most `max_queued`
/// waiting: the message's own strategy or its agent's. The engine takes queued messages
/// in the append that settles a turn, so an idle run has none.
pub fn post_message(
    run: &RunSummary,
    message_id: MessageId,
    content: &str,
    strategy: MessageStrategy,
    max_queued: u32,
) -> Result<Posting, CoreError> {
    if run.status.is_terminal() {
        return Err(CoreError::RunEnded(run.status.as_str()));
    }
    if !run.status.in_turn() {
        let turn = run.turn_count + 1;
        return Ok(Posting::Turn {
            events: user_turn(message_id, content, turn),
            turn,
        });
    }
    if strategy == MessageStrategy::Reject {
        return Err(CoreError::RunBusy);
    }
    // The cancel ends the turn and the run with it: a queued message would be dropped.
    if run.cancel_requested {
        return Err(CoreError::WrongState(
            "the run is being cancelled; it takes no more messages".into(),
        ));
    }
    if run.queued_messages >= i64::from(max_queued) {
        return Err(CoreError::QueueFull(max_queued));
    }
    let interrupts = strategy.interrupts();
    // An interrupting message goes to the head of the queue: the next turn is its own.
    let position = match interrupts {
        Some(_) => 1,
        None => run.queued_messages + 1,
    };
    Ok(Posting::Queued {
        events: vec![RunEvent::MessageQueued(MessageQueued {
            message_id,
            content: content.to_string(),
            interrupts,
        })],
        position,
    })
}

/// What a cancel does to a run.
#[derive(Debug, Clone, PartialEq)]
pub enum Cancel {
    /// Cancelled already, or a cancel is pending within a turn: nothing to append.
    Unchanged,
    /// Append `events`; with `wake`, the run is within a turn and its driver settles it
    /// at its next step boundary.
    Append { events: Vec<RunEvent>, wake: bool },
}

/// A cancel of `run`: an idle run is cancelled at once, a run within a turn gets
/// `run.cancel_requested` and its engine ends the turn; a run that ended otherwise refuses.
pub fn cancel(run: &RunSummary, reason: Option<&str>) -> Result<Cancel, CoreError> {
    match run.status {
        RunStatus::Cancelled => return Ok(Cancel::Unchanged),
        s if s.is_terminal() => return Err(CoreError::RunEnded(s.as_str())),
        s if s.in_turn() && run.cancel_requested => return Ok(Cancel::Unchanged),
        _ => {}
    }
    let reason = reason.map(str::to_string);
    let mut events = vec![RunEvent::RunCancelRequested(RunCancelRequested {
        reason: reason.clone(),
    })];
    // A run within a turn is settled by its engine, which records what happens to tool
    // calls in flight; an idle run is cancelled here and now.
    let busy = run.status.in_turn();
    if !busy {
        events.push(RunEvent::RunCancelled(RunCancelled { reason }));
    }
    Ok(Cancel::Append { events, wake: busy })
}

/// What an action on receipts appends, and the receipts it changes (as read).
pub type Acted = (Vec<RunEvent>, Vec<Receipt>);

/// Actions need a run that has not ended.
pub fn open_for_actions(run: &RunSummary) -> Result<(), CoreError> {
    if run.status.is_terminal() {
        return Err(CoreError::RunEnded(run.status.as_str()));
    }
    Ok(())
}

/// A member's decision on an approval that is still awaited.
pub fn decide_approval(
    receipts: &[Receipt],
    approval: ApprovalId,
    decision: &ApprovalDecision,
) -> Result<Acted, CoreError> {
    let r = receipts
        .iter()
        .find(|r| r.approval_id == Some(approval))
        .ok_or(CoreError::NotFound("approval"))?;
    if r.state != ReceiptState::AwaitingApproval {
        return Err(CoreError::WrongState(format!(
            "approval {approval} was already decided (the call is {})",
            r.state.as_str()
        )));
    }
    Ok((
        vec![RunEvent::ApprovalDecided(ApprovalDecided {
            approval_id: approval,
            receipt_id: r.id,
            approved: decision.approve,
            reason: decision.reason.clone(),
        })],
        vec![r.clone()],
    ))
}

/// The outputs of client tools, each for a call that awaits one; all or nothing.
pub fn submit_tool_outputs(
    receipts: &[Receipt],
    outputs: &[ToolOutput],
) -> Result<Acted, CoreError> {
    let mut events = Vec::with_capacity(outputs.len());
    let mut touched = Vec::with_capacity(outputs.len());
    for o in outputs {
        let r = receipts
            .iter()
            .find(|r| r.id == o.receipt_id)
            .ok_or(CoreError::NotFound("receipt"))?;
        if r.state != ReceiptState::AwaitingClient {
            return Err(CoreError::WrongState(format!(
                "receipt {} does not await a client output (it is {})",
                r.id,
                r.state.as_str()
            )));
        }
        events.push(RunEvent::ToolResult(ToolResult {
            receipt_id: r.id,
            call_id: r.call_id.clone(),
            tool: r.tool.clone(),
            outcome: if o.is_error {
                ToolOutcome::Error
            } else {
                ToolOutcome::Ok
            },
            output: o.output.clone(),
            error: None,
            duration_ms: 0,
            truncated: false,
            from_client: true,
            attempts: None,
            delegated_run: None,
        }));
        touched.push(r.clone());
    }
    Ok((events, touched))
}

/// A member's resolution of an uncertain call (retry, skip, or supply the result).
pub fn resolve_receipt(
    receipts: &[Receipt],
    receipt: ReceiptId,
    res: &ReceiptResolution,
) -> Result<Acted, CoreError> {
    let r = receipts
        .iter()
        .find(|r| r.id == receipt)
        .ok_or(CoreError::NotFound("receipt"))?;
    if r.state != ReceiptState::Uncertain {
        return Err(CoreError::WrongState(format!(
            "receipt {receipt} is not uncertain (it is {})",
            r.state.as_str()
        )));
    }
    Ok((
        vec![RunEvent::ToolResolved(ToolResolved {
            receipt_id: receipt,
            resolution: res.resolution,
            output: res.output.clone(),
            turn: Some(r.turn),
        })],
        vec![r.clone()],
    ))
}

/// A resolution's output is given exactly with `complete`.
pub fn check_resolution(res: &ReceiptResolution) -> Result<(), CoreError> {
    match (&res.resolution, &res.output) {
        (Resolution::Complete, None) => {
            Err(CoreError::invalid("resolution complete needs an output"))
        }
        (Resolution::Complete, Some(_)) | (_, None) => Ok(()),
        (_, Some(_)) => Err(CoreError::invalid(
            "output is given only with resolution complete",
        )),
    }
}
