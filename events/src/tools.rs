//! Payloads of the engine's events within a turn: model steps, tool receipts,
//! approvals and checkpoints (schema version 1).
//!
//! A tool call's life, keyed by its receipt id: `tool.intent` is committed before the
//! call is made and `tool.result` after it; an intent found without a result when a
//! replica (re)starts driving the run is re-run (reads, idempotent tools) or held as
//! `tool.uncertain` until a member resolves it (`tool.resolved`). A call that never
//! ran (unknown tool, bad arguments, a limit, a denial) has a `tool.result` alone.

use crate::ids::{ApprovalId, CheckpointId, MessageId, ReceiptId, ToolId};
use crate::payloads::ErrorInfo;
use serde::{Deserialize, Serialize};

/// A tool call as the model made it (OpenAI tools schema).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ToolCallRequest {
    /// The model's id for the call; tool messages answer it.
    pub id: String,
    pub name: String,
    /// The arguments as the model wrote them: JSON text, possibly invalid.
    pub arguments: String,
}

/// Tokens one model call used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
}

/// One model step answered: the assistant's message, durable as a whole (its token
/// deltas were ephemeral).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ModelCompleted {
    pub turn: i64,
    /// 1-based model call within the turn.
    pub step: u32,
    pub message_id: MessageId,
    /// The answer: what the conversation keeps and the model is sent back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// The model's reasoning, kept apart from the answer: never part of the message nor
    /// sent back to the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallRequest>,
    pub finish_reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// Whether a tool changes anything outside Baton.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToolEffect {
    Read,
    Mutation,
}

/// Who carries a tool call out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToolKind {
    /// Baton POSTs the arguments to the tenant's endpoint.
    Http,
    /// The API client runs it and submits the output.
    Client,
    /// Baton starts a child run of another agent and waits for its answer.
    Delegate,
    /// Baton calls a tool of a Model Context Protocol server.
    Mcp,
    /// Baton reads or writes the run's workspace, or runs a command in a sandbox over it.
    Workspace,
}

/// About to call a tool: committed before the call is made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ToolIntent {
    pub receipt_id: ReceiptId,
    pub turn: i64,
    pub call_id: String,
    pub tool_id: ToolId,
    pub tool: String,
    pub kind: ToolKind,
    pub effect: ToolEffect,
    pub idempotent: bool,
    pub arguments: serde_json::Value,
    /// Sent with the call so the endpoint can recognise a repeat.
    pub idempotency_key: String,
}

/// How a tool call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToolOutcome {
    Ok,
    Error,
    /// The run was cancelled while a read was in flight.
    Cancelled,
}

/// A tool call's result: the output the model sees next.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ToolResult {
    pub receipt_id: ReceiptId,
    pub call_id: String,
    pub tool: String,
    pub outcome: ToolOutcome,
    /// What the model is told (an error's message for a failed call).
    pub output: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorInfo>,
    pub duration_ms: u64,
    /// The output was cut to the size cap.
    #[serde(default)]
    pub truncated: bool,
    /// Submitted by the API client for a `client` tool.
    #[serde(default)]
    pub from_client: bool,
    /// Requests sent to the tool for this result (retries of a call safe to repeat
    /// included); absent in results written before it was counted, and for results no
    /// request was sent for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
    /// For a `delegate` tool: the run the call started, whose answer the output is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delegated_run: Option<crate::RunId>,
}

/// An intent without a result that must not be repeated blindly: the run waits in
/// `requires_action` until a member resolves it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ToolUncertain {
    pub receipt_id: ReceiptId,
    pub reason: String,
}

/// What a member decided about an uncertain call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Resolution {
    /// Call the tool again (with the same idempotency key).
    Retry,
    /// Tell the model the call was skipped.
    Skip,
    /// The member supplies the call's output.
    Complete,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ToolResolved {
    pub receipt_id: ReceiptId,
    pub resolution: Resolution,
    /// The output given with `complete`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// The turn the call belongs to (absent in events recorded before it was written): a
    /// call left uncertain by a turn that ended can be resolved during a later turn,
    /// which goes on waiting for what it waits for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<i64>,
}

/// A tool that requires approval waits for a member's decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ApprovalRequested {
    pub approval_id: ApprovalId,
    /// The receipt the call will have once approved.
    pub receipt_id: ReceiptId,
    pub turn: i64,
    pub call_id: String,
    pub tool_id: ToolId,
    pub tool: String,
    pub effect: ToolEffect,
    pub arguments: serde_json::Value,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ApprovalDecided {
    pub approval_id: ApprovalId,
    pub receipt_id: ReceiptId,
    pub approved: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// An encrypted snapshot of the engine's state was saved; rebuilding the run starts
/// from the newest valid one and the events after `through_version`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CheckpointSaved {
    pub checkpoint_id: CheckpointId,
    /// The snapshot holds the state after this stream version.
    pub through_version: i64,
    pub key_id: String,
    pub size: u64,
    /// Hex SHA-256 of the plaintext snapshot.
    pub sha256: String,
}

/// Ephemeral (bus only, never stored): a piece of a model reply as it streams, or, with
/// `progress`, a tool call's progress as its server reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessageDelta {
    pub turn: i64,
    pub step: u32,
    /// Grows when a broken stream is retried; show only the latest attempt's deltas.
    pub attempt: u32,
    pub content: String,
    /// A piece of the model's reasoning, not of its answer.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reasoning: bool,
    /// Not a piece of a reply but a tool call's progress (`content` is empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<ToolProgress>,
}

/// How far a running tool call has come, as the tool's server says (an MCP
/// `notifications/progress`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolProgress {
    pub receipt_id: ReceiptId,
    pub tool: String,
    pub progress: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}
