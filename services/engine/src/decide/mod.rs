//! The next step of a run, decided without I/O from what the driver knows: the run as
//! read, the lease it holds, the engine state folded from the run's events, the turn's
//! agent, results it could not write yet and the time. The driver carries the step
//! out and asks again; given/when/then tests in `tests.rs` cover every branch.

use crate::agent::TurnContext;
use crate::calls::batch::batch;
use crate::calls::check::check_call;
use crate::lease::Lease;
use crate::outcome::info;
use crate::state::{Call, CallState, RunState};
use baton_core::model::{RunStatus, RunSummary, Tool};
use baton_events::{ErrorInfo, ReceiptId, ToolIntent, ToolResult};
use chrono::{DateTime, Utc};
use std::collections::HashMap;

/// What the driver knows when it decides.
pub(crate) struct Facts<'a> {
    /// The run as read at the start of the step.
    pub run: &'a RunSummary,
    /// The run's lease, if this driver holds it.
    pub lease: Option<&'a Lease>,
    /// The engine state, folded from the run's events.
    pub state: &'a RunState,
    /// The state was folded up to the run's events in this step.
    pub folded: bool,
    /// The run's agent version, tools and provider, once loaded.
    pub agent: Option<&'a TurnContext>,
    /// Results of calls this driver made whose append has not succeeded yet.
    pub unsaved: &'a HashMap<ReceiptId, ToolResult>,
    pub now: DateTime<Utc>,
}

/// What the driver does next.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Step {
    /// Nothing for this driver: the run is idle, ended or waiting for an action.
    Idle,
    /// The run has no work left: give its lease up and go idle.
    Release,
    /// The run has work and this driver holds no lease: claim it (idle when another
    /// replica holds it).
    Claim,
    /// Fold the run's events since the state's version (from a checkpoint at first).
    Fold,
    /// The state does not match the run (a client command got in): read it again.
    Reread,
    /// Honour the pending cancel: settle the open calls and end the run.
    Cancel,
    /// Honour the pending interrupt: settle the open calls and end the turn, which takes
    /// the interrupting message as the next one.
    Interrupt,
    /// A turn in progress taken over under a new lease: announce the lease first.
    Announce,
    /// Start the queued turn.
    StartTurn,
    /// Load the run's agent version, its tools and its provider.
    LoadAgent,
    /// A step of the running turn, decided with its agent loaded.
    Turn(Box<TurnStep>),
}

/// A step of the running turn.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum TurnStep {
    /// End the turn with this error.
    Fail(ErrorInfo),
    /// Ask the model for the turn's next reply.
    AskModel,
    /// Ask a member to approve the call before it runs.
    AskApproval { call: Call, tool: Tool },
    /// Record the intents of these calls and make them (`http`) or hand them to the
    /// API client (`client`).
    RunCalls(Vec<(Call, Tool)>),
    /// Record an error result for a call that does not run; the model reads it.
    Reject { call: Call, error: ErrorInfo },
    /// Record a result this driver holds but could not write yet.
    SaveResult(ToolResult),
    /// An intent without a result that this driver is not making: apply the recovery
    /// rule (`calls::recovery`) once the tool is looked up again.
    Recover { call: Call, intent: ToolIntent },
    /// A member asked to call an uncertain call again.
    Retry { call: Call, intent: ToolIntent },
    /// The turn waits for a member or the API client.
    Wait,
}

/// The next step for the run, given what the driver knows.
pub(crate) fn decide(facts: &Facts) -> Step {
    let run = facts.run;
    let has_work = run.status.is_busy() || (run.cancel_requested && !run.status.is_terminal());
    if !has_work {
        return match facts.lease {
            Some(_) => Step::Release,
            None => Step::Idle,
        };
    }
    let Some(lease) = facts.lease else {
        return Step::Claim;
    };
    if !facts.folded {
        return Step::Fold;
    }
    if run.cancel_requested {
        return Step::Cancel;
    }
    if run.interrupt_requested {
        return Step::Interrupt;
    }
    match run.status {
        RunStatus::Queued => Step::StartTurn,
        // Taking over a turn in progress: say so now, not when the turn is answered.
        RunStatus::Running if !lease.announced => Step::Announce,
        RunStatus::Running => turn_step(facts),
        _ => Step::Idle,
    }
}

/// The next step of the running turn.
fn turn_step(facts: &Facts) -> Step {
    let state = facts.state;
    if state.version != facts.run.version {
        return Step::Reread;
    }
    // Loaded for this turn: one loaded for an earlier turn is stale.
    let Some(ctx) = facts.agent.filter(|c| c.turn == facts.run.turn_count) else {
        return Step::LoadAgent;
    };
    let limits = &ctx.agent.limits;
    if state.time_left(limits.turn_timeout_ms, facts.now).is_zero() {
        let ms = limits.turn_timeout_ms;
        return Step::Turn(Box::new(TurnStep::Fail(info(
            "turn_timeout",
            format!("the turn took longer than {ms} ms"),
        ))));
    }
    if !state.calls_done() {
        return calls_step(facts, ctx);
    }
    let max_steps = limits.max_steps;
    if state.step >= max_steps {
        return Step::Turn(Box::new(TurnStep::Fail(info(
            "step_limit",
            format!("the model still asked for tools after {max_steps} model calls"),
        ))));
    }
    Step::Turn(Box::new(TurnStep::AskModel))
}

/// The step for the first call of the latest model reply that has no output yet: calls
/// run in the order the model gave them, consecutive reads together.
fn calls_step(facts: &Facts, ctx: &TurnContext) -> Step {
    let state = facts.state;
    let Some(i) = state.calls.iter().position(|c| c.state != CallState::Done) else {
        return Step::Reread;
    };
    let call = &state.calls[i];
    Step::Turn(Box::new(call_step(facts, ctx, i, call)))
}

/// The step for `call`, the `i`th of the latest model reply.
fn call_step(facts: &Facts, ctx: &TurnContext, i: usize, call: &Call) -> TurnStep {
    let state = facts.state;
    let reject = |error| TurnStep::Reject {
        call: call.clone(),
        error,
    };
    match &call.state {
        CallState::New => match check_call(ctx, state.tool_calls, call, true) {
            Err(error) => reject(error),
            Ok(tool) if tool.requires_approval => TurnStep::AskApproval {
                call: call.clone(),
                tool: tool.clone(),
            },
            Ok(tool) => TurnStep::RunCalls(batch(ctx, state, i, tool)),
        },
        CallState::Approved => match check_call(ctx, state.tool_calls, call, false) {
            Err(error) => reject(error),
            Ok(tool) => TurnStep::RunCalls(vec![(call.clone(), tool.clone())]),
        },
        CallState::Denied { reason } => {
            let said = match reason {
                Some(r) => format!("A member denied this call: {r}"),
                None => "A member denied this call.".to_string(),
            };
            reject(info("denied", said))
        }
        CallState::Running(intent) => match facts.unsaved.get(&intent.receipt_id) {
            Some(result) => TurnStep::SaveResult(result.clone()),
            None => TurnStep::Recover {
                call: call.clone(),
                intent: (**intent).clone(),
            },
        },
        CallState::RetryRequested(intent) => TurnStep::Retry {
            call: call.clone(),
            intent: (**intent).clone(),
        },
        // The projection says `requires_action` for these; `Done` calls are skipped
        // by the caller.
        CallState::AwaitingApproval
        | CallState::AwaitingClient
        | CallState::Uncertain(_)
        | CallState::Done => TurnStep::Wait,
    }
}

#[cfg(test)]
mod tests;
