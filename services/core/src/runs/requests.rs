//! What clients send to the run use cases and what they answer: commands, results and
//! their size limits.

use crate::model::{Message, MessageStrategy, RunSummary};
use baton_events::{AgentId, MessageId, Metadata, ReceiptId, Resolution, RunId};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Longest message content, in characters.
pub const MAX_CONTENT_CHARS: usize = 200_000;
/// Longest run title (and cancel reason), in characters.
pub const MAX_TITLE_CHARS: usize = 200;
/// Longest client `request_id`, in characters.
pub const MAX_REQUEST_ID_CHARS: usize = 200;

/// Largest output a client or member may submit for one call.
pub const MAX_OUTPUT_CHARS: usize = 200_000;
/// Most outputs one submission may carry.
pub const MAX_OUTPUTS: usize = 128;

#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ApprovalDecision {
    pub approve: bool,
    #[serde(default)]
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolOutput {
    /// The receipt of a call in state `awaiting_client`.
    pub receipt_id: ReceiptId,
    pub output: String,
    /// The tool failed: the model is told the output is an error.
    #[serde(default)]
    pub is_error: bool,
}

#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReceiptResolution {
    pub resolution: Resolution,
    /// Required with `complete`: the call's output as the model will see it.
    #[serde(default)]
    pub output: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct CreateRun {
    pub agent_id: AgentId,
    pub title: Option<String>,
    /// The run's labels, checked against [`super::metadata::check`].
    #[serde(default, skip_serializing_if = "Metadata::is_empty")]
    pub metadata: Metadata,
    /// A first user message: the run starts its first turn at once.
    pub message: Option<String>,
    pub request_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CreatedRun {
    /// The run as created.
    pub run: RunSummary,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<Message>,
    /// With `wait`: the first turn, once it settled within the wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<TurnResult>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct PostMessage {
    pub content: String,
    pub request_id: Option<String>,
    /// What the message does if a turn is in progress; absent: the agent's
    /// `limits.message_strategy`. (Absent from the request's fingerprint when absent, so
    /// a retry of a request recorded before the field existed still matches.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<MessageStrategy>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PostedMessage {
    pub message: Message,
    /// The turn this message started.
    pub turn: i64,
    /// With `wait`: the turn, once it settled within the wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<TurnResult>,
}

/// A message posted while a turn was in progress, held in the run's queue: it starts a
/// turn of its own when the turns before it have settled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct QueuedMessage {
    pub message_id: MessageId,
    pub run_id: RunId,
    pub content: String,
    /// Its 1-based place in the run's queue when it was queued.
    pub position: i64,
    /// Version of its `message.queued` event in the run's stream.
    pub version: i64,
    pub queued_at: DateTime<Utc>,
    /// The run's messages when it was queued: taken, it comes after them.
    #[serde(skip)]
    pub after_seq: i64,
}

/// What posting a message did: started a turn, or queued the message behind the turn in
/// progress. Stored as the request's idempotency record (untagged: records written
/// before queues existed read as `Posted`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Posted {
    Turn(Box<PostedMessage>),
    Queued(QueuedMessage),
}

/// How a turn a client waited for stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TurnOutcome {
    /// The turn completed; `reply` is the model's answer.
    Completed,
    /// The turn failed; the run's `last_error` says why.
    Failed,
    /// The turn waits for an approval, a client tool's output or a decision on an
    /// uncertain call (see `GET /v1/runs/{run_id}/actions`).
    RequiresAction,
    /// The run was cancelled.
    Cancelled,
    /// A message posted with `strategy: interrupt` or `rollback` ended the turn early.
    Interrupted,
}

/// A settled turn, answered to a client that waited for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TurnResult {
    pub turn: i64,
    pub outcome: TurnOutcome,
    /// The run as it stood when the answer was made (at or after the settling event).
    pub run: RunSummary,
    /// The turn's last assistant message, if the model wrote one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reply: Option<Message>,
}
