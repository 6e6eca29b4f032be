//! Typed payloads of the run events, schema version 1 unless noted.
//!
//! `RunEvent` is serialized adjacently tagged (`{"type": .., "data": ..}`); the store keeps
//! `type` and `data` in separate columns. Add fields only as `Option` or with defaults.

use crate::ids::{AgentId, MessageId};
use crate::tools::*;
use serde::{Deserialize, Serialize};

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MessageRole {
    User,
    Assistant,
    Tool,
    System,
}

impl MessageRole {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Assistant => "assistant",
            Self::Tool => "tool",
            Self::System => "system",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "user" => Some(Self::User),
            "assistant" => Some(Self::Assistant),
            "tool" => Some(Self::Tool),
            "system" => Some(Self::System),
            _ => None,
        }
    }
}

/// A failure reported in an event: a stable code and a human message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ErrorInfo {
    pub code: String,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunCreated {
    pub agent_id: AgentId,
    /// The agent version the run started with; the run keeps using it.
    pub agent_version: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageAppended {
    pub message_id: MessageId,
    pub role: MessageRole,
    pub content: String,
}

/// A turn was asked for (by a user message); the engine will pick it up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnRequested {
    /// 1-based turn number within the run.
    pub turn: i64,
    /// The message that asked for the turn.
    pub message_id: MessageId,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnStarted {
    pub turn: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnCompleted {
    pub turn: i64,
    /// Why the model stopped (`stop`, `length`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnFailed {
    pub turn: i64,
    pub error: ErrorInfo,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunCancelRequested {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunCancelled {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct RunCompleted {}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunFailed {
    pub error: ErrorInfo,
}

/// Why a replica took a run's lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LeaseReason {
    /// The run had no owner (a new turn, or a command on an idle run).
    New,
    /// The previous owner's lease expired (it crashed, stalled or was cut off).
    Adopted,
    /// The previous owner released it while draining.
    Handoff,
}

/// A replica took the run's lease; its later engine events are fenced by `epoch`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseAcquired {
    /// The replica identity: configured name and boot id (`name/boot`).
    pub owner: String,
    /// The fencing token: increases with every acquisition of this run's lease.
    pub epoch: i64,
    pub reason: LeaseReason,
}

/// Why a replica gave a lease up while the run still had work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReleaseReason {
    /// The replica is shutting down and hands the run to another one.
    Drained,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseReleased {
    pub owner: String,
    pub epoch: i64,
    pub reason: ReleaseReason,
}

/// Every durable run event this build knows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", content = "data")]
pub enum RunEvent {
    #[serde(rename = "run.created")]
    RunCreated(RunCreated),
    #[serde(rename = "message.appended")]
    MessageAppended(MessageAppended),
    #[serde(rename = "turn.requested")]
    TurnRequested(TurnRequested),
    #[serde(rename = "turn.started")]
    TurnStarted(TurnStarted),
    #[serde(rename = "turn.completed")]
    TurnCompleted(TurnCompleted),
    #[serde(rename = "turn.failed")]
    TurnFailed(TurnFailed),
    #[serde(rename = "run.cancel_requested")]
    RunCancelRequested(RunCancelRequested),
    #[serde(rename = "run.cancelled")]
    RunCancelled(RunCancelled),
    #[serde(rename = "run.completed")]
    RunCompleted(RunCompleted),
    #[serde(rename = "run.failed")]
    RunFailed(RunFailed),
    #[serde(rename = "lease.acquired")]
    LeaseAcquired(LeaseAcquired),
    #[serde(rename = "lease.released")]
    LeaseReleased(LeaseReleased),
    #[serde(rename = "model.completed")]
    ModelCompleted(ModelCompleted),
    #[serde(rename = "tool.intent")]
    ToolIntent(ToolIntent),
    #[serde(rename = "tool.result")]
    ToolResult(ToolResult),
    #[serde(rename = "tool.uncertain")]
    ToolUncertain(ToolUncertain),
    #[serde(rename = "tool.resolved")]
    ToolResolved(ToolResolved),
    #[serde(rename = "approval.requested")]
    ApprovalRequested(ApprovalRequested),
    #[serde(rename = "approval.decided")]
    ApprovalDecided(ApprovalDecided),
    #[serde(rename = "checkpoint.saved")]
    CheckpointSaved(CheckpointSaved),
}

impl RunEvent {
    /// The stable type name stored with the event.
    pub fn event_type(&self) -> &'static str {
        match self {
            Self::RunCreated(_) => "run.created",
            Self::MessageAppended(_) => "message.appended",
            Self::TurnRequested(_) => "turn.requested",
            Self::TurnStarted(_) => "turn.started",
            Self::TurnCompleted(_) => "turn.completed",
            Self::TurnFailed(_) => "turn.failed",
            Self::RunCancelRequested(_) => "run.cancel_requested",
            Self::RunCancelled(_) => "run.cancelled",
            Self::RunCompleted(_) => "run.completed",
            Self::RunFailed(_) => "run.failed",
            Self::LeaseAcquired(_) => "lease.acquired",
            Self::LeaseReleased(_) => "lease.released",
            Self::ModelCompleted(_) => "model.completed",
            Self::ToolIntent(_) => "tool.intent",
            Self::ToolResult(_) => "tool.result",
            Self::ToolUncertain(_) => "tool.uncertain",
            Self::ToolResolved(_) => "tool.resolved",
            Self::ApprovalRequested(_) => "approval.requested",
            Self::ApprovalDecided(_) => "approval.decided",
            Self::CheckpointSaved(_) => "checkpoint.saved",
        }
    }

    /// The schema version this build writes for the event's type.
    pub fn schema(&self) -> u32 {
        crate::upcast::current_schema(self.event_type()).unwrap_or(1)
    }

    /// The payload alone, as stored in the `data` column.
    pub fn data(&self) -> serde_json::Value {
        match serde_json::to_value(self) {
            Ok(serde_json::Value::Object(mut map)) => {
                map.remove("data").unwrap_or(serde_json::Value::Null)
            }
            _ => serde_json::Value::Null,
        }
    }

    /// Whether the event ends its run for good.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            Self::RunCancelled(_) | Self::RunCompleted(_) | Self::RunFailed(_)
        )
    }
}
