//! given(a call's events) / then(where each of the three folds says the call stands):
//! the engine's [`CallState`], the receipts projection's `ReceiptState` and the runs
//! projection's status and `pending_actions`, side by side for every path a call can
//! take. They are three folds on purpose (the module docs say why); these tables show
//! where they differ and check that they agree on when the run waits for someone.

use super::*;
use crate::given::{
    approval_asked, approval_decided, cancel_requested, client, intent, model_asks, mutation, read,
    resolved, result_of, summary, t0, turn_started, uncertain,
};
use baton_core::model::{Receipt, ReceiptState, RunStatus, Tool};
use baton_events::{
    ReceiptId, Resolution, RunCancelled, RunId, ToolOutcome, ToolResult, TurnFailed,
};
use std::collections::HashMap;

/// Where call `c1` of `tool` stands after the model asked for it and after each of
/// `events`, as (engine, receipt, run status, pending actions).
fn walk(tool: &Tool, events: &[RunEvent]) -> Vec<Row> {
    let asked = model_asks(1, &[("c1", tool)]);
    let run = RunId::new();
    let mut receipts: HashMap<ReceiptId, Receipt> = HashMap::new();
    let mut seen = turn_started();
    let mut rows = Vec::new();
    for event in std::iter::once(&asked).chain(events) {
        seen.push(event.clone());
        let version = seen.len() as i64;
        if let Some(id) = Receipt::id_of(event)
            && let Some(after) = Receipt::apply(receipts.remove(&id), run, event, version, t0())
        {
            receipts.insert(id, after);
        }
        let state = crate::given::state(&seen);
        let call = state.calls.iter().find(|c| c.request.id == "c1");
        let engine = call.map_or("none", |c| name(&c.state));
        // Each path has one call, so at most one receipt.
        let receipt = receipts.values().next().map(|r| r.state);
        let summary = summary(&seen);
        rows.push((engine, receipt, summary.status, summary.pending_actions));
    }
    rows
}

fn name(state: &CallState) -> &'static str {
    match state {
        CallState::New => "new",
        CallState::AwaitingApproval => "awaiting_approval",
        CallState::Approved => "approved",
        CallState::Denied { .. } => "denied",
        CallState::Running(_) => "running",
        CallState::AwaitingClient => "awaiting_client",
        CallState::Uncertain(_) => "uncertain",
        CallState::RetryRequested(_) => "retry_requested",
        CallState::Done => "done",
    }
}

/// The engine waits on a call exactly when its receipt awaits someone and the run
/// says `requires_action` with that one action pending.
fn assert_agree_on_waiting(rows: &[Row]) {
    for (engine, receipt, status, pending) in rows {
        let engine_waits = matches!(
            *engine,
            "awaiting_approval" | "awaiting_client" | "uncertain"
        );
        let receipt_waits = matches!(
            receipt,
            Some(
                ReceiptState::AwaitingApproval
                    | ReceiptState::AwaitingClient
                    | ReceiptState::Uncertain
            )
        );
        let run_waits = *status == RunStatus::RequiresAction && *pending == 1;
        assert_eq!(
            (engine_waits, receipt_waits),
            (run_waits, run_waits),
            "{engine} / {receipt:?} / {status:?} {pending}"
        );
    }
}

use ReceiptState as R;

type Row = (&'static str, Option<ReceiptState>, RunStatus, i64);

/// The turn goes on: nothing pending, the run `running`.
fn goes_on(engine: &'static str, receipt: Option<ReceiptState>) -> Row {
    (engine, receipt, RunStatus::Running, 0)
}

/// The turn waits for one action: the run `requires_action`.
fn waits(engine: &'static str, receipt: ReceiptState) -> Row {
    (engine, Some(receipt), RunStatus::RequiresAction, 1)
}

/// A result recorded by the engine for call `c1` of `tool` without running it (or
/// settling it when the turn ends).
fn engine_result(receipt: ReceiptId, tool: &Tool, outcome: ToolOutcome) -> RunEvent {
    RunEvent::ToolResult(ToolResult {
        receipt_id: receipt,
        call_id: "c1".into(),
        tool: tool.name.clone(),
        outcome,
        output: "said to the model".into(),
        error: None,
        duration_ms: 0,
        truncated: false,
        from_client: false,
        attempts: None,
        delegated_run: None,
    })
}

#[test]
fn a_call_that_runs_is_pending_between_its_intent_and_its_result() {
    let tool = read("look");
    let i = intent("c1", &tool);
    let rows = walk(
        &tool,
        &[
            RunEvent::ToolIntent(i.clone()),
            RunEvent::ToolResult(result_of(&i)),
        ],
    );
    assert_eq!(
        rows,
        [
            goes_on("new", None),
            goes_on("running", Some(R::Pending)),
            goes_on("done", Some(R::Ok)),
        ]
    );
    assert_agree_on_waiting(&rows);
}

#[test]
fn an_approved_call_waits_for_its_approval_then_runs() {
    let tool = mutation("pay");
    let (receipt, asked) = approval_asked("c1", &tool);
    let mut i = intent("c1", &tool);
    i.receipt_id = receipt;
    let rows = walk(
        &tool,
        &[
            asked,
            approval_decided(receipt, true, None),
            RunEvent::ToolIntent(i.clone()),
            RunEvent::ToolResult(result_of(&i)),
        ],
    );
    assert_eq!(
        rows,
        [
            goes_on("new", None),
            waits("awaiting_approval", R::AwaitingApproval),
            goes_on("approved", Some(R::Approved)),
            goes_on("running", Some(R::Pending)),
            goes_on("done", Some(R::Ok)),
        ]
    );
    assert_agree_on_waiting(&rows);
}

#[test]
fn a_denied_call_stays_denied_in_its_receipt_once_the_model_is_told() {
    let tool = mutation("pay");
    let (receipt, asked) = approval_asked("c1", &tool);
    let told = engine_result(receipt, &tool, ToolOutcome::Error);
    let rows = walk(
        &tool,
        &[asked, approval_decided(receipt, false, None), told],
    );
    // The engine must still tell the model after the denial; the receipt says
    // `denied` before and after.
    assert_eq!(
        rows,
        [
            goes_on("new", None),
            waits("awaiting_approval", R::AwaitingApproval),
            goes_on("denied", Some(R::Denied)),
            goes_on("done", Some(R::Denied)),
        ]
    );
    assert_agree_on_waiting(&rows);
}

#[test]
fn a_client_call_waits_for_the_clients_output() {
    let tool = client("ask_user");
    let i = intent("c1", &tool);
    let rows = walk(
        &tool,
        &[
            RunEvent::ToolIntent(i.clone()),
            RunEvent::ToolResult(result_of(&i)),
        ],
    );
    assert_eq!(
        rows,
        [
            goes_on("new", None),
            waits("awaiting_client", R::AwaitingClient),
            goes_on("done", Some(R::Ok)),
        ]
    );
    assert_agree_on_waiting(&rows);
}

#[test]
fn a_retried_uncertain_call_is_pending_in_its_receipt_before_its_new_intent() {
    let tool = mutation("pay");
    let i = intent("c1", &tool);
    let rows = walk(
        &tool,
        &[
            RunEvent::ToolIntent(i.clone()),
            uncertain(i.receipt_id),
            resolved(i.receipt_id, Resolution::Retry),
            RunEvent::ToolIntent(i.clone()),
            RunEvent::ToolResult(result_of(&i)),
        ],
    );
    // The engine tells a retry asked for (record the intent again, then call) from an
    // intent recorded (the call is running); the receipt says `pending` for both.
    assert_eq!(
        rows,
        [
            goes_on("new", None),
            goes_on("running", Some(R::Pending)),
            waits("uncertain", R::Uncertain),
            goes_on("retry_requested", Some(R::Pending)),
            goes_on("running", Some(R::Pending)),
            goes_on("done", Some(R::Ok)),
        ]
    );
    assert_agree_on_waiting(&rows);
}

#[test]
fn an_uncertain_call_a_member_skips_or_completes_is_settled() {
    let tool = mutation("pay");
    for (resolution, settled) in [
        (Resolution::Skip, R::Skipped),
        (Resolution::Complete, R::Completed),
    ] {
        let i = intent("c1", &tool);
        let rows = walk(
            &tool,
            &[
                RunEvent::ToolIntent(i.clone()),
                uncertain(i.receipt_id),
                resolved(i.receipt_id, resolution),
            ],
        );
        assert_eq!(rows[3], goes_on("done", Some(settled)));
        assert_agree_on_waiting(&rows);
    }
}

#[test]
fn a_call_rejected_before_it_runs_has_a_receipt_only_once_its_error_is_recorded() {
    let tool = read("look");
    let rejected = engine_result(ReceiptId::new(), &tool, ToolOutcome::Error);
    let rows = walk(&tool, &[rejected]);
    assert_eq!(
        rows,
        [goes_on("new", None), goes_on("done", Some(R::Error))]
    );
}

#[test]
fn the_run_counts_awaited_actions_until_the_turn_ends_whatever_settles_them() {
    let tool = mutation("pay");
    let (receipt, asked) = approval_asked("c1", &tool);
    // A failing turn settles the call awaiting approval as cancelled; the run still
    // counts the approval until the turn's end resets the count.
    let settled = engine_result(receipt, &tool, ToolOutcome::Cancelled);
    let failed = RunEvent::TurnFailed(TurnFailed {
        turn: 1,
        error: crate::outcome::info("turn_timeout", "too slow"),
    });
    let rows = walk(&tool, &[asked, settled, failed]);
    assert_eq!(
        rows,
        [
            goes_on("new", None),
            waits("awaiting_approval", R::AwaitingApproval),
            waits("done", R::Cancelled),
            ("none", Some(R::Cancelled), RunStatus::Waiting, 0),
        ]
    );
}

#[test]
fn a_cancelled_run_ends_whatever_its_calls_were_waiting_for() {
    let tool = mutation("pay");
    let i = intent("c1", &tool);
    let rows = walk(
        &tool,
        &[
            RunEvent::ToolIntent(i.clone()),
            uncertain(i.receipt_id),
            cancel_requested(),
            RunEvent::RunCancelled(RunCancelled { reason: None }),
        ],
    );
    assert_eq!(
        rows[3..],
        [
            waits("uncertain", R::Uncertain),
            ("none", Some(R::Uncertain), RunStatus::Cancelled, 1),
        ]
    );
}

/// The queue as the engine folds it and as the runs projection counts it agree after
/// every event of a run that queues, interrupts, takes from its queue and ends: the
/// projection's `queued_messages` is the engine's queue length, and it asks for an
/// interrupt exactly while the engine holds one.
#[test]
fn the_engine_state_and_the_projection_agree_on_the_queue_and_the_interrupt() {
    use baton_events::{
        MessageAppended, MessageId, MessageQueued, MessageRole, TurnCompleted, TurnInterrupt,
        TurnInterrupted, TurnRequested, TurnStarted,
    };
    let queued = |content: &str, interrupts: Option<TurnInterrupt>| {
        let id = MessageId::new();
        let e = RunEvent::MessageQueued(MessageQueued {
            message_id: id,
            content: content.into(),
            interrupts,
        });
        (id, e)
    };
    let taken = |id: MessageId, content: &str, turn: i64| {
        [
            RunEvent::MessageAppended(MessageAppended {
                message_id: id,
                role: MessageRole::User,
                content: content.into(),
                queued: true,
            }),
            RunEvent::TurnRequested(TurnRequested {
                turn,
                message_id: id,
            }),
            RunEvent::TurnStarted(TurnStarted { turn }),
        ]
    };
    let (a, queued_a) = queued("a", None);
    let (_, queued_b) = queued("b", None);
    let (stop, interrupting) = queued("stop", Some(TurnInterrupt::Rollback));
    let mut events = vec![queued_a, queued_b, interrupting];
    events.push(RunEvent::TurnInterrupted(TurnInterrupted {
        turn: 1,
        message_id: stop,
        rollback: true,
    }));
    events.extend(taken(stop, "stop", 2));
    events.push(RunEvent::TurnCompleted(TurnCompleted {
        turn: 2,
        finish_reason: None,
    }));
    events.extend(taken(a, "a", 3));
    events.push(RunEvent::RunCancelled(RunCancelled { reason: None }));
    let mut seen = turn_started();
    let mut lengths = Vec::new();
    for event in events {
        seen.push(event);
        let (state, run) = (crate::given::state(&seen), summary(&seen));
        assert_eq!(
            (run.queued_messages, run.interrupt_requested),
            (state.queue.len() as i64, state.interrupt.is_some()),
            "after {:?}",
            seen.last()
        );
        lengths.push(state.queue.len());
    }
    // 1, 2, 3 queued; the interrupting one taken; `a` taken; the cancel drops `b`.
    assert_eq!(lengths, [1, 2, 3, 3, 2, 2, 2, 2, 1, 1, 1, 0]);
    assert!(!summary(&seen).interrupt_requested);
}
