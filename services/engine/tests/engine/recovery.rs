//! The recovery rule (docs/architecture.md, "Tools and receipts") on streams that stop at each point of a turn: a
//! replica ("dead") took the run's lease, wrote part of a turn and stopped; its lease
//! expires and this engine adopts the run. The tool endpoint's counters prove that no
//! mutation ran twice without a member asking for it.

use crate::tools::{calls, http_tool, says};
use crate::world::{World, world};
use baton_core::model::{AgentLimits, ReceiptState, RunStatus};
use baton_core::ports::{AppendRequest, Clock, Fence, LeaseStore, SystemClock};
use baton_core::runs::ReceiptResolution;
use baton_core::{RunId, ToolId};
use baton_events::{
    EventMeta, LeaseAcquired, LeaseReason, MessageId, ModelCompleted, NewEvent, ReceiptId,
    Resolution, RunEvent, ToolCallRequest, ToolEffect, ToolIntent, ToolKind, ToolOutcome,
    ToolResult, TurnStarted,
};
use baton_testkit::ToolServer;
use serde_json::json;
use std::time::Duration;

/// Where the stopped replica got to in the turn.
#[derive(Debug, Clone, Copy, PartialEq)]
enum StoppedAt {
    /// The model asked for the call; no intent yet.
    BeforeIntent,
    /// The intent is recorded and the endpoint was called; no result.
    AfterIntent,
    /// The result is recorded; the model was not asked again.
    AfterResult,
}

struct Setup {
    w: World,
    server: ToolServer,
    run: RunId,
    receipt: ReceiptId,
}

/// A run of an agent whose script calls `tool` once and then answers "done", left by
/// a replica that stopped at `at`; then this engine adopts it.
async fn stopped(effect: ToolEffect, idempotent: bool, at: StoppedAt) -> Setup {
    stopped_with(effect, idempotent, at, AgentLimits::default()).await
}

async fn stopped_with(
    effect: ToolEffect,
    idempotent: bool,
    at: StoppedAt,
    limits: AgentLimits,
) -> Setup {
    let w = world().await;
    let server = ToolServer::start().await;
    let mut new = http_tool(&server, "act", effect);
    new.idempotent = idempotent;
    let tool = w.tool(new).await;
    let agent = w
        .scripted_agent(vec![calls(&["act"]), says("done")], vec![tool], limits)
        .await;
    let run = w.start(&w.unwoken(), agent, "go").await;
    let receipt = ReceiptId::new();
    write_as_dead_replica(&w, &server, run, tool, effect, idempotent, receipt, at).await;
    // The dead replica's lease (1 ms) has expired: this engine adopts the run.
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(w.engine.run_once().await.expect("adopt"), 1);
    Setup {
        w,
        server,
        run,
        receipt,
    }
}

#[allow(clippy::too_many_arguments)]
async fn write_as_dead_replica(
    w: &World,
    server: &ToolServer,
    run: RunId,
    tool: ToolId,
    effect: ToolEffect,
    idempotent: bool,
    receipt: ReceiptId,
    at: StoppedAt,
) {
    let tenant = w.owner.tenant;
    let now = SystemClock.now();
    let claimed = w
        .store
        .claim_runs(
            "dead/1",
            Duration::from_millis(1),
            now,
            1,
            Some((tenant, run)),
        )
        .await
        .expect("claim");
    let epoch = claimed.first().expect("claimed the run").epoch;
    let intent = ToolIntent {
        receipt_id: receipt,
        turn: 1,
        call_id: "call_1_1".into(),
        tool_id: tool,
        tool: "act".into(),
        kind: ToolKind::Http,
        effect,
        idempotent,
        arguments: json!({"q": "act"}),
        idempotency_key: receipt.to_string(),
    };
    let mut events = vec![
        RunEvent::LeaseAcquired(LeaseAcquired {
            owner: "dead/1".into(),
            epoch,
            reason: LeaseReason::New,
        }),
        RunEvent::TurnStarted(TurnStarted { turn: 1 }),
        RunEvent::ModelCompleted(ModelCompleted {
            turn: 1,
            step: 1,
            message_id: MessageId::new(),
            content: None,
            reasoning: None,
            tool_calls: vec![ToolCallRequest {
                id: "call_1_1".into(),
                name: "act".into(),
                arguments: r#"{"q":"act"}"#.into(),
            }],
            finish_reason: "tool_calls".into(),
            usage: None,
            model: Some("scripted".into()),
        }),
    ];
    if at != StoppedAt::BeforeIntent {
        events.push(RunEvent::ToolIntent(intent));
        // What the dead replica did after its intent committed: it made the call.
        let resp = baton_testkit::http_client()
            .post(server.url("act"))
            .header("Idempotency-Key", receipt.to_string())
            .json(&json!({"q": "act"}))
            .send()
            .await
            .expect("call the tool as the dead replica");
        assert!(resp.status().is_success());
    }
    if at == StoppedAt::AfterResult {
        events.push(RunEvent::ToolResult(ToolResult {
            receipt_id: receipt,
            call_id: "call_1_1".into(),
            tool: "act".into(),
            outcome: ToolOutcome::Ok,
            output: "acted".into(),
            error: None,
            duration_ms: 3,
            truncated: false,
            from_client: false,
            attempts: None,
            delegated_run: None,
        }));
    }
    let version = w.get(run).await.version;
    let mut meta = EventMeta::new(tenant);
    meta.actor = Some("engine".into());
    let mut req = AppendRequest::new(
        run,
        version,
        events
            .into_iter()
            .map(|e| NewEvent::new(e, meta.clone()))
            .collect(),
        now,
    );
    req.fence = Some(Fence {
        owner: "dead/1".into(),
        epoch,
    });
    w.runs
        .recorder
        .append(tenant, req)
        .await
        .expect("dead replica's append");
}

impl Setup {
    /// The idempotency keys of the calls the endpoint answered, in order.
    fn keys(&self) -> Vec<Option<String>> {
        self.server
            .received("act")
            .into_iter()
            .map(|r| r.idempotency_key)
            .collect()
    }
}

async fn answered(s: &Setup) {
    let r =
        s.w.wait_for(s.run, "answered", |r| r.status == RunStatus::Waiting)
            .await;
    assert_eq!(r.last_error, None);
}

#[tokio::test]
async fn stopped_before_the_intent_the_call_is_made_once() {
    let s = stopped(ToolEffect::Mutation, false, StoppedAt::BeforeIntent).await;
    answered(&s).await;
    assert_eq!(s.server.calls("act"), 1);
    assert_eq!(s.w.receipts(s.run).await[0].state, ReceiptState::Ok);
}

#[tokio::test]
async fn stopped_after_a_mutations_intent_the_call_is_held_until_a_member_completes_it() {
    let s = stopped(ToolEffect::Mutation, false, StoppedAt::AfterIntent).await;
    let r =
        s.w.wait_for(s.run, "held", |r| r.status == RunStatus::RequiresAction)
            .await;
    assert_eq!(r.pending_actions, 1);
    let held = s.w.receipts(s.run).await.remove(0);
    assert_eq!((held.id, held.state), (s.receipt, ReceiptState::Uncertain));
    assert_eq!(s.server.calls("act"), 1, "the engine did not call again");
    let resolved =
        s.w.runs
            .resolve_receipt(
                &s.w.owner,
                s.run,
                s.receipt,
                ReceiptResolution {
                    resolution: Resolution::Complete,
                    output: Some("it went through".into()),
                },
            )
            .await
            .expect("resolve");
    assert_eq!(resolved.state, ReceiptState::Completed);
    answered(&s).await;
    assert_eq!(s.server.calls("act"), 1, "no mutation ran twice");
}

#[tokio::test]
async fn a_member_may_retry_a_held_mutation_with_the_same_idempotency_key() {
    let s = stopped(ToolEffect::Mutation, false, StoppedAt::AfterIntent).await;
    s.w.wait_for(s.run, "held", |r| r.status == RunStatus::RequiresAction)
        .await;
    s.w.runs
        .resolve_receipt(
            &s.w.owner,
            s.run,
            s.receipt,
            ReceiptResolution {
                resolution: Resolution::Retry,
                output: None,
            },
        )
        .await
        .expect("retry");
    answered(&s).await;
    let keys = s.keys();
    let key = Some(s.receipt.to_string());
    assert_eq!(keys, [key.clone(), key], "the retry carries the same key");
    let r = s.w.receipts(s.run).await.remove(0);
    assert_eq!((r.state, r.attempts), (ReceiptState::Ok, 2));
}

#[tokio::test]
async fn stopped_after_a_reads_intent_the_read_runs_again() {
    let s = stopped(ToolEffect::Read, false, StoppedAt::AfterIntent).await;
    answered(&s).await;
    assert_eq!(s.server.calls("act"), 2, "reads are safe to repeat");
    assert_eq!(s.w.receipts(s.run).await[0].state, ReceiptState::Ok);
}

#[tokio::test]
async fn stopped_after_an_idempotent_mutations_intent_it_runs_again_under_its_key() {
    let s = stopped(ToolEffect::Mutation, true, StoppedAt::AfterIntent).await;
    answered(&s).await;
    let keys = s.keys();
    let key = Some(s.receipt.to_string());
    assert_eq!(keys, [key.clone(), key]);
}

#[tokio::test]
async fn stopped_after_the_result_the_turn_goes_on_without_calling_again() {
    let s = stopped(ToolEffect::Mutation, false, StoppedAt::AfterResult).await;
    answered(&s).await;
    assert_eq!(s.server.calls("act"), 1);
    let types = s.w.settled_types(s.run).await;
    let tail: Vec<&str> = types.iter().rev().take(4).map(String::as_str).collect();
    assert_eq!(
        tail,
        [
            "checkpoint.saved",
            "turn.completed",
            "model.completed",
            "lease.acquired"
        ]
    );
}

#[tokio::test]
async fn stopped_after_the_final_assistant_message_nothing_runs_again() {
    let s = stopped(ToolEffect::Mutation, false, StoppedAt::AfterResult).await;
    answered(&s).await;
    s.w.settled_types(s.run).await;
    // A second adoption of the settled run finds nothing to do.
    assert_eq!(s.w.engine.run_once().await.expect("sweep"), 0);
    let before = s.w.types(s.run).await.len();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(s.w.types(s.run).await.len(), before);
    assert_eq!(s.server.calls("act"), 1);
}

#[tokio::test]
async fn a_turn_that_times_out_on_adoption_still_holds_its_interrupted_mutation() {
    let limits = AgentLimits {
        turn_timeout_ms: 1,
        ..AgentLimits::default()
    };
    let s = stopped_with(ToolEffect::Mutation, false, StoppedAt::AfterIntent, limits).await;
    let r =
        s.w.wait_for(s.run, "failed its turn", |r| r.last_error.is_some())
            .await;
    assert_eq!(
        r.last_error.map(|e| e.code).as_deref(),
        Some("turn_timeout")
    );
    let held = s.w.receipts(s.run).await.remove(0);
    assert_eq!(held.state, ReceiptState::Uncertain, "not left pending");
    assert_eq!(s.server.calls("act"), 1);
}
