//! What clients send to the run use cases and what they answer: commands, results and
//! their size limits.

use crate::model::{Message, RunSummary};
use baton_events::{AgentId, ReceiptId, Resolution};
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
    /// A first user message: the run starts its first turn at once.
    pub message: Option<String>,
    pub request_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CreatedRun {
    pub run: RunSummary,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<Message>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct PostMessage {
    pub content: String,
    pub request_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PostedMessage {
    pub message: Message,
    /// The turn this message started.
    pub turn: i64,
}
