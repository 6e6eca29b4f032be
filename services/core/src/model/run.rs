//! A run as the API shows it: its status, the runs projection and how each event changes
//! it ([`RunSummary::apply`], called by the store inside the append transaction so the
//! projection never drifts), and the messages projection.

use baton_events::{
    AgentId, ErrorInfo, MessageId, MessageRole, Metadata, RunEvent, RunId, TenantId,
};
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

/// What a user message posted while a turn is in progress (queued, running, or waiting
/// for an action) does. Posted to an idle run, any message starts a turn at once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MessageStrategy {
    /// Refused with 409 `run_busy`; nothing is written.
    #[default]
    Reject,
    /// Accepted at once into the run's queue (`message.queued`); it starts a turn of its
    /// own when the turns before it have settled, in order, exactly once.
    Enqueue,
    /// Ends the turn in progress at its next safe point (a model call is abandoned; tool
    /// calls in flight finish and are recorded) and starts the next turn, ahead of any
    /// message queued before it. The ended turn's completed steps stay in what the model
    /// sees.
    Interrupt,
    /// As `interrupt`, but the ended turn's steps are dropped from what the model sees
    /// next (its events stay in the stream; `turn.interrupted` says `rollback`).
    Rollback,
}

impl MessageStrategy {
    /// How a message of this strategy ends the turn in progress, if it does.
    pub fn interrupts(&self) -> Option<baton_events::TurnInterrupt> {
        match self {
            MessageStrategy::Reject | MessageStrategy::Enqueue => None,
            MessageStrategy::Interrupt => Some(baton_events::TurnInterrupt::Interrupt),
            MessageStrategy::Rollback => Some(baton_events::TurnInterrupt::Rollback),
        }
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
    /// The client's labels, to find runs by (`GET /v1/runs?metadata=key:value`).
    #[serde(default)]
    #[schema(value_type = std::collections::BTreeMap<String, String>)]
    pub metadata: Metadata,
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
    /// The run whose `delegate` tool call started this one; absent for runs a client
    /// started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_run_id: Option<RunId>,
    /// How the last turn that ended, ended; absent before any did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_turn_outcome: Option<TurnEnd>,
    /// Turns that failed in a row since the last one that completed: at the agent's
    /// `limits.max_failed_turns` the run fails.
    #[serde(default)]
    pub failed_turns: i64,
    /// Messages posted with `strategy: enqueue` that wait for the turns before them; each
    /// starts a turn of its own, in order. A run that ends drops them (0).
    #[serde(default)]
    pub queued_messages: i64,
    /// A message posted with `strategy: interrupt` or `rollback` waits for the engine to
    /// end the turn in progress.
    #[serde(default)]
    pub interrupt_requested: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// How a turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TurnEnd {
    Completed,
    Failed,
    /// The run was cancelled during the turn.
    Cancelled,
    /// A message posted with `strategy: interrupt` or `rollback` ended it early.
    Interrupted,
}

impl TurnEnd {
    pub fn as_str(&self) -> &'static str {
        match self {
            TurnEnd::Completed => "completed",
            TurnEnd::Failed => "failed",
            TurnEnd::Cancelled => "cancelled",
            TurnEnd::Interrupted => "interrupted",
        }
    }

    pub fn parse(s: &str) -> Option<TurnEnd> {
        [
            TurnEnd::Completed,
            TurnEnd::Failed,
            TurnEnd::Cancelled,
            TurnEnd::Interrupted,
        ]
        .into_iter()
        .find(|e| e.as_str() == s)
    }
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
            metadata: Metadata::new(),
            status: RunStatus::Waiting,
            version: 0,
            message_count: 0,
            turn_count: 0,
            cancel_requested: false,
            pending_actions: 0,
            last_error: None,
            last_turn_outcome: None,
            failed_turns: 0,
            queued_messages: 0,
            interrupt_requested: false,
            created_at: at,
            updated_at: at,
            parent_run_id: None,
        }
    }

    /// Folds one event (appended as `version`) into the projection.
    pub fn apply(&mut self, event: &RunEvent, version: i64, at: DateTime<Utc>) {
        self.version = version;
        self.updated_at = at;
        // Labels may change after the end too: a finished run is still filed and found.
        if let RunEvent::RunUpdated(e) = event {
            self.title = e.title.clone();
            self.metadata = e.metadata.clone();
            return;
        }
        if self.status.is_terminal() {
            return;
        }
        match event {
            RunEvent::RunCreated(e) => {
                self.agent_id = e.agent_id;
                self.agent_version = e.agent_version;
                self.title = e.title.clone();
                self.metadata = e.metadata.clone();
                self.parent_run_id = e.parent.map(|p| p.run_id);
                self.status = RunStatus::Waiting;
                self.created_at = at;
            }
            RunEvent::RunUpdated(_) => {}
            RunEvent::MessageAppended(e) => {
                self.message_count += 1;
                if e.queued {
                    self.queued_messages = (self.queued_messages - 1).max(0);
                }
            }
            RunEvent::MessageQueued(e) => {
                self.queued_messages += 1;
                if e.interrupts.is_some() && self.status.in_turn() {
                    self.interrupt_requested = true;
                    // A turn waiting for a member has work again: ending it.
                    if self.status == RunStatus::RequiresAction {
                        self.status = RunStatus::Running;
                    }
                }
            }
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
            RunEvent::ApprovalDecided(_) => self.action_done(),
            // A call an earlier turn left uncertain is no action the current turn awaits.
            RunEvent::ToolResolved(e) if e.turn.is_none_or(|t| t == self.turn_count) => {
                self.action_done()
            }
            RunEvent::ToolResolved(_) => {}
            RunEvent::ToolIntent(_)
            | RunEvent::ToolResult(_)
            | RunEvent::CheckpointSaved(_)
            | RunEvent::WorkspaceChanged(_) => {}
            RunEvent::TurnRequested(e) => {
                self.turn_count = e.turn;
                self.status = RunStatus::Queued;
            }
            RunEvent::TurnStarted(_) => self.status = RunStatus::Running,
            RunEvent::TurnCompleted(_) => {
                self.status = RunStatus::Waiting;
                self.pending_actions = 0;
                self.last_error = None;
                self.last_turn_outcome = Some(TurnEnd::Completed);
                self.failed_turns = 0;
                self.interrupt_requested = false;
            }
            RunEvent::TurnFailed(e) => {
                self.status = RunStatus::Waiting;
                self.pending_actions = 0;
                self.last_error = Some(e.error.clone());
                self.last_turn_outcome = Some(TurnEnd::Failed);
                self.failed_turns += 1;
                self.interrupt_requested = false;
            }
            RunEvent::TurnInterrupted(_) => {
                self.status = RunStatus::Waiting;
                self.pending_actions = 0;
                self.last_turn_outcome = Some(TurnEnd::Interrupted);
                self.interrupt_requested = false;
            }
            RunEvent::RunCancelRequested(_) => self.cancel_requested = true,
            RunEvent::RunCancelled(_) => {
                if self.status.in_turn() {
                    self.last_turn_outcome = Some(TurnEnd::Cancelled);
                }
                self.status = RunStatus::Cancelled;
                self.queued_messages = 0;
                self.interrupt_requested = false;
            }
            RunEvent::RunCompleted(_) => {
                self.status = RunStatus::Completed;
                self.queued_messages = 0;
                self.interrupt_requested = false;
            }
            RunEvent::RunFailed(e) => {
                self.status = RunStatus::Failed;
                self.last_error = Some(e.error.clone());
                self.queued_messages = 0;
                self.interrupt_requested = false;
            }
            // Ownership is on the run row's lease columns, not in the projection; a
            // deleted run has no row to project onto.
            RunEvent::LeaseAcquired(_) | RunEvent::LeaseReleased(_) | RunEvent::RunDeleted(_) => {}
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
