//! Ending a turn early — a cancel, an interrupt, a failure — and what each call of the latest model
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
    ErrorInfo, ReceiptId, RunCancelled, RunEvent, RunFailed, ToolEffect, ToolOutcome, ToolResult,
    ToolUncertain, TurnFailed, TurnInterrupted,
};
use std::collections::HashMap;

/// Ends the run as cancelled, settling its open calls.
pub(crate) async fn cancel(stream: &mut RunStream, run: &RunSummary) -> Result<Next, StepError> {
    stream.refresh(run).await?;
    let mut events = settle(&stream.state, &stream.unsaved, "the run was cancelled");
    events.push(RunEvent::RunCancelled(RunCancelled { reason: None }));
    stream.append(run, events, Some(Release::Idle)).await
}

/// Ends the turn in progress for the message that interrupted it, settling its open
/// calls; the same append takes that message as the next turn (`queue.rs`).
pub(crate) async fn interrupt(stream: &mut RunStream, run: &RunSummary) -> Result<Next, StepError> {
    stream.refresh(run).await?;
    let Some((message_id, rollback)) = stream.state.interrupt else {
        // The run row asks for an interrupt its stream does not hold: never so, but
        // deciding again would only come back here.
        tracing::error!("an interrupt was asked for, and no message in the stream asks it");
        return Ok(Next::Idle);
    };
    tracing::info!(rollback, "the turn was interrupted");
    let mut events = settle(&stream.state, &stream.unsaved, "the turn was interrupted");
    events.push(RunEvent::TurnInterrupted(TurnInterrupted {
        turn: run.turn_count,
        message_id,
        rollback,
    }));
    stream.append(run, events, Some(Release::Idle)).await
}

/// Ends the turn as failed with `error`, settling its open calls; the run fails with it
/// when this is the `max_failed_turns`th failed turn in a row (0: never).
pub(crate) async fn fail_turn(
    stream: &mut RunStream,
    run: &RunSummary,
    error: ErrorInfo,
    max_failed_turns: u32,
) -> Result<Next, StepError> {
    tracing::warn!(code = %error.code, "the turn failed");
    stream.refresh(run).await?;
    let why = format!("the turn failed ({})", error.code);
    let mut events = settle(&stream.state, &stream.unsaved, &why);
    let ends_run = ends_run(run.failed_turns, max_failed_turns);
    events.push(RunEvent::TurnFailed(TurnFailed {
        turn: run.turn_count,
        error: error.clone(),
    }));
    if ends_run {
        tracing::warn!(failed_turns = run.failed_turns + 1, "the run failed");
        events.push(RunEvent::RunFailed(RunFailed { error }));
    }
    stream.append(run, events, Some(Release::Idle)).await
}

/// Whether one more failed turn after `failed_before` in a row fails the run.
pub(crate) fn ends_run(failed_before: i64, max_failed_turns: u32) -> bool {
    max_failed_turns > 0 && failed_before + 1 >= i64::from(max_failed_turns)
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
                attempts: None,
                delegated_run: None,
            })),
        }
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::given::{
        approval_asked, client, intent, model_asks, mutation, read, result_of, state, turn_started,
        uncertain,
    };
    use baton_core::model::Tool;
    use baton_events::ToolIntent;

    /// The events ending the turn records, given the turn's events after a started turn.
    fn settled(events: Vec<RunEvent>, unsaved: &[ToolResult]) -> Vec<RunEvent> {
        let mut all = turn_started();
        all.extend(events);
        let unsaved = unsaved.iter().map(|r| (r.receipt_id, r.clone())).collect();
        settle(&state(&all), &unsaved, "the run was cancelled")
    }

    /// Call `c1` of `tool` in flight: asked for, its intent recorded, no result.
    fn in_flight(tool: &Tool) -> (ToolIntent, Vec<RunEvent>) {
        let i = intent("c1", tool);
        let events = vec![
            model_asks(1, &[("c1", tool)]),
            RunEvent::ToolIntent(i.clone()),
        ];
        (i, events)
    }

    #[test]
    fn a_mutation_in_flight_becomes_uncertain() {
        let (i, given) = in_flight(&mutation("pay"));
        let events = settled(given, &[]);
        let [RunEvent::ToolUncertain(u)] = events.as_slice() else {
            panic!("not held uncertain: {events:?}");
        };
        assert_eq!(u.receipt_id, i.receipt_id);
        assert_eq!(
            u.reason,
            "the run was cancelled while the call was in flight"
        );
    }

    #[test]
    fn a_read_in_flight_is_cancelled() {
        let (i, given) = in_flight(&read("look"));
        let events = settled(given, &[]);
        let [RunEvent::ToolResult(r)] = events.as_slice() else {
            panic!("not cancelled: {events:?}");
        };
        assert_eq!(
            (r.receipt_id, r.outcome),
            (i.receipt_id, ToolOutcome::Cancelled)
        );
        assert_eq!(r.output, "The call did not finish: the run was cancelled.");
    }

    #[test]
    fn a_result_this_driver_holds_is_written_as_it_is() {
        let (i, given) = in_flight(&mutation("pay"));
        let held = result_of(&i);
        let events = settled(given, std::slice::from_ref(&held));
        assert_eq!(events, [RunEvent::ToolResult(held)]);
    }

    #[test]
    fn calls_awaiting_a_member_or_the_client_are_cancelled() {
        let (asks, answers) = (mutation("pay"), client("ask_user"));
        let (receipt, asked) = approval_asked("c1", &asks);
        let i = intent("c2", &answers);
        let events = settled(
            vec![
                model_asks(1, &[("c1", &asks), ("c2", &answers)]),
                asked,
                RunEvent::ToolIntent(i.clone()),
            ],
            &[],
        );
        let cancelled: Vec<(ReceiptId, ToolOutcome)> = events
            .iter()
            .filter_map(|e| match e {
                RunEvent::ToolResult(r) => Some((r.receipt_id, r.outcome)),
                _ => None,
            })
            .collect();
        assert_eq!(
            cancelled,
            [
                (receipt, ToolOutcome::Cancelled),
                (i.receipt_id, ToolOutcome::Cancelled)
            ]
        );
    }

    #[test]
    fn settled_and_uncertain_calls_and_calls_without_a_receipt_record_nothing() {
        let (done, held, new) = (read("look"), mutation("pay"), read("later"));
        let (d, h) = (intent("c1", &done), intent("c2", &held));
        let events = settled(
            vec![
                model_asks(1, &[("c1", &done), ("c2", &held), ("c3", &new)]),
                RunEvent::ToolIntent(d.clone()),
                RunEvent::ToolResult(result_of(&d)),
                RunEvent::ToolIntent(h.clone()),
                uncertain(h.receipt_id),
            ],
            &[],
        );
        assert_eq!(events, []);
    }
}

#[cfg(test)]
mod rule_tests {
    use super::ends_run;

    #[test]
    fn the_nth_failed_turn_in_a_row_ends_the_run_and_zero_never_does() {
        assert!(!ends_run(0, 3));
        assert!(!ends_run(1, 3));
        assert!(ends_run(2, 3));
        assert!(ends_run(0, 1));
        assert!(!ends_run(1_000, 0));
    }
}
