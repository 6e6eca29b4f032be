//! Test support for the given/when/then tests of the engine's decisions: tools and
//! agents as plain data, the events of a turn, and a run folded from them by both the
//! runs projection and the engine's state.

use crate::agent::TurnContext;
use crate::provider::ScriptedProvider;
use crate::state::RunState;
use baton_core::model::{Agent, AgentLimits, ProviderSpec, RunSummary, Tool, ToolKindSpec};
use baton_core::{AgentId, RunId, TenantId};
use baton_events::{
    ApprovalDecided, ApprovalId, ApprovalRequested, Envelope, EventId, EventMeta, MessageAppended,
    MessageId, MessageRole, ModelCompleted, NewEvent, ReceiptId, Resolution, RunCancelRequested,
    RunCreated, RunEvent, ToolCallRequest, ToolEffect, ToolId, ToolIntent, ToolOutcome,
    ToolResolved, ToolResult, ToolUncertain, TurnRequested, TurnStarted,
};
use chrono::{DateTime, TimeZone, Utc};
use serde_json::json;
use std::sync::Arc;

/// When every given event was recorded.
pub(crate) fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 1, 12, 0, 0)
        .single()
        .unwrap_or_default()
}

/// An `http` tool named `name` whose arguments are `{"q": string}`.
pub(crate) fn http_tool(name: &str, effect: ToolEffect) -> Tool {
    Tool {
        id: ToolId::new(),
        tenant: TenantId::new(),
        name: name.into(),
        description: format!("the {name} tool"),
        input_schema: json!({
            "type": "object",
            "properties": {"q": {"type": "string"}},
            "required": ["q"],
        }),
        effect,
        idempotent: false,
        requires_approval: false,
        timeout_ms: 1_000,
        kind: ToolKindSpec::Http {
            url: format!("http://127.0.0.1:9/{name}"),
            secret_headers: Vec::new(),
        },
        created_at: t0(),
        updated_at: t0(),
        archived_at: None,
        version: 1,
    }
}

pub(crate) fn read(name: &str) -> Tool {
    http_tool(name, ToolEffect::Read)
}

pub(crate) fn mutation(name: &str) -> Tool {
    http_tool(name, ToolEffect::Mutation)
}

pub(crate) fn idempotent(mut tool: Tool) -> Tool {
    tool.idempotent = true;
    tool
}

pub(crate) fn needing_approval(mut tool: Tool) -> Tool {
    tool.requires_approval = true;
    tool
}

/// A `client` tool: the API client submits its output.
pub(crate) fn client(name: &str) -> Tool {
    Tool {
        kind: ToolKindSpec::Client,
        ..read(name)
    }
}

/// The intent of call `call_id` of `tool`, as the driver records it.
pub(crate) fn intent(call_id: &str, tool: &Tool) -> ToolIntent {
    let receipt = baton_events::ReceiptId::new();
    ToolIntent {
        receipt_id: receipt,
        turn: 1,
        call_id: call_id.into(),
        tool_id: tool.id,
        tool: tool.name.clone(),
        kind: tool.kind(),
        effect: tool.effect,
        idempotent: tool.idempotent,
        arguments: json!({"q": "x"}),
        idempotency_key: receipt.to_string(),
    }
}

/// The context of an agent with `tools` and `limits` for turn 1, whose provider is never
/// asked.
pub(crate) fn agent(tools: &[Tool], limits: AgentLimits) -> TurnContext {
    let agent = Agent {
        id: AgentId::new(),
        tenant: TenantId::new(),
        name: "a".into(),
        instructions: String::new(),
        provider: ProviderSpec::Scripted {
            replies: Vec::new(),
        },
        tools: tools.iter().map(|t| t.id).collect(),
        limits,
        version: 1,
        created_at: t0(),
        updated_at: t0(),
        archived_at: None,
    };
    let egress = baton_egress::Egress::new(baton_core::egress::EgressPolicy::local())
        .expect("the client")
        .for_tenant(Vec::new());
    TurnContext::new(
        1,
        Arc::new(agent),
        tools.to_vec(),
        Arc::new(ScriptedProvider::new(Vec::new())),
        egress,
    )
}

/// A run whose first turn was asked for: created, a user message, `turn.requested`.
pub(crate) fn turn_requested() -> Vec<RunEvent> {
    let message = MessageId::new();
    vec![
        RunEvent::RunCreated(RunCreated {
            agent_id: AgentId::new(),
            agent_version: 1,
            title: None,
            metadata: Default::default(),
            tool_versions: Default::default(),
            parent: None,
        }),
        RunEvent::MessageAppended(MessageAppended {
            message_id: message,
            role: MessageRole::User,
            content: "hi".into(),
            queued: false,
        }),
        RunEvent::TurnRequested(TurnRequested {
            turn: 1,
            message_id: message,
        }),
    ]
}

/// A run whose first turn started.
pub(crate) fn turn_started() -> Vec<RunEvent> {
    let mut events = turn_requested();
    events.push(RunEvent::TurnStarted(TurnStarted { turn: 1 }));
    events
}

/// Model step `step` asks for `calls` (call id, tool, raw arguments).
pub(crate) fn model_asks_raw(step: u32, calls: &[(&str, &str, &str)]) -> RunEvent {
    RunEvent::ModelCompleted(ModelCompleted {
        turn: 1,
        step,
        message_id: MessageId::new(),
        content: None,
        reasoning: None,
        tool_calls: calls
            .iter()
            .map(|(id, name, arguments)| ToolCallRequest {
                id: (*id).into(),
                name: (*name).into(),
                arguments: (*arguments).into(),
            })
            .collect(),
        finish_reason: "tool_calls".into(),
        usage: None,
        model: None,
    })
}

/// Model step `step` asks for `calls` (call id, tool) with arguments that match.
pub(crate) fn model_asks(step: u32, calls: &[(&str, &Tool)]) -> RunEvent {
    let raw: Vec<(&str, &str, &str)> = calls
        .iter()
        .map(|(id, tool)| (*id, tool.name.as_str(), r#"{"q": "x"}"#))
        .collect();
    model_asks_raw(step, &raw)
}

/// The result of the call `intent` records.
pub(crate) fn result_of(intent: &ToolIntent) -> ToolResult {
    ToolResult {
        receipt_id: intent.receipt_id,
        call_id: intent.call_id.clone(),
        tool: intent.tool.clone(),
        outcome: ToolOutcome::Ok,
        output: "done".into(),
        error: None,
        duration_ms: 1,
        truncated: false,
        from_client: intent.kind == baton_events::ToolKind::Client,
        attempts: None,
        delegated_run: None,
    }
}

/// A member is asked to approve call `call_id` of `tool`; returns the receipt too.
pub(crate) fn approval_asked(call_id: &str, tool: &Tool) -> (ReceiptId, RunEvent) {
    let receipt = ReceiptId::new();
    let event = RunEvent::ApprovalRequested(ApprovalRequested {
        approval_id: ApprovalId::new(),
        receipt_id: receipt,
        turn: 1,
        call_id: call_id.into(),
        tool_id: tool.id,
        tool: tool.name.clone(),
        effect: tool.effect,
        arguments: json!({"q": "x"}),
    });
    (receipt, event)
}

pub(crate) fn approval_decided(
    receipt: ReceiptId,
    approved: bool,
    reason: Option<&str>,
) -> RunEvent {
    RunEvent::ApprovalDecided(ApprovalDecided {
        approval_id: ApprovalId::new(),
        receipt_id: receipt,
        approved,
        reason: reason.map(Into::into),
    })
}

pub(crate) fn uncertain(receipt: ReceiptId) -> RunEvent {
    RunEvent::ToolUncertain(ToolUncertain {
        receipt_id: receipt,
        reason: "stopped".into(),
    })
}

pub(crate) fn resolved(receipt: ReceiptId, resolution: Resolution) -> RunEvent {
    RunEvent::ToolResolved(ToolResolved {
        receipt_id: receipt,
        resolution,
        output: (resolution == Resolution::Complete).then(|| "supplied".into()),
        turn: None,
    })
}

pub(crate) fn cancel_requested() -> RunEvent {
    RunEvent::RunCancelRequested(RunCancelRequested { reason: None })
}

/// `events` as stored: versions from 1, recorded at [`t0`].
/// A user message posted with `strategy: interrupt` (or `rollback`) while the turn runs.
pub(crate) fn interrupting(content: &str, rollback: bool) -> RunEvent {
    RunEvent::MessageQueued(baton_events::MessageQueued {
        message_id: MessageId::new(),
        content: content.into(),
        interrupts: Some(if rollback {
            baton_events::TurnInterrupt::Rollback
        } else {
            baton_events::TurnInterrupt::Interrupt
        }),
    })
}

pub(crate) fn stored(events: &[RunEvent]) -> Vec<Envelope> {
    let tenant = TenantId::new();
    let run = RunId::new();
    events
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let new = NewEvent::new(e.clone(), EventMeta::new(tenant));
            Envelope {
                id: EventId::new(),
                stream: run,
                version: i as i64 + 1,
                position: i as i64 + 1,
                event_type: new.event_type().into(),
                schema: e.schema(),
                data: new.data(),
                meta: new.meta,
                recorded_at: t0(),
            }
        })
        .collect()
}

/// The runs projection after `events`.
pub(crate) fn summary(events: &[RunEvent]) -> RunSummary {
    let mut run = RunSummary::empty(TenantId::new(), RunId::new(), t0());
    for (i, e) in events.iter().enumerate() {
        run.apply(e, i as i64 + 1, t0());
    }
    run
}

/// The engine's state after `events`.
pub(crate) fn state(events: &[RunEvent]) -> RunState {
    let mut state = RunState::default();
    if let Err(reason) = state.fold(&stored(events)) {
        panic!("the given events do not fold: {reason}");
    }
    state
}
