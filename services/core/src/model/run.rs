//! A run as the API shows it: its status, the runs projection and how each event changes
//! it ([`RunSummary::apply`], called by the store inside the append transaction so the
//! projection never drifts), and the messages projection.

use baton_events::{AgentId, ErrorInfo, MessageId, MessageRole, RunEvent, RunId, TenantId};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Where a run stands. `queued` and `running` mean a turn is in progress (busy).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Queued,
    Running,
    Waiting,
    RequiresAction,
    Completed,
    Failed,
    Cancelled,
}

impl RunStatus {
    pub const ALL: [RunStatus; 7] = [
        RunStatus::Queued,
        RunStatus::Running,
        RunStatus::Waiting,
        RunStatus::RequiresAction,
        RunStatus::Completed,
        RunStatus::Failed,
        RunStatus::Cancelled,
    ];

    pub fn as_str(&self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::Waiting => "waiting",
            RunStatus::RequiresAction => "requires_action",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<RunStatus> {
        RunStatus::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// The engine has work: a turn to start or to carry on.
    pub fn is_busy(&self) -> bool {
        matches!(self, RunStatus::Queued | RunStatus::Running)
    }

    /// A turn is in progress (maybe waiting for an action): new messages are refused.
    pub fn in_turn(&self) -> bool {
        self.is_busy() || *self == RunStatus::RequiresAction
    }

    /// The run has ended for good.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            RunStatus::Completed | RunStatus::Failed | RunStatus::Cancelled
        )
    }
}

/// The runs projection: one row per run, updated in the append transaction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunSummary {
    pub id: RunId,
    #[serde(skip)]
    pub tenant: TenantId,
    pub agent_id: AgentId,
    pub agent_version: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    pub status: RunStatus,
    /// The stream version: the number of events in the run.
    pub version: i64,
    pub message_count: i64,
    /// Turns requested so far; the current or last turn's number.
    pub turn_count: i64,
    pub cancel_requested: bool,
    /// Approvals, client tool outputs and uncertain calls the turn waits for; the run
    /// is `requires_action` while this is above zero.
    pub pending_actions: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<ErrorInfo>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl RunSummary {
    /// The projection of a stream that starts with `run.created`, before any event.
    pub fn empty(tenant: TenantId, id: RunId, at: DateTime<Utc>) -> Self {
        RunSummary {
            id,
            tenant,
            agent_id: AgentId(uuid::Uuid::nil()),
            agent_version: 0,
            title: None,
            status: RunStatus::Waiting,
            version: 0,
            message_count: 0,
            turn_count: 0,
            cancel_requested: false,
            pending_actions: 0,
            last_error: None,
            created_at: at,
            updated_at: at,
        }
    }

    /// Folds one event (appended as `version`) into the projection.
    pub fn apply(&mut self, event: &RunEvent, version: i64, at: DateTime<Utc>) {
        self.version = version;
        self.updated_at = at;
        if self.status.is_terminal() {
            return;
        }
        match event {
            RunEvent::RunCreated(e) => {
                self.agent_id = e.agent_id;
                self.agent_version = e.agent_version;
                self.title = e.title.clone();
                self.status = RunStatus::Waiting;
                self.created_at = at;
            }
            RunEvent::MessageAppended(_) => self.message_count += 1,
            RunEvent::ModelCompleted(e) => {
                if e.content.as_deref().is_some_and(|c| !c.is_empty()) {
                    self.message_count += 1;
                }
            }
            RunEvent::ApprovalRequested(_) | RunEvent::ToolUncertain(_) => self.await_action(),
            RunEvent::ToolIntent(e) if e.kind == baton_events::ToolKind::Client => {
                self.await_action()
            }
            RunEvent::ToolResult(e) if e.from_client => self.action_done(),
            RunEvent::ApprovalDecided(_) | RunEvent::ToolResolved(_) => self.action_done(),
            RunEvent::ToolIntent(_) | RunEvent::ToolResult(_) | RunEvent::CheckpointSaved(_) => {}
            RunEvent::TurnRequested(e) => {
                self.turn_count = e.turn;
                self.status = RunStatus::Queued;
            }
            RunEvent::TurnStarted(_) => self.status = RunStatus::Running,
            RunEvent::TurnCompleted(_) => {
                self.status = RunStatus::Waiting;
                self.pending_actions = 0;
                self.last_error = None;
            }
            RunEvent::TurnFailed(e) => {
                self.status = RunStatus::Waiting;
                self.pending_actions = 0;
                self.last_error = Some(e.error.clone());
            }
            RunEvent::RunCancelRequested(_) => self.cancel_requested = true,
            RunEvent::RunCancelled(_) => self.status = RunStatus::Cancelled,
            RunEvent::RunCompleted(_) => self.status = RunStatus::Completed,
            RunEvent::RunFailed(e) => {
                self.status = RunStatus::Failed;
                self.last_error = Some(e.error.clone());
            }
            // Ownership is on the run row's lease columns, not in the projection.
            RunEvent::LeaseAcquired(_) | RunEvent::LeaseReleased(_) => {}
        }
    }
}

impl RunSummary {
    /// The turn now waits for a member or the API client.
    fn await_action(&mut self) {
        self.pending_actions += 1;
        self.status = RunStatus::RequiresAction;
    }

    /// One awaited action arrived; with none left the turn goes on.
    fn action_done(&mut self) {
        self.pending_actions = (self.pending_actions - 1).max(0);
        if self.pending_actions == 0 && self.status == RunStatus::RequiresAction {
            self.status = RunStatus::Running;
        }
    }
}

/// One row of the messages projection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Message {
    pub id: MessageId,
    pub run_id: RunId,
    /// 1-based position among the run's messages; the list cursor.
    pub seq: i64,
    pub role: MessageRole,
    pub content: String,
    /// Version of the `message.appended` event in the run's stream.
    pub version: i64,
    pub created_at: DateTime<Utc>,
}
