//! Test support for the given/when/then tests of the engine's decisions: tools and
//! agents as plain data, the events of a turn, and a run folded from them.

use baton_core::TenantId;
use baton_core::model::{Tool, ToolKindSpec};
use baton_events::{ToolEffect, ToolId, ToolIntent};
use chrono::{DateTime, TimeZone, Utc};
use serde_json::json;

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
