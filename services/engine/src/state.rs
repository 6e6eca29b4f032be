//! A run's engine state, folded from its events: the conversation the model sees and
//! where the current turn stands (its model steps, the tool calls of the latest step
//! and what happened to each). The driver keeps it in memory and folds only the events
//! after the last one it saw; a checkpoint is this state serialized.
//!
//! A tool call's lifecycle is folded three times from the same events, because each
//! fold serves a reader the others cannot:
//! - [`CallState`] here decides the engine's next step. It knows a call before anything
//!   is recorded for it (`New`); keeps the recorded intent (tool, effect, idempotency,
//!   key) that the recovery rule and a retry need; tells a retry a member asked for
//!   from an intent recorded again, and a denial the model has not been told from one
//!   it has; and folds every settled outcome into `Done`. It is sealed into
//!   checkpoints, so its shape changes only with the checkpoint format.
//! - `ReceiptState` (`Receipt::apply`, core) is the receipts table and API: one row per
//!   call once something is recorded, with the outcome a member sees (ok, error,
//!   cancelled, denied, skipped, completed), attempts and output. A public, stored
//!   enum: `pending` after an intent and after a retry alike, `denied` before and
//!   after the model is told.
//! - `RunSummary::pending_actions` (core) is the run row's count of what the turn waits
//!   for (approvals, client outputs, uncertain calls) across all its calls. The store
//!   plans the runs projection before it reads any receipt row, so the count moves on
//!   each event alone; it sets `requires_action` and resets when the turn ends.
//!
//! `state/tests.rs` folds the same events through all three and checks that they agree
//! on when the run waits for someone.

use crate::provider::{ChatMessage, ChatRole};
use baton_events::{
    Decoded, Envelope, MessageId, MessageRole, ReceiptId, Resolution, RunEvent, ToolCallRequest,
    ToolIntent, ToolKind, ToolVersions, TurnInterrupt,
};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::time::Duration;

/// Where one tool call of the current step stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) enum CallState {
    /// The model asked for it; nothing recorded yet.
    New,
    AwaitingApproval,
    Approved,
    Denied {
        reason: Option<String>,
    },
    /// Intent recorded and no result: running here, or left by a stopped replica.
    Running(Box<ToolIntent>),
    AwaitingClient,
    /// Left without a result and not safe to repeat: a member resolves it.
    Uncertain(Box<ToolIntent>),
    /// A member asked to call it again.
    RetryRequested(Box<ToolIntent>),
    Done,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Call {
    pub request: ToolCallRequest,
    pub receipt: Option<ReceiptId>,
    pub state: CallState,
}

/// The state the engine continues a run from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub(crate) struct RunState {
    /// The stream version folded so far.
    pub version: i64,
    /// User, assistant and tool messages, in order (the agent's instructions are not
    /// part of it).
    pub conversation: Vec<ChatMessage>,
    /// The current (or last) turn.
    pub turn: i64,
    /// When the turn started or last resumed after waiting for an action: the turn
    /// timeout counts from here.
    pub active_since: Option<DateTime<Utc>>,
    /// Model calls made in the current turn.
    pub step: u32,
    /// Tool calls recorded (intents and rejections) in the current turn.
    pub tool_calls: u32,
    /// The tool calls of the latest model step of the current turn.
    pub calls: Vec<Call>,
    /// The trace context of the request that asked for the current turn: the engine's
    /// events of the turn carry it, so the turn is one trace across replicas.
    #[serde(default)]
    pub turn_trace: Option<String>,
    /// Messages queued behind the turn in progress (`message.queued`), oldest first;
    /// the append that settles a turn takes the first (see `queue.rs`).
    #[serde(default)]
    pub queue: VecDeque<QueuedInput>,
    /// The message that asked to end the turn in progress, and whether its steps are
    /// rolled back; cleared when the turn ends.
    #[serde(default)]
    pub interrupt: Option<(MessageId, bool)>,
    /// The length of `conversation` when the current turn was asked for (its user message
    /// included): a rolled-back turn cuts it back to this.
    #[serde(default)]
    pub turn_began: usize,
    /// The tool versions the run keeps, from its `run.created`.
    #[serde(default)]
    pub tool_versions: ToolVersions,
    /// How deep in a chain of delegations the run is: 0 for a run a client started.
    #[serde(default)]
    pub depth: u32,
    /// `delegate` calls the run made, in all its turns (each starts a child run).
    #[serde(default)]
    pub delegations: u32,
    /// Who asked for the current turn (as events record actors: `key:<id>`,
    /// `user:<id>`, `local`, `schedule:<id>`, `run:<id>`): its commands run in an
    /// environment only while that actor's role may execute there.
    #[serde(default)]
    pub turn_actor: Option<String>,
}

/// A message waiting in the run's queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct QueuedInput {
    pub message_id: MessageId,
    pub content: String,
    /// Who posted it: the turn it starts acts for them.
    #[serde(default)]
    pub actor: Option<String>,
}

impl RunState {
    /// Folds events in stream order; an event this build cannot read stops the fold
    /// with the reason (the run is left to a newer replica).
    pub fn fold(&mut self, events: &[Envelope]) -> Result<(), String> {
        for e in events {
            if e.version <= self.version {
                continue;
            }
            match e.decode() {
                Decoded::Known(event) => {
                    if matches!(event, RunEvent::TurnRequested(_)) {
                        self.turn_trace = e.meta.traceparent.clone();
                        // The engine asks for the turns of queued messages: those act
                        // for whoever posted the message (taken with it, below).
                        if let Some(actor) = e.meta.actor.as_ref().filter(|a| *a != "engine") {
                            self.turn_actor = Some(actor.clone());
                        }
                    }
                    self.apply(&event, e.recorded_at);
                    if let RunEvent::MessageQueued(m) = &event
                        && let Some(q) =
                            self.queue.iter_mut().find(|q| q.message_id == m.message_id)
                    {
                        q.actor = e.meta.actor.clone();
                    }
                }
                Decoded::Unknown { reason } => return Err(reason),
            }
            self.version = e.version;
        }
        Ok(())
    }

    fn apply(&mut self, event: &RunEvent, at: DateTime<Utc>) {
        match event {
            RunEvent::RunCreated(c) => {
                self.tool_versions = c.tool_versions.clone();
                self.depth = c.parent.map_or(0, |p| p.depth);
            }
            RunEvent::MessageAppended(m) => {
                let role = match m.role {
                    MessageRole::User => ChatRole::User,
                    MessageRole::Assistant => ChatRole::Assistant,
                    MessageRole::Tool => ChatRole::Tool,
                    MessageRole::System => ChatRole::System,
                };
                self.conversation.push(ChatMessage::text(role, &m.content));
                if m.queued {
                    if let Some(q) = self.queue.iter().find(|q| q.message_id == m.message_id) {
                        self.turn_actor = q.actor.clone();
                    }
                    self.queue.retain(|q| q.message_id != m.message_id);
                }
            }
            RunEvent::MessageQueued(m) => {
                let input = QueuedInput {
                    message_id: m.message_id,
                    content: m.content.clone(),
                    actor: None,
                };
                match m.interrupts {
                    Some(how) => {
                        self.queue.push_front(input);
                        let rollback = how == TurnInterrupt::Rollback;
                        self.interrupt = Some((m.message_id, rollback));
                    }
                    None => self.queue.push_back(input),
                }
            }
            // A run that ends takes no queued message.
            RunEvent::RunCompleted(_) | RunEvent::RunFailed(_) => {
                self.queue.clear();
                self.interrupt = None;
            }
            // The turn's own steps follow its user message: a rollback keeps that message
            // and what came before, whether or not the turn had started.
            RunEvent::TurnRequested(_) => self.turn_began = self.conversation.len(),
            RunEvent::TurnStarted(t) => {
                self.turn = t.turn;
                self.active_since = Some(at);
                self.step = 0;
                self.tool_calls = 0;
                self.calls.clear();
            }
            RunEvent::ModelCompleted(m) => {
                self.step = m.step;
                self.conversation.push(ChatMessage {
                    role: ChatRole::Assistant,
                    content: m.content.clone(),
                    tool_calls: m.tool_calls.clone(),
                    tool_call_id: None,
                });
                self.calls = m
                    .tool_calls
                    .iter()
                    .map(|c| Call {
                        request: c.clone(),
                        receipt: None,
                        state: CallState::New,
                    })
                    .collect();
            }
            RunEvent::ApprovalRequested(a) => {
                if let Some(c) = self.call_mut(&a.call_id) {
                    c.receipt = Some(a.receipt_id);
                    c.state = CallState::AwaitingApproval;
                }
            }
            RunEvent::ApprovalDecided(d) => {
                self.active_since = Some(at);
                if let Some(c) = self.by_receipt(d.receipt_id) {
                    c.state = if d.approved {
                        CallState::Approved
                    } else {
                        CallState::Denied {
                            reason: d.reason.clone(),
                        }
                    };
                }
            }
            RunEvent::ToolIntent(i) => {
                if let Some(c) = self.call_mut(&i.call_id) {
                    let first = matches!(c.state, CallState::New | CallState::Approved);
                    c.receipt = Some(i.receipt_id);
                    c.state = match i.kind {
                        ToolKind::Http
                        | ToolKind::Delegate
                        | ToolKind::Mcp
                        | ToolKind::Workspace => CallState::Running(Box::new(i.clone())),
                        ToolKind::Client => CallState::AwaitingClient,
                    };
                    self.tool_calls += u32::from(first);
                    if i.kind == ToolKind::Delegate {
                        self.delegations += u32::from(first);
                    }
                }
            }
            RunEvent::ToolResult(r) => {
                if r.from_client {
                    self.active_since = Some(at);
                }
                if let Some(c) = self.call_mut(&r.call_id) {
                    // A call rejected before it ran has a result and no intent.
                    let first = c.state == CallState::New;
                    c.receipt = Some(r.receipt_id);
                    c.state = CallState::Done;
                    self.tool_calls += u32::from(first);
                }
                self.conversation
                    .push(ChatMessage::tool_output(&r.call_id, &r.output));
            }
            RunEvent::ToolUncertain(u) => {
                if let Some(c) = self.by_receipt(u.receipt_id)
                    && let CallState::Running(i) = &c.state
                {
                    c.state = CallState::Uncertain(i.clone());
                }
            }
            RunEvent::ToolResolved(r) => {
                self.active_since = Some(at);
                self.resolve(r.receipt_id, r.resolution, &r.output);
            }
            RunEvent::TurnCompleted(_) | RunEvent::TurnFailed(_) => {
                self.calls.clear();
                self.interrupt = None;
            }
            RunEvent::TurnInterrupted(t) => {
                self.calls.clear();
                self.interrupt = None;
                if t.rollback {
                    self.conversation.truncate(self.turn_began);
                }
            }
            RunEvent::RunCancelled(_) => {
                self.calls.clear();
                self.queue.clear();
                self.interrupt = None;
            }
            _ => {}
        }
    }

    fn resolve(&mut self, receipt: ReceiptId, resolution: Resolution, output: &Option<String>) {
        let Some(c) = self.by_receipt(receipt) else {
            return;
        };
        let call_id = c.request.id.clone();
        let said = match resolution {
            Resolution::Retry => {
                // The intent is recorded again before the call is made again.
                if let CallState::Uncertain(i) = &c.state {
                    c.state = CallState::RetryRequested(i.clone());
                }
                return;
            }
            Resolution::Skip => "A member skipped this call; it did not run.".to_string(),
            Resolution::Complete => output.clone().unwrap_or_default(),
        };
        c.state = CallState::Done;
        self.conversation
            .push(ChatMessage::tool_output(call_id, said));
    }

    fn call_mut(&mut self, call_id: &str) -> Option<&mut Call> {
        self.calls.iter_mut().find(|c| c.request.id == call_id)
    }

    fn by_receipt(&mut self, receipt: ReceiptId) -> Option<&mut Call> {
        self.calls.iter_mut().find(|c| c.receipt == Some(receipt))
    }

    /// Receipts of calls whose intent is recorded without a result.
    pub fn running_receipts(&self) -> Vec<ReceiptId> {
        self.calls
            .iter()
            .filter(|c| matches!(c.state, CallState::Running(_)))
            .filter_map(|c| c.receipt)
            .collect()
    }

    /// Every call of the latest step has its output.
    pub fn calls_done(&self) -> bool {
        self.calls.iter().all(|c| c.state == CallState::Done)
    }

    /// What is left at `now` of a turn allowed `limit_ms` (counted from its start or its
    /// last resumption).
    pub fn time_left(&self, limit_ms: u64, now: DateTime<Utc>) -> Duration {
        let limit = Duration::from_millis(limit_ms);
        let Some(since) = self.active_since else {
            return limit;
        };
        let spent = (now - since).to_std().unwrap_or(Duration::ZERO);
        limit.saturating_sub(spent)
    }
}

#[cfg(test)]
mod tests;
