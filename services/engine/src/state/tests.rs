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
use baton_core::model::{Receipt, ReceiptState, RunStatus};
use baton_events::{
    ReceiptId, Resolution, RunCancelled, RunId, ToolOutcome, ToolResult, TurnFailed,
};
use std::collections::HashMap;

/// Where call `c1` stands after each of `events` (which follow a started turn), as
/// (engine, receipt, run status, pending actions).
fn walk(events: &[RunEvent]) -> Vec<(&'static str, Option<ReceiptState>, RunStatus, i64)> {
    let start = turn_started();
    let run = RunId::new();
    let mut receipts: HashMap<ReceiptId, Receipt> = HashMap::new();
    let mut seen = start.clone();
    let mut rows = Vec::new();
    for event in events {
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
fn assert_agree_on_waiting(rows: &[(&str, Option<ReceiptState>, RunStatus, i64)]) {
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
use RunStatus::{RequiresAction, Running};

#[test]
fn a_call_that_runs_is_pending_between_its_intent_and_its_result() {
    let tool = read("look");
    let i = intent("c1", &tool);
    let rows = walk(&[
        model_asks(1, &[("c1", &tool)]),
        RunEvent::ToolIntent(i.clone()),
        RunEvent::ToolResult(result_of(&i)),
    ]);
    assert_eq!(
        rows,
        [
            ("new", None, Running, 0),
            ("running", Some(R::Pending), Running, 0),
            ("done", Some(R::Ok), Running, 0),
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
    let rows = walk(&[
        model_asks(1, &[("c1", &tool)]),
        asked,
        approval_decided(receipt, true, None),
        RunEvent::ToolIntent(i.clone()),
        RunEvent::ToolResult(result_of(&i)),
    ]);
    assert_eq!(
        rows,
        [
            ("new", None, Running, 0),
            (
                "awaiting_approval",
                Some(R::AwaitingApproval),
                RequiresAction,
                1
            ),
            ("approved", Some(R::Approved), Running, 0),
            ("running", Some(R::Pending), Running, 0),
            ("done", Some(R::Ok), Running, 0),
        ]
    );
    assert_agree_on_waiting(&rows);
}

#[test]
fn a_denied_call_stays_denied_in_its_receipt_once_the_model_is_told() {
    let tool = mutation("pay");
    let (receipt, asked) = approval_asked("c1", &tool);
    let told = RunEvent::ToolResult(ToolResult {
        receipt_id: receipt,
        call_id: "c1".into(),
        tool: tool.name.clone(),
        outcome: ToolOutcome::Error,
        output: "denied".into(),
        error: None,
        duration_ms: 0,
        truncated: false,
        from_client: false,
    });
    let rows = walk(&[
        model_asks(1, &[("c1", &tool)]),
        asked,
        approval_decided(receipt, false, None),
        told,
    ]);
    // The engine must still tell the model after the denial; the receipt says
    // `denied` before and after.
    assert_eq!(
        rows,
        [
            ("new", None, Running, 0),
            (
                "awaiting_approval",
                Some(R::AwaitingApproval),
                RequiresAction,
                1
            ),
            ("denied", Some(R::Denied), Running, 0),
            ("done", Some(R::Denied), Running, 0),
        ]
    );
    assert_agree_on_waiting(&rows);
}

#[test]
fn a_client_call_waits_for_the_clients_output() {
    let tool = client("ask_user");
    let i = intent("c1", &tool);
    let rows = walk(&[
        model_asks(1, &[("c1", &tool)]),
        RunEvent::ToolIntent(i.clone()),
        RunEvent::ToolResult(result_of(&i)),
    ]);
    assert_eq!(
        rows,
        [
            ("new", None, Running, 0),
            (
                "awaiting_client",
                Some(R::AwaitingClient),
                RequiresAction,
                1
            ),
            ("done", Some(R::Ok), Running, 0),
        ]
    );
    assert_agree_on_waiting(&rows);
}

#[test]
fn a_retried_uncertain_call_is_pending_in_its_receipt_before_its_new_intent() {
    let tool = mutation("pay");
    let i = intent("c1", &tool);
    let rows = walk(&[
        model_asks(1, &[("c1", &tool)]),
        RunEvent::ToolIntent(i.clone()),
        uncertain(i.receipt_id),
        resolved(i.receipt_id, Resolution::Retry),
        RunEvent::ToolIntent(i.clone()),
        RunEvent::ToolResult(result_of(&i)),
    ]);
    // The engine tells a retry asked for (record the intent again, then call) from an
    // intent recorded (the call is running); the receipt says `pending` for both.
    assert_eq!(
        rows,
        [
            ("new", None, Running, 0),
            ("running", Some(R::Pending), Running, 0),
            ("uncertain", Some(R::Uncertain), RequiresAction, 1),
            ("retry_requested", Some(R::Pending), Running, 0),
            ("running", Some(R::Pending), Running, 0),
            ("done", Some(R::Ok), Running, 0),
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
        let rows = walk(&[
            model_asks(1, &[("c1", &tool)]),
            RunEvent::ToolIntent(i.clone()),
            uncertain(i.receipt_id),
            resolved(i.receipt_id, resolution),
        ]);
        assert_eq!(rows[3], ("done", Some(settled), Running, 0));
        assert_agree_on_waiting(&rows);
    }
}

#[test]
fn a_call_rejected_before_it_runs_has_a_receipt_only_once_its_error_is_recorded() {
    let tool = read("look");
    let rejected = RunEvent::ToolResult(ToolResult {
        receipt_id: ReceiptId::new(),
        call_id: "c1".into(),
        tool: tool.name.clone(),
        outcome: ToolOutcome::Error,
        output: "bad arguments".into(),
        error: None,
        duration_ms: 0,
        truncated: false,
        from_client: false,
    });
    let rows = walk(&[model_asks(1, &[("c1", &tool)]), rejected]);
    assert_eq!(
        rows,
        [
            ("new", None, Running, 0),
            ("done", Some(R::Error), Running, 0)
        ]
    );
}

#[test]
fn the_run_counts_awaited_actions_until_the_turn_ends_whatever_settles_them() {
    let tool = mutation("pay");
    let (receipt, asked) = approval_asked("c1", &tool);
    // A failing turn settles the call awaiting approval as cancelled; the run still
    // counts the approval until the turn's end resets the count.
    let settled = RunEvent::ToolResult(ToolResult {
        receipt_id: receipt,
        call_id: "c1".into(),
        tool: tool.name.clone(),
        outcome: ToolOutcome::Cancelled,
        output: "The call did not finish.".into(),
        error: None,
        duration_ms: 0,
        truncated: false,
        from_client: false,
    });
    let failed = RunEvent::TurnFailed(TurnFailed {
        turn: 1,
        error: crate::outcome::info("turn_timeout", "too slow"),
    });
    let rows = walk(&[model_asks(1, &[("c1", &tool)]), asked, settled, failed]);
    assert_eq!(
        rows,
        [
            ("new", None, Running, 0),
            (
                "awaiting_approval",
                Some(R::AwaitingApproval),
                RequiresAction,
                1
            ),
            ("done", Some(R::Cancelled), RequiresAction, 1),
            ("none", Some(R::Cancelled), RunStatus::Waiting, 0),
        ]
    );
}

#[test]
fn a_cancelled_run_ends_whatever_its_calls_were_waiting_for() {
    let tool = mutation("pay");
    let i = intent("c1", &tool);
    let rows = walk(&[
        model_asks(1, &[("c1", &tool)]),
        RunEvent::ToolIntent(i.clone()),
        uncertain(i.receipt_id),
        cancel_requested(),
        RunEvent::RunCancelled(RunCancelled { reason: None }),
    ]);
    assert_eq!(
        rows[3..],
        [
            ("uncertain", Some(R::Uncertain), RequiresAction, 1),
            ("none", Some(R::Uncertain), RunStatus::Cancelled, 1),
        ]
    );
}
