//! given(events) / when(command) / then(events or error), with no I/O: the run and its
//! receipts are folded from the given events as the store folds them, and each command is
//! decided over them.

use super::*;
use crate::model::Receipt;
use baton_events::{
    AgentId, ApprovalRequested, ModelCompleted, RunCompleted, RunCreated, RunId, TenantId,
    ToolEffect, ToolId, ToolIntent, ToolKind, ToolUncertain, TurnCompleted, TurnStarted,
};
use chrono::Utc;

/// A run and its receipts, folded from events.
struct Given {
    run: RunSummary,
    receipts: Vec<Receipt>,
}

fn given(events: impl IntoIterator<Item = RunEvent>) -> Given {
    let at = Utc::now();
    let id = RunId::new();
    let mut run = RunSummary::empty(TenantId::new(), id, at);
    let mut receipts: Vec<Receipt> = Vec::new();
    for (i, event) in std::iter::once(created()).chain(events).enumerate() {
        let version = i as i64 + 1;
        run.apply(&event, version, at);
        if let Some(rid) = Receipt::id_of(&event) {
            let before = receipts.iter().position(|r| r.id == rid);
            let prior = before.map(|i| receipts.remove(i));
            if let Some(after) = Receipt::apply(prior, id, &event, version, at) {
                receipts.push(after);
            }
        }
    }
    Given { run, receipts }
}

fn created() -> RunEvent {
    RunEvent::RunCreated(RunCreated {
        agent_id: AgentId::new(),
        agent_version: 1,
        title: None,
        metadata: Default::default(),
        tool_versions: Default::default(),
        parent: None,
    })
}

fn asked(turn: i64) -> Vec<RunEvent> {
    user_turn(MessageId::new(), "hello", turn)
}

fn started(turn: i64) -> RunEvent {
    RunEvent::TurnStarted(TurnStarted { turn })
}

fn completed(turn: i64) -> RunEvent {
    RunEvent::TurnCompleted(TurnCompleted {
        turn,
        finish_reason: None,
    })
}

fn model_called(turn: i64, call: &str) -> RunEvent {
    RunEvent::ModelCompleted(ModelCompleted {
        turn,
        step: 1,
        message_id: MessageId::new(),
        content: None,
        reasoning: None,
        tool_calls: vec![baton_events::ToolCallRequest {
            id: call.into(),
            name: "refund".into(),
            arguments: "{}".into(),
        }],
        finish_reason: "tool_calls".into(),
        usage: None,
        model: None,
    })
}

fn intent(receipt: ReceiptId, kind: ToolKind) -> RunEvent {
    RunEvent::ToolIntent(ToolIntent {
        receipt_id: receipt,
        turn: 1,
        call_id: "call-1".into(),
        tool_id: ToolId::new(),
        tool: "refund".into(),
        kind,
        effect: ToolEffect::Mutation,
        idempotent: false,
        arguments: serde_json::json!({}),
        idempotency_key: receipt.to_string(),
    })
}

fn approval_asked(approval: ApprovalId, receipt: ReceiptId) -> RunEvent {
    RunEvent::ApprovalRequested(ApprovalRequested {
        approval_id: approval,
        receipt_id: receipt,
        turn: 1,
        call_id: "call-1".into(),
        tool_id: ToolId::new(),
        tool: "refund".into(),
        effect: ToolEffect::Mutation,
        arguments: serde_json::json!({}),
    })
}

fn uncertain(receipt: ReceiptId) -> RunEvent {
    RunEvent::ToolUncertain(ToolUncertain {
        receipt_id: receipt,
        reason: "the replica running it was lost".into(),
    })
}

/// A turn that waits on one call: `then` is what the call did.
fn turn_waiting_on(then: Vec<RunEvent>) -> Vec<RunEvent> {
    let mut events = asked(1);
    events.extend([started(1), model_called(1, "call-1")]);
    events.extend(then);
    events
}

fn types(events: &[RunEvent]) -> Vec<&'static str> {
    events.iter().map(RunEvent::event_type).collect()
}

// --- post a message -------------------------------------------------------------------

/// Posts `content` with `strategy` and the default queue cap.
fn post(g: &Given, strategy: MessageStrategy) -> Result<Posting, CoreError> {
    post_message(&g.run, MessageId::new(), "more", strategy, 100)
}

fn running(turn: i64) -> Vec<RunEvent> {
    let mut e = asked(turn);
    e.push(started(turn));
    e
}

#[test]
fn a_message_to_an_idle_run_starts_the_next_turn_whatever_the_strategy() {
    let mut events = running(1);
    events.push(completed(1));
    let g = given(events);
    for strategy in [MessageStrategy::Reject, MessageStrategy::Enqueue] {
        let Ok(Posting::Turn { events, turn }) = post(&g, strategy) else {
            panic!("not a turn");
        };
        assert_eq!(turn, 2);
        assert_eq!(types(&events), ["message.appended", "turn.requested"]);
    }
}

#[test]
fn a_message_while_a_turn_is_queued_or_running_is_refused_as_busy() {
    for busy in [asked(1), running(1)] {
        let g = given(busy);
        let refused = post(&g, MessageStrategy::Reject);
        assert!(matches!(refused, Err(CoreError::RunBusy)), "{refused:?}");
    }
}

#[test]
fn a_message_while_a_call_waits_for_a_member_is_refused_as_busy() {
    let r = ReceiptId::new();
    let g = given(turn_waiting_on(vec![
        intent(r, ToolKind::Http),
        uncertain(r),
    ]));
    assert_eq!(g.run.status, RunStatus::RequiresAction);
    let refused = post(&g, MessageStrategy::Reject);
    assert!(matches!(refused, Err(CoreError::RunBusy)), "{refused:?}");
}

#[test]
fn a_message_to_enqueue_during_a_turn_waits_in_line_behind_the_queued_ones() {
    let r = ReceiptId::new();
    let waiting = turn_waiting_on(vec![intent(r, ToolKind::Http), uncertain(r)]);
    for busy in [asked(1), running(1), waiting] {
        let mut g = given(busy);
        for place in 1..=3 {
            let Ok(Posting::Queued { events, position }) = post(&g, MessageStrategy::Enqueue)
            else {
                panic!("not queued");
            };
            assert_eq!(position, place);
            assert_eq!(types(&events), ["message.queued"]);
            let version = g.run.version + 1;
            g.run.apply(&events[0], version, Utc::now());
            assert_eq!(g.run.queued_messages, place);
        }
    }
}

#[test]
fn an_interrupting_message_goes_first_and_asks_the_engine_to_end_the_turn() {
    for (strategy, how) in [
        (
            MessageStrategy::Interrupt,
            baton_events::TurnInterrupt::Interrupt,
        ),
        (
            MessageStrategy::Rollback,
            baton_events::TurnInterrupt::Rollback,
        ),
    ] {
        let mut g = given(running(1));
        g.run.queued_messages = 2;
        let Ok(Posting::Queued { events, position }) = post(&g, strategy) else {
            panic!("not queued");
        };
        assert_eq!(position, 1, "ahead of the two queued before it");
        let [RunEvent::MessageQueued(m)] = events.as_slice() else {
            panic!("{events:?}");
        };
        assert_eq!(m.interrupts, Some(how));
        g.run.apply(&events[0], g.run.version + 1, Utc::now());
        assert!(g.run.interrupt_requested);
        assert_eq!(g.run.status, RunStatus::Running);
    }
}

#[test]
fn an_interrupt_gives_a_turn_waiting_for_a_member_work_and_its_end_settles_the_run() {
    let r = ReceiptId::new();
    let mut g = given(turn_waiting_on(vec![
        intent(r, ToolKind::Http),
        uncertain(r),
    ]));
    let Ok(Posting::Queued { events, .. }) = post(&g, MessageStrategy::Interrupt) else {
        panic!("not queued");
    };
    g.run.apply(&events[0], g.run.version + 1, Utc::now());
    assert_eq!(g.run.status, RunStatus::Running, "the engine has work");
    let RunEvent::MessageQueued(m) = &events[0] else {
        panic!("{events:?}");
    };
    let ended = RunEvent::TurnInterrupted(baton_events::TurnInterrupted {
        turn: 1,
        message_id: m.message_id,
        rollback: false,
    });
    g.run.apply(&ended, g.run.version + 1, Utc::now());
    assert_eq!(g.run.status, RunStatus::Waiting);
    assert!(!g.run.interrupt_requested);
    assert_eq!(g.run.pending_actions, 0);
    assert_eq!(
        g.run.last_turn_outcome,
        Some(crate::model::TurnEnd::Interrupted)
    );
}

#[test]
fn a_run_being_cancelled_queues_nothing() {
    let mut events = running(1);
    events.push(RunEvent::RunCancelRequested(
        baton_events::RunCancelRequested { reason: None },
    ));
    let g = given(events);
    for strategy in [MessageStrategy::Enqueue, MessageStrategy::Interrupt] {
        let refused = post(&g, strategy);
        assert!(
            matches!(refused, Err(CoreError::WrongState(_))),
            "{refused:?}"
        );
    }
}

#[test]
fn a_full_queue_refuses_one_more_with_its_cap() {
    let mut g = given(running(1));
    g.run.queued_messages = 2;
    let refused = post_message(&g.run, MessageId::new(), "x", MessageStrategy::Enqueue, 2);
    assert!(
        matches!(refused, Err(CoreError::QueueFull(2))),
        "{refused:?}"
    );
}

#[test]
fn a_message_to_an_ended_run_is_refused_with_how_it_ended() {
    let g = given([RunEvent::RunCompleted(RunCompleted {})]);
    for strategy in [MessageStrategy::Reject, MessageStrategy::Enqueue] {
        let refused = post(&g, strategy);
        assert!(
            matches!(refused, Err(CoreError::RunEnded("completed"))),
            "{refused:?}"
        );
    }
}

// --- cancel ---------------------------------------------------------------------------

#[test]
fn cancelling_an_idle_run_cancels_it_at_once() {
    let g = given([]);
    match cancel(&g.run, Some("done")).expect("cancel") {
        Cancel::Append { events, wake } => {
            assert_eq!(types(&events), ["run.cancel_requested", "run.cancelled"]);
            assert!(!wake, "no driver to tell");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn cancelling_a_run_within_a_turn_asks_its_driver_to_end_the_turn() {
    let mut events = asked(1);
    events.push(started(1));
    let g = given(events);
    match cancel(&g.run, None).expect("cancel") {
        Cancel::Append { events, wake } => {
            assert_eq!(types(&events), ["run.cancel_requested"]);
            assert!(wake);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn cancelling_again_changes_nothing() {
    let mut events = asked(1);
    events.extend([
        started(1),
        RunEvent::RunCancelRequested(RunCancelRequested { reason: None }),
    ]);
    assert_eq!(
        cancel(&given(events).run, None).ok(),
        Some(Cancel::Unchanged)
    );
    let cancelled = given([
        RunEvent::RunCancelRequested(RunCancelRequested { reason: None }),
        RunEvent::RunCancelled(RunCancelled { reason: None }),
    ]);
    assert_eq!(cancel(&cancelled.run, None).ok(), Some(Cancel::Unchanged));
}

#[test]
fn a_completed_run_cannot_be_cancelled() {
    let g = given([RunEvent::RunCompleted(RunCompleted {})]);
    let refused = cancel(&g.run, None);
    assert!(
        matches!(refused, Err(CoreError::RunEnded("completed"))),
        "{refused:?}"
    );
}

// --- act: approvals, client outputs, resolutions --------------------------------------

#[test]
fn an_awaited_approval_is_decided_once() {
    let (a, r) = (ApprovalId::new(), ReceiptId::new());
    let g = given(turn_waiting_on(vec![approval_asked(a, r)]));
    assert!(open_for_actions(&g.run).is_ok());
    let yes = ApprovalDecision {
        approve: true,
        reason: Some("fine".into()),
    };
    let (events, touched) = decide_approval(&g.receipts, a, &yes).expect("decided");
    assert_eq!(types(&events), ["approval.decided"]);
    assert_eq!(touched.iter().map(|r| r.id).collect::<Vec<_>>(), [r]);

    let mut decided = turn_waiting_on(vec![approval_asked(a, r)]);
    decided.extend(events);
    let again = decide_approval(&given(decided).receipts, a, &yes);
    assert!(
        matches!(&again, Err(CoreError::WrongState(m)) if m.contains("already decided")),
        "{again:?}"
    );
}

#[test]
fn an_unknown_approval_is_not_found() {
    let g = given(turn_waiting_on(vec![]));
    let no = ApprovalDecision {
        approve: false,
        reason: None,
    };
    let refused = decide_approval(&g.receipts, ApprovalId::new(), &no);
    assert!(
        matches!(refused, Err(CoreError::NotFound("approval"))),
        "{refused:?}"
    );
}

#[test]
fn a_client_output_completes_a_call_that_awaits_one() {
    let r = ReceiptId::new();
    let g = given(turn_waiting_on(vec![intent(r, ToolKind::Client)]));
    let out = ToolOutput {
        receipt_id: r,
        output: "42".into(),
        is_error: true,
    };
    let (events, _) = submit_tool_outputs(&g.receipts, &[out]).expect("accepted");
    match events.as_slice() {
        [RunEvent::ToolResult(result)] => {
            assert_eq!(
                result.outcome,
                ToolOutcome::Error,
                "the client said it failed"
            );
            assert!(result.from_client);
            assert_eq!(result.output, "42");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn client_outputs_are_all_or_nothing() {
    let (client, http) = (ReceiptId::new(), ReceiptId::new());
    let g = given(turn_waiting_on(vec![
        intent(client, ToolKind::Client),
        intent(http, ToolKind::Http),
    ]));
    let outputs = [client, http].map(|receipt_id| ToolOutput {
        receipt_id,
        output: "x".into(),
        is_error: false,
    });
    let refused = submit_tool_outputs(&g.receipts, &outputs);
    assert!(
        matches!(&refused, Err(CoreError::WrongState(m)) if m.contains("does not await")),
        "{refused:?}"
    );
}

#[test]
fn resolving_a_call_an_ended_turn_left_uncertain_leaves_the_next_turn_waiting() {
    let (old, asked) = (ReceiptId::new(), ReceiptId::new());
    // Turn 1 is interrupted while its call is uncertain; the call stays so.
    let mut events = turn_waiting_on(vec![intent(old, ToolKind::Http), uncertain(old)]);
    let stop = MessageId::new();
    events.extend([
        RunEvent::MessageQueued(baton_events::MessageQueued {
            message_id: stop,
            content: "stop".into(),
            interrupts: Some(baton_events::TurnInterrupt::Interrupt),
        }),
        RunEvent::TurnInterrupted(baton_events::TurnInterrupted {
            turn: 1,
            message_id: stop,
            rollback: false,
        }),
    ]);
    events.extend(user_turn(stop, "stop", 2));
    // Turn 2 waits for an approval.
    events.extend([
        started(2),
        model_called(2, "call-2"),
        RunEvent::ApprovalRequested(ApprovalRequested {
            turn: 2,
            call_id: "call-2".into(),
            ..match approval_asked(ApprovalId::new(), asked) {
                RunEvent::ApprovalRequested(a) => a,
                _ => unreachable!(),
            }
        }),
    ]);
    let mut g = given(events);
    assert_eq!(
        (g.run.status, g.run.pending_actions),
        (RunStatus::RequiresAction, 1)
    );
    let skip = ReceiptResolution {
        resolution: Resolution::Skip,
        output: None,
    };
    let (resolved, _) = resolve_receipt(&g.receipts, old, &skip).expect("resolved");
    g.run.apply(&resolved[0], g.run.version + 1, Utc::now());
    assert_eq!(
        (g.run.status, g.run.pending_actions),
        (RunStatus::RequiresAction, 1),
        "turn 2 still waits for its approval"
    );
}

#[test]
fn an_uncertain_call_is_resolved_by_a_member_and_only_while_uncertain() {
    let r = ReceiptId::new();
    let g = given(turn_waiting_on(vec![
        intent(r, ToolKind::Http),
        uncertain(r),
    ]));
    let skip = ReceiptResolution {
        resolution: Resolution::Skip,
        output: None,
    };
    let (events, _) = resolve_receipt(&g.receipts, r, &skip).expect("resolved");
    assert_eq!(types(&events), ["tool.resolved"]);

    let pending = given(turn_waiting_on(vec![intent(r, ToolKind::Http)]));
    let refused = resolve_receipt(&pending.receipts, r, &skip);
    assert!(
        matches!(&refused, Err(CoreError::WrongState(m)) if m.contains("not uncertain")),
        "{refused:?}"
    );
}

#[test]
fn a_resolution_carries_an_output_exactly_when_it_completes_the_call() {
    let with = |resolution, output: Option<&str>| ReceiptResolution {
        resolution,
        output: output.map(str::to_string),
    };
    assert!(check_resolution(&with(Resolution::Complete, Some("done"))).is_ok());
    assert!(check_resolution(&with(Resolution::Retry, None)).is_ok());
    assert!(check_resolution(&with(Resolution::Complete, None)).is_err());
    assert!(check_resolution(&with(Resolution::Skip, Some("x"))).is_err());
}

#[test]
fn nothing_is_acted_on_in_an_ended_run() {
    let g = given([RunEvent::RunCompleted(RunCompleted {})]);
    let refused = open_for_actions(&g.run);
    assert!(
        matches!(refused, Err(CoreError::RunEnded("completed"))),
        "{refused:?}"
    );
}
