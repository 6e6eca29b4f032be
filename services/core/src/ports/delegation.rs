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

/// What a delegation came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delegated {
    pub child: RunId,
    /// How the child's turn ended: `completed` with its reply, or why there is none.
    pub answer: Result<String, String>,
}

/// Starts (or finds) a delegation's child run and waits for its answer: until its turn
/// completes, fails or the run ends (a turn waiting on a member waits on). Never returns
/// on its own while the child works: the caller bounds it.
#[async_trait]
pub trait Delegator: Send + Sync {
    async fn delegate(&self, d: Delegation) -> Result<Delegated, CoreError>;
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
