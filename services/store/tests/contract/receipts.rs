//! Contract: the receipts projection (one row per tool call, written by the append
//! transaction), the run's pending actions, and assistant messages from model steps.

use crate::support::*;
use baton_core::StoreError;
use baton_core::model::{Receipt, ReceiptState, RunStatus, RunSummary};
use baton_core::ports::StatsStore;
use baton_events::{
    ApprovalDecided, ApprovalId, ApprovalRequested, ErrorInfo, MessageId, MessageRole,
    ModelCompleted, NewEvent, ReceiptId, Resolution, RunCompleted, RunEvent, RunId, TenantId,
    ToolCallRequest, ToolEffect, ToolId, ToolIntent, ToolKind, ToolOutcome, ToolResolved,
    ToolResult, ToolUncertain,
};
use serde_json::json;

/// One tool call of a test, and the events about it.
struct Call {
    tenant: TenantId,
    receipt: ReceiptId,
    tool_id: ToolId,
}

impl Call {
    fn new(tenant: TenantId) -> Self {
        Self::with_id(tenant, ReceiptId::new())
    }

    fn with_id(tenant: TenantId, receipt: ReceiptId) -> Self {
        Call {
            tenant,
            receipt,
            tool_id: ToolId::new(),
        }
    }

    fn call_id(&self) -> String {
        format!("call-{}", self.receipt)
    }

    fn approval_requested(&self, approval: ApprovalId) -> NewEvent {
        let e = ApprovalRequested {
            approval_id: approval,
            receipt_id: self.receipt,
            turn: 1,
            call_id: self.call_id(),
            tool_id: self.tool_id,
            tool: "deploy".into(),
            effect: ToolEffect::Mutation,
            arguments: json!({ "env": "prod" }),
        };
        event(self.tenant, RunEvent::ApprovalRequested(e))
    }

    fn approval_decided(&self, approval: ApprovalId, approved: bool) -> NewEvent {
        let e = ApprovalDecided {
            approval_id: approval,
            receipt_id: self.receipt,
            approved,
            reason: None,
        };
        event(self.tenant, RunEvent::ApprovalDecided(e))
    }

    fn intent(&self, kind: ToolKind) -> NewEvent {
        let e = ToolIntent {
            receipt_id: self.receipt,
            turn: 1,
            call_id: self.call_id(),
            tool_id: self.tool_id,
            tool: "deploy".into(),
            kind,
            effect: ToolEffect::Mutation,
            idempotent: true,
            arguments: json!({ "env": "prod" }),
            idempotency_key: self.receipt.to_string(),
        };
        event(self.tenant, RunEvent::ToolIntent(e))
    }

    fn result(&self, outcome: ToolOutcome, from_client: bool) -> NewEvent {
        let error = (outcome == ToolOutcome::Error).then(|| ErrorInfo {
            code: "tool_error".into(),
            message: "it broke".into(),
        });
        let e = ToolResult {
            receipt_id: self.receipt,
            call_id: self.call_id(),
            tool: "deploy".into(),
            outcome,
            output: "deployed".into(),
            error,
            duration_ms: 12,
            truncated: false,
            from_client,
            attempts: None,
            delegated_run: None,
        };
        event(self.tenant, RunEvent::ToolResult(e))
    }

    fn uncertain(&self) -> NewEvent {
        let e = ToolUncertain {
            receipt_id: self.receipt,
            reason: "the replica stopped mid-call".into(),
        };
        event(self.tenant, RunEvent::ToolUncertain(e))
    }

    fn resolved(&self, resolution: Resolution) -> NewEvent {
        let e = ToolResolved {
            receipt_id: self.receipt,
            resolution,
            output: None,
            turn: None,
        };
        event(self.tenant, RunEvent::ToolResolved(e))
    }
}

fn model_completed(tenant: TenantId, content: Option<&str>) -> (MessageId, NewEvent) {
    let message_id = MessageId::new();
    let tool_calls = if content.is_none() {
        vec![ToolCallRequest {
            id: "call-1".into(),
            name: "deploy".into(),
            arguments: "{}".into(),
        }]
    } else {
        vec![]
    };
    let e = ModelCompleted {
        turn: 1,
        step: 1,
        message_id,
        content: content.map(str::to_string),
        reasoning: None,
        tool_calls,
        finish_reason: "stop".into(),
        usage: None,
        model: Some("scripted".into()),
    };
    (message_id, event(tenant, RunEvent::ModelCompleted(e)))
}

/// Appends `events` at `version`; checks that the stored run matches the returned one
/// and that the receipts rows match a pure fold of the stream.
async fn step<S: Store>(
    s: &S,
    tenant: TenantId,
    run: RunId,
    version: i64,
    events: Vec<NewEvent>,
) -> RunSummary {
    let (summary, _) = append_ok(s, tenant, request(run, version, events)).await;
    assert_eq!(
        s.get_run(tenant, run).await.expect("get").as_ref(),
        Some(&summary)
    );
    assert_eq!(
        receipts(s, tenant, run).await,
        folded_receipts(s, tenant, run).await
    );
    summary
}

async fn receipts<S: Store>(s: &S, tenant: TenantId, run: RunId) -> Vec<Receipt> {
    s.list_receipts(tenant, run).await.expect("receipts")
}

/// The run's only receipt.
async fn only_receipt<S: Store>(s: &S, tenant: TenantId, run: RunId) -> Receipt {
    let mut all = receipts(s, tenant, run).await;
    assert_eq!(all.len(), 1, "{all:?}");
    all.remove(0)
}

pub async fn an_approved_call_moves_through_approval_intent_and_result<S: Store>(s: &S) {
    let t = tenant(s).await;
    let (run, v) = run_in_turn(s, t).await;
    let call = Call::new(t);
    let approval = ApprovalId::new();

    let summary = step(s, t, run, v, vec![call.approval_requested(approval)]).await;
    assert_eq!(
        (summary.status, summary.pending_actions),
        (RunStatus::RequiresAction, 1)
    );
    let r = only_receipt(s, t, run).await;
    assert_eq!(r.state, ReceiptState::AwaitingApproval);
    assert_eq!((r.id, r.run_id, r.turn), (call.receipt, run, 1));
    assert_eq!(
        (r.call_id.as_str(), r.tool.as_str()),
        (call.call_id().as_str(), "deploy")
    );
    assert_eq!(
        (r.approval_id, r.tool_id, r.effect, r.kind),
        (
            Some(approval),
            Some(call.tool_id),
            Some(ToolEffect::Mutation),
            None
        )
    );
    assert_eq!(r.arguments, json!({ "env": "prod" }));
    assert_eq!(
        (r.attempts, r.created_version, r.updated_version),
        (0, v + 1, v + 1)
    );
    let created_at = r.created_at;

    let summary = step(
        s,
        t,
        run,
        v + 1,
        vec![call.approval_decided(approval, true)],
    )
    .await;
    assert_eq!(
        (summary.status, summary.pending_actions),
        (RunStatus::Running, 0)
    );
    assert_eq!(only_receipt(s, t, run).await.state, ReceiptState::Approved);

    step(s, t, run, v + 2, vec![call.intent(ToolKind::Http)]).await;
    let r = only_receipt(s, t, run).await;
    assert_eq!(
        (r.state, r.attempts, r.kind),
        (ReceiptState::Pending, 1, Some(ToolKind::Http))
    );
    assert_eq!((r.created_version, r.updated_version), (v + 1, v + 3));

    let summary = step(s, t, run, v + 3, vec![call.result(ToolOutcome::Ok, false)]).await;
    assert_eq!(
        (summary.status, summary.pending_actions),
        (RunStatus::Running, 0)
    );
    let r = only_receipt(s, t, run).await;
    assert_eq!((r.state, r.attempts), (ReceiptState::Ok, 1));
    assert_eq!(
        (r.output.as_deref(), r.error.as_ref(), r.duration_ms),
        (Some("deployed"), None, Some(12))
    );
    assert_eq!((r.created_version, r.updated_version), (v + 1, v + 4));
    assert_eq!(r.created_at, created_at);
    let last = all_events(s, t, run).await;
    assert_eq!(r.updated_at, last.last().expect("events").recorded_at);
}

pub async fn a_denied_call_stays_denied_after_its_result<S: Store>(s: &S) {
    let t = tenant(s).await;
    let (run, v) = run_in_turn(s, t).await;
    let call = Call::new(t);
    let approval = ApprovalId::new();
    step(s, t, run, v, vec![call.approval_requested(approval)]).await;
    let summary = step(
        s,
        t,
        run,
        v + 1,
        vec![
            call.approval_decided(approval, false),
            call.result(ToolOutcome::Error, false),
        ],
    )
    .await;
    assert_eq!(
        (summary.status, summary.pending_actions),
        (RunStatus::Running, 0)
    );
    let r = only_receipt(s, t, run).await;
    assert_eq!((r.state, r.attempts), (ReceiptState::Denied, 0));
    assert_eq!(r.output.as_deref(), Some("deployed"));
}

pub async fn an_uncertain_call_is_resolved_and_retried<S: Store>(s: &S) {
    let t = tenant(s).await;
    let (run, v) = run_in_turn(s, t).await;
    let call = Call::new(t);

    step(s, t, run, v, vec![call.intent(ToolKind::Http)]).await;
    let r = only_receipt(s, t, run).await;
    assert_eq!((r.state, r.attempts), (ReceiptState::Pending, 1));

    let summary = step(s, t, run, v + 1, vec![call.uncertain()]).await;
    assert_eq!(
        (summary.status, summary.pending_actions),
        (RunStatus::RequiresAction, 1)
    );
    let r = only_receipt(s, t, run).await;
    assert_eq!((r.state, r.attempts), (ReceiptState::Uncertain, 1));

    let summary = step(s, t, run, v + 2, vec![call.resolved(Resolution::Retry)]).await;
    assert_eq!(
        (summary.status, summary.pending_actions),
        (RunStatus::Running, 0)
    );
    let r = only_receipt(s, t, run).await;
    assert_eq!((r.state, r.attempts), (ReceiptState::Pending, 1));

    // The engine records the next attempt's intent before it calls again.
    step(s, t, run, v + 3, vec![call.intent(ToolKind::Http)]).await;
    let r = only_receipt(s, t, run).await;
    assert_eq!((r.state, r.attempts), (ReceiptState::Pending, 2));

    step(s, t, run, v + 4, vec![call.result(ToolOutcome::Ok, false)]).await;
    let r = only_receipt(s, t, run).await;
    assert_eq!((r.state, r.attempts), (ReceiptState::Ok, 2));
    assert_eq!((r.created_version, r.updated_version), (v + 1, v + 5));
}

pub async fn a_result_without_an_intent_records_a_call_that_never_ran<S: Store>(s: &S) {
    let t = tenant(s).await;
    let (run, v) = run_in_turn(s, t).await;
    let call = Call::new(t);
    let summary = step(s, t, run, v, vec![call.result(ToolOutcome::Error, false)]).await;
    assert_eq!(
        (summary.status, summary.pending_actions),
        (RunStatus::Running, 0)
    );
    let r = only_receipt(s, t, run).await;
    assert_eq!((r.state, r.attempts, r.turn), (ReceiptState::Error, 0, 0));
    assert_eq!((r.tool_id, r.kind, r.effect), (None, None, None));
    assert_eq!(r.arguments, serde_json::Value::Null);
    assert_eq!(r.output.as_deref(), Some("deployed"));
    assert_eq!(
        r.error.as_ref().map(|e| e.code.as_str()),
        Some("tool_error")
    );
    assert_eq!((r.created_version, r.updated_version), (v + 1, v + 1));

    // Decisions about calls that have no row start none.
    let stray = Call::new(t);
    step(
        s,
        t,
        run,
        v + 1,
        vec![
            stray.approval_decided(ApprovalId::new(), true),
            stray.uncertain(),
            stray.resolved(Resolution::Skip),
        ],
    )
    .await;
    assert_eq!(receipts(s, t, run).await, vec![r]);
}

pub async fn a_client_tool_holds_the_run_until_the_client_answers<S: Store>(s: &S) {
    let t = tenant(s).await;
    let (run, v) = run_in_turn(s, t).await;
    let call = Call::new(t);

    let summary = step(s, t, run, v, vec![call.intent(ToolKind::Client)]).await;
    assert_eq!(
        (summary.status, summary.pending_actions),
        (RunStatus::RequiresAction, 1)
    );
    let r = only_receipt(s, t, run).await;
    assert_eq!(
        (r.state, r.attempts, r.kind),
        (ReceiptState::AwaitingClient, 1, Some(ToolKind::Client))
    );

    let summary = step(s, t, run, v + 1, vec![call.result(ToolOutcome::Ok, true)]).await;
    assert_eq!(
        (summary.status, summary.pending_actions),
        (RunStatus::Running, 0)
    );
    let r = only_receipt(s, t, run).await;
    assert_eq!(
        (r.state, r.output.as_deref()),
        (ReceiptState::Ok, Some("deployed"))
    );
}

pub async fn the_events_of_one_append_see_each_others_receipts<S: Store>(s: &S) {
    let t = tenant(s).await;
    let (run, v) = run_in_turn(s, t).await;
    let call = Call::new(t);
    let approval = ApprovalId::new();
    step(
        s,
        t,
        run,
        v,
        vec![
            call.approval_requested(approval),
            call.approval_decided(approval, true),
            call.intent(ToolKind::Http),
            call.result(ToolOutcome::Ok, false),
        ],
    )
    .await;
    let r = only_receipt(s, t, run).await;
    assert_eq!(
        (r.state, r.attempts, r.turn, r.kind),
        (ReceiptState::Ok, 1, 1, Some(ToolKind::Http))
    );
    assert_eq!(r.approval_id, Some(approval));
    assert_eq!((r.created_version, r.updated_version), (v + 1, v + 4));
}

pub async fn receipts_list_in_the_order_they_were_created<S: Store>(s: &S) {
    let t = tenant(s).await;
    let (run, v) = run_in_turn(s, t).await;
    let id = |n: u128| ReceiptId(uuid::Uuid::from_u128(n));
    let (high, low, mid) = (
        Call::with_id(t, id(3)),
        Call::with_id(t, id(1)),
        Call::with_id(t, id(2)),
    );
    step(
        s,
        t,
        run,
        v,
        vec![high.intent(ToolKind::Http), low.intent(ToolKind::Http)],
    )
    .await;
    step(s, t, run, v + 2, vec![mid.intent(ToolKind::Http)]).await;
    // A later change to the first call does not move it.
    step(s, t, run, v + 3, vec![high.result(ToolOutcome::Ok, false)]).await;
    let listed = receipts(s, t, run).await;
    let order: Vec<(ReceiptId, i64)> = listed.iter().map(|r| (r.id, r.created_version)).collect();
    assert_eq!(order, vec![(id(3), v + 1), (id(1), v + 2), (id(2), v + 3)]);
    assert_eq!(listed[0].state, ReceiptState::Ok);

    let (empty, _) = run_in_turn(s, t).await;
    assert!(receipts(s, t, empty).await.is_empty());
    assert!(receipts(s, t, RunId::new()).await.is_empty());
}

pub async fn receipts_are_scoped_by_tenant<S: Store>(s: &S) {
    let (owner, other) = (tenant(s).await, tenant(s).await);
    let (run, v) = run_in_turn(s, owner).await;
    let call = Call::new(owner);
    step(s, owner, run, v, vec![call.intent(ToolKind::Http)]).await;
    assert!(receipts(s, other, run).await.is_empty());
    let foreign = s
        .append(
            other,
            request(
                run,
                v + 1,
                vec![Call::with_id(other, call.receipt).result(ToolOutcome::Ok, false)],
            ),
        )
        .await;
    assert!(matches!(foreign, Err(StoreError::NotFound)), "{foreign:?}");
    let r = only_receipt(s, owner, run).await;
    assert_eq!((r.state, r.updated_version), (ReceiptState::Pending, v + 1));
}

pub async fn an_unreadable_receipt_is_reported_and_blocks_its_call<S: Store>(s: &S) {
    let t = tenant(s).await;
    let (run, v) = run_in_turn(s, t).await;
    let call = Call::new(t);
    step(s, t, run, v, vec![call.intent(ToolKind::Http)]).await;
    s.overwrite_receipt_body(
        t,
        run,
        call.receipt,
        json!({ "written_by": "a newer build" }),
    )
    .await;

    match s.list_receipts(t, run).await {
        Err(StoreError::Unreadable(msg)) => {
            assert!(msg.contains(&run.to_string()), "{msg}");
            assert!(msg.contains(&call.receipt.to_string()), "{msg}");
        }
        other => panic!("expected Unreadable, got {other:?}"),
    }
    let blocked = s
        .append(
            t,
            request(run, v + 1, vec![call.result(ToolOutcome::Ok, false)]),
        )
        .await;
    assert!(
        matches!(blocked, Err(StoreError::Unreadable(_))),
        "{blocked:?}"
    );
    assert_eq!(all_events(s, t, run).await.len() as i64, v + 1);
    // Events about other things still land.
    append_ok(
        s,
        t,
        request(run, v + 1, vec![message(t, MessageRole::User, "hi")]),
    )
    .await;
}

pub async fn a_model_reply_with_content_adds_an_assistant_message<S: Store>(s: &S) {
    let t = tenant(s).await;
    let (run, v) = run_in_turn(s, t).await;
    let (reply_id, reply) = model_completed(t, Some("hello there"));
    let (_, tools_only) = model_completed(t, None);
    let (_, empty) = model_completed(t, Some(""));
    let summary = step(s, t, run, v, vec![tools_only, reply, empty]).await;
    assert_eq!(summary.message_count, 2);

    let messages = s.list_messages(t, run, 0, 100).await.expect("messages");
    assert_eq!(messages.len(), 2);
    let m = &messages[1];
    assert_eq!((m.id, m.run_id, m.seq), (reply_id, run, 2));
    assert_eq!(
        (m.role, m.content.as_str()),
        (MessageRole::Assistant, "hello there")
    );
    assert_eq!(m.version, v + 2);
    let stored = all_events(s, t, run).await;
    assert_eq!(m.created_at, stored[m.version as usize - 1].recorded_at);

    // An ended run counts no more messages, so it gets no more rows.
    let end = event(t, RunEvent::RunCompleted(RunCompleted {}));
    let (_, late) = model_completed(t, Some("too late"));
    let summary = step(s, t, run, v + 3, vec![end, late]).await;
    assert_eq!(summary.message_count, 2);
    assert_eq!(
        s.list_messages(t, run, 0, 100)
            .await
            .expect("messages")
            .len(),
        2
    );
}

/// The installation's counts for `/metrics` see every tenant's runs (final ones left out)
/// and uncertain calls.
pub async fn the_installation_counts_cover_every_tenant<S: Store + StatsStore>(s: &S) {
    assert_eq!(s.active_runs_by_status().await.expect("counts"), []);
    assert_eq!(s.uncertain_receipts().await.expect("uncertain"), 0);
    let (a, b) = (tenant(s).await, tenant(s).await);
    let (held, v) = run_in_turn(s, a).await;
    let call = Call::new(a);
    step(s, a, held, v, vec![call.intent(ToolKind::Http)]).await;
    step(s, a, held, v + 1, vec![call.uncertain()]).await;
    let other = new_run(s, b).await;
    let other = s.get_run(b, other).await.expect("get").expect("run").status;
    assert_ne!(other, RunStatus::RequiresAction);
    let mut counts = s.active_runs_by_status().await.expect("counts");
    counts.sort_by_key(|(status, _)| status.as_str());
    let mut expected = vec![(RunStatus::RequiresAction, 1), (other, 1)];
    expected.sort_by_key(|(status, _)| status.as_str());
    assert_eq!(counts, expected);
    assert_eq!(s.uncertain_receipts().await.expect("uncertain"), 1);
}
