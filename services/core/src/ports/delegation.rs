//! Delegation: a run's `delegate` tool call starts a child run of another agent and waits
//! for its answer. The engine asks through this port; the run use cases answer it.

use crate::error::CoreError;
use async_trait::async_trait;
use baton_events::{AgentId, ReceiptId, RunId, TenantId};
use std::sync::{Arc, OnceLock};

/// One delegating call.
#[derive(Debug, Clone)]
pub struct Delegation {
    pub tenant: TenantId,
    /// The run making the call.
    pub parent: RunId,
    /// The call: the child run's `request_id`, so a call run again (after a crash) finds
    /// the child it started rather than starting another.
    pub receipt: ReceiptId,
    pub agent: AgentId,
    /// The child's first message.
    pub message: String,
    /// The child's depth: the parent's plus one.
    pub depth: u32,
}

/// A delegation's child run, as started (or found again).
#[derive(Debug, Clone, PartialEq)]
pub struct Child {
    pub tenant: TenantId,
    pub run: RunId,
    /// Its first message, whose turn answers.
    pub message: crate::model::Message,
}

/// Starts (or finds) a delegation's child run, and waits for its answer.
#[async_trait]
pub trait Delegator: Send + Sync {
    /// Starts the child of `d`, or finds the one a run of the same call started.
    async fn start(&self, d: &Delegation) -> Result<Child, CoreError>;

    /// Waits until the child's first turn completes (its reply), fails or the run ends
    /// (why there is no reply); a turn waiting on a member waits on. Never returns on its
    /// own while the child works: the caller bounds it.
    async fn answer(&self, child: &Child) -> Result<Result<String, String>, CoreError>;
}

/// A delegator given after the engine is built (the run use cases that answer need the
/// engine as their driver): empty, delegations fail with `unavailable`.
#[derive(Clone, Default)]
pub struct DelegatorSlot(Arc<OnceLock<Arc<dyn Delegator>>>);

impl DelegatorSlot {
    /// Fills the slot; a second fill is ignored.
    pub fn set(&self, d: Arc<dyn Delegator>) {
        let _ = self.0.set(d);
    }

    pub fn get(&self) -> Option<&Arc<dyn Delegator>> {
        self.0.get()
    }
}
