//! The receipts projection: one row per tool call, folded from the call's events
//! (`approval.*`, `tool.*`) by [`Receipt::apply`], the only receipt logic; the store
//! adapters call it inside the append transaction.

use baton_events::{
    ApprovalId, ErrorInfo, ReceiptId, Resolution, RunEvent, RunId, ToolEffect, ToolId, ToolKind,
    ToolOutcome,
};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Where a tool call stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReceiptState {
    /// Waiting for a member to approve or deny the call.
    AwaitingApproval,
    /// Approved; about to run.
    Approved,
    /// Intent recorded: the call is running (or was, when its replica stopped).
    Pending,
    /// Waiting for the API client to submit the output of a `client` tool.
    AwaitingClient,
    /// Its replica stopped mid-call and the call must not be repeated blindly: a member
    /// resolves it.
    Uncertain,
    Ok,
    Error,
    Cancelled,
    Denied,
    Skipped,
    /// A member supplied the output.
    Completed,
}

impl ReceiptState {
    pub const ALL: [ReceiptState; 11] = [
        Self::AwaitingApproval,
        Self::Approved,
        Self::Pending,
        Self::AwaitingClient,
        Self::Uncertain,
        Self::Ok,
        Self::Error,
        Self::Cancelled,
        Self::Denied,
        Self::Skipped,
        Self::Completed,
    ];

    pub fn as_str(&self) -> &'static str {
        match self {
            Self::AwaitingApproval => "awaiting_approval",
            Self::Approved => "approved",
            Self::Pending => "pending",
            Self::AwaitingClient => "awaiting_client",
            Self::Uncertain => "uncertain",
            Self::Ok => "ok",
            Self::Error => "error",
            Self::Cancelled => "cancelled",
            Self::Denied => "denied",
            Self::Skipped => "skipped",
            Self::Completed => "completed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// The call has an output the model will see (or the run ended around it).
    pub fn is_settled(&self) -> bool {
        matches!(
            self,
            Self::Ok
                | Self::Error
                | Self::Cancelled
                | Self::Denied
                | Self::Skipped
                | Self::Completed
        )
    }
}

/// One tool call of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Receipt {
    pub id: ReceiptId,
    pub run_id: RunId,
    pub turn: i64,
    /// The model's id for the call.
    pub call_id: String,
    pub tool: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_id: Option<ToolId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<ToolKind>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub effect: Option<ToolEffect>,
    pub idempotent: bool,
    pub arguments: serde_json::Value,
    pub state: ReceiptState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<ApprovalId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorInfo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// How many times the call was started (intent, or a retry after uncertainty).
    pub attempts: u32,
    /// Stream version of the event that created the row, then of the latest change.
    pub created_version: i64,
    pub updated_version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl Receipt {
    /// The receipt an event is about, if any.
    pub fn id_of(event: &RunEvent) -> Option<ReceiptId> {
        match event {
            RunEvent::ApprovalRequested(e) => Some(e.receipt_id),
            RunEvent::ApprovalDecided(e) => Some(e.receipt_id),
            RunEvent::ToolIntent(e) => Some(e.receipt_id),
            RunEvent::ToolResult(e) => Some(e.receipt_id),
            RunEvent::ToolUncertain(e) => Some(e.receipt_id),
            RunEvent::ToolResolved(e) => Some(e.receipt_id),
            _ => None,
        }
    }

    /// The row after `event` (appended as `version` of `run`), from the row before it
    /// (`None` when the call has no row yet). Returns `None` when the event does not
    /// concern receipts or names a call that has no row and cannot start one.
    pub fn apply(
        before: Option<Receipt>,
        run: RunId,
        event: &RunEvent,
        version: i64,
        at: DateTime<Utc>,
    ) -> Option<Receipt> {
        let fresh = |receipt_id, turn, call_id: &str, tool: &str, arguments, state| Receipt {
            id: receipt_id,
            run_id: run,
            turn,
            call_id: call_id.to_string(),
            tool: tool.to_string(),
            tool_id: None,
            kind: None,
            effect: None,
            idempotent: false,
            arguments,
            state,
            approval_id: None,
            output: None,
            error: None,
            duration_ms: None,
            attempts: 0,
            created_version: version,
            updated_version: version,
            created_at: at,
            updated_at: at,
        };
        let mut r = match (before, event) {
            (_, RunEvent::ApprovalRequested(e)) => {
                let mut r = fresh(
                    e.receipt_id,
                    e.turn,
                    &e.call_id,
                    &e.tool,
                    e.arguments.clone(),
                    ReceiptState::AwaitingApproval,
                );
                r.tool_id = Some(e.tool_id);
                r.effect = Some(e.effect);
                r.approval_id = Some(e.approval_id);
                r
            }
            (before, RunEvent::ToolIntent(e)) => {
                let mut r = before.unwrap_or_else(|| {
                    fresh(
                        e.receipt_id,
                        e.turn,
                        &e.call_id,
                        &e.tool,
                        e.arguments.clone(),
                        ReceiptState::Pending,
                    )
                });
                r.tool_id = Some(e.tool_id);
                r.kind = Some(e.kind);
                r.effect = Some(e.effect);
                r.idempotent = e.idempotent;
                r.arguments = e.arguments.clone();
                r.attempts += 1;
                r.state = match e.kind {
                    ToolKind::Http | ToolKind::Delegate | ToolKind::Mcp | ToolKind::Workspace => {
                        ReceiptState::Pending
                    }
                    ToolKind::Client => ReceiptState::AwaitingClient,
                };
                r
            }
            (before, RunEvent::ToolResult(e)) => {
                let mut r = before.unwrap_or_else(|| {
                    fresh(
                        e.receipt_id,
                        0,
                        &e.call_id,
                        &e.tool,
                        serde_json::Value::Null,
                        ReceiptState::Error,
                    )
                });
                r.state = match e.outcome {
                    ToolOutcome::Ok => ReceiptState::Ok,
                    // A denied call's result tells the model so; the state stays.
                    ToolOutcome::Error if r.state == ReceiptState::Denied => ReceiptState::Denied,
                    ToolOutcome::Error => ReceiptState::Error,
                    ToolOutcome::Cancelled => ReceiptState::Cancelled,
                };
                r.output = Some(e.output.clone());
                r.error = e.error.clone();
                r.duration_ms = Some(e.duration_ms);
                // The intent counted one request; the result says how many were sent.
                if let Some(sent) = e.attempts {
                    r.attempts = r.attempts.saturating_add(sent).saturating_sub(1);
                }
                r
            }
            (Some(mut r), RunEvent::ApprovalDecided(e)) => {
                r.state = if e.approved {
                    ReceiptState::Approved
                } else {
                    ReceiptState::Denied
                };
                r
            }
            (Some(mut r), RunEvent::ToolUncertain(_)) => {
                r.state = ReceiptState::Uncertain;
                r
            }
            (Some(mut r), RunEvent::ToolResolved(e)) => {
                match e.resolution {
                    // The engine records a new intent (the next attempt) before it
                    // calls again.
                    Resolution::Retry => r.state = ReceiptState::Pending,
                    Resolution::Skip => r.state = ReceiptState::Skipped,
                    Resolution::Complete => {
                        r.state = ReceiptState::Completed;
                        r.output = e.output.clone();
                    }
                }
                r
            }
            _ => return None,
        };
        r.updated_version = version;
        r.updated_at = at;
        Some(r)
    }
}
