//! Typed payloads of the run events, schema version 1 unless noted.
//!
//! `RunEvent` is serialized adjacently tagged (`{"type": .., "data": ..}`); the store keeps
//! `type` and `data` in separate columns. Add fields only as `Option` or with defaults.
//!
//! Every payload is also an OpenAPI schema (`utoipa::ToSchema`): the API's document
//! describes each event type's `data` with it, so a doc comment here is API reference.

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

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunCreated {
    pub agent_id: AgentId,
    /// The agent version the run started with; the run keeps using it.
    pub agent_version: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The client's labels of the run (absent in runs created without any).
    #[serde(default, skip_serializing_if = "Metadata::is_empty")]
    #[schema(value_type = std::collections::BTreeMap<String, String>)]
    pub metadata: Metadata,
    /// The version of each of the agent's tools current when the run was created; the
    /// run keeps calling those (absent in runs created before tools had versions, which
    /// call each tool's current version).
    #[serde(default, skip_serializing_if = "ToolVersions::is_empty")]
    #[schema(value_type = std::collections::BTreeMap<String, i64>)]
    pub tool_versions: ToolVersions,
    /// The run whose `delegate` tool call started this one (absent for runs a client
    /// started).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ParentRun>,
}

/// Where a delegated run comes from: the parent run and its tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ParentRun {
    pub run_id: crate::RunId,
    /// The parent's call that started this run (the child's `request_id` too).
    pub receipt_id: crate::ReceiptId,
    /// 1 for a child of a run a client started, one more at each delegation below.
    pub depth: u32,
}

/// Tool ids to the version a run calls.
pub type ToolVersions = std::collections::BTreeMap<crate::ToolId, i64>;

/// A run's labels: string keys to string values, set by clients to find runs by.
pub type Metadata = std::collections::BTreeMap<String, String>;

/// A client changed the run's title or metadata; the event holds both as they are after
/// the change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunUpdated {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default)]
    #[schema(value_type = std::collections::BTreeMap<String, String>)]
    pub metadata: Metadata,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MessageAppended {
    pub message_id: MessageId,
    pub role: MessageRole,
    pub content: String,
    /// The message waited in the run's queue (`message.queued`, same `message_id`) and
    /// was taken now, as its turn starts; absent otherwise.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub queued: bool,
}

/// A user message posted while a turn was in progress with `strategy: enqueue`,
/// `interrupt` or `rollback`: it waits in the run's queue and starts a turn of its own
/// when the turns before it have settled (`message.appended` with `queued: true` and the
/// same `message_id`, in the same append as the settling event). A run that ends takes
/// no queued message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MessageQueued {
    pub message_id: MessageId,
    pub content: String,
    /// The message also ends the turn in progress at its next safe point
    /// (`turn.interrupted`) and goes to the head of the queue; absent for `enqueue`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupts: Option<TurnInterrupt>,
}

/// How a message ends the turn in progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TurnInterrupt {
    /// The ended turn's completed steps stay in what the model sees next.
    Interrupt,
    /// The ended turn's steps are dropped from what the model sees next; its events stay
    /// in the stream, and `turn.interrupted` says `rollback`.
    Rollback,
}

/// The turn in progress was ended early for a message posted with `strategy: interrupt`
/// or `rollback`, which the same append takes as the next turn. A model call in flight
/// was abandoned; tool calls in flight finished first and are recorded before it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TurnInterrupted {
    pub turn: i64,
    /// The message that interrupted it.
    pub message_id: MessageId,
    /// The turn's steps are dropped from what the model sees next.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rollback: bool,
}

/// A turn was asked for (by a user message); the engine will pick it up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TurnRequested {
    /// 1-based turn number within the run.
    pub turn: i64,
    /// The message that asked for the turn.
    pub message_id: MessageId,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TurnStarted {
    pub turn: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TurnCompleted {
    pub turn: i64,
    /// Why the model stopped (`stop`, `length`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TurnFailed {
    pub turn: i64,
    pub error: ErrorInfo,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunCancelRequested {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunCancelled {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default, utoipa::ToSchema)]
pub struct RunCompleted {}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunFailed {
    pub error: ErrorInfo,
}

/// The run was deleted, with every event, message, receipt and checkpoint it had. Never
/// stored: the last word of the run's stream, sent to live subscribers (over the bus and
/// to SSE clients, whose stream ends with it) at the version after the run's last event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default, utoipa::ToSchema)]
pub struct RunDeleted {}

/// Why a replica took a run's lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LeaseAcquired {
    /// The replica identity: configured name and boot id (`name/boot`).
    pub owner: String,
    /// The fencing token: increases with every acquisition of this run's lease.
    pub epoch: i64,
    pub reason: LeaseReason,
}

/// Why a replica gave a lease up while the run still had work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReleaseReason {
    /// The replica is shutting down and hands the run to another one.
    Drained,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LeaseReleased {
    pub owner: String,
    pub epoch: i64,
    pub reason: ReleaseReason,
}

/// Every durable run event this build knows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "type", content = "data")]
pub enum RunEvent {
    #[serde(rename = "run.created")]
    RunCreated(RunCreated),
    #[serde(rename = "message.appended")]
    MessageAppended(MessageAppended),
    #[serde(rename = "message.queued")]
    MessageQueued(MessageQueued),
    #[serde(rename = "turn.requested")]
    TurnRequested(TurnRequested),
    #[serde(rename = "turn.started")]
    TurnStarted(TurnStarted),
    #[serde(rename = "turn.completed")]
    TurnCompleted(TurnCompleted),
    #[serde(rename = "turn.failed")]
    TurnFailed(TurnFailed),
    #[serde(rename = "turn.interrupted")]
    TurnInterrupted(TurnInterrupted),
    #[serde(rename = "run.updated")]
    RunUpdated(RunUpdated),
    #[serde(rename = "run.cancel_requested")]
    RunCancelRequested(RunCancelRequested),
    #[serde(rename = "run.cancelled")]
    RunCancelled(RunCancelled),
    #[serde(rename = "run.completed")]
    RunCompleted(RunCompleted),
    #[serde(rename = "run.failed")]
    RunFailed(RunFailed),
    #[serde(rename = "run.deleted")]
    RunDeleted(RunDeleted),
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
    #[serde(rename = "workspace.changed")]
    WorkspaceChanged(crate::workspace::WorkspaceChanged),
}

impl RunEvent {
    /// The stable type name stored with the event.
    pub fn event_type(&self) -> &'static str {
        match self {
            Self::RunCreated(_) => "run.created",
            Self::MessageAppended(_) => "message.appended",
            Self::MessageQueued(_) => "message.queued",
            Self::TurnRequested(_) => "turn.requested",
            Self::TurnStarted(_) => "turn.started",
            Self::TurnCompleted(_) => "turn.completed",
            Self::TurnFailed(_) => "turn.failed",
            Self::TurnInterrupted(_) => "turn.interrupted",
            Self::RunUpdated(_) => "run.updated",
            Self::RunCancelRequested(_) => "run.cancel_requested",
            Self::RunCancelled(_) => "run.cancelled",
            Self::RunCompleted(_) => "run.completed",
            Self::RunFailed(_) => "run.failed",
            Self::RunDeleted(_) => "run.deleted",
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
            Self::WorkspaceChanged(_) => "workspace.changed",
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
            Self::RunCancelled(_)
                | Self::RunCompleted(_)
                | Self::RunFailed(_)
                | Self::RunDeleted(_)
        )
    }
}
