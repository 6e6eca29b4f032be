//! The event bus: publishing committed events, live feeds of a run, and hints between
//! replicas.

use crate::error::StoreError;
use crate::model::RunSummary;
use async_trait::async_trait;
use baton_events::{Envelope, MessageDelta, RunId, SharedEvent, TenantId};
use tokio::sync::mpsc;

/// A live feed of one run's durable events, bounded: when the subscriber falls behind
/// the feed is closed (the receiver yields `None`) and the client resumes from its cursor.
/// Dropping it runs the bus's release hooks, so the bus forgets the subscriber at once.
///
/// Beside it, `deltas` carries the run's ephemeral events (token deltas) through a buffer
/// of its own: deltas that do not fit are dropped, they never close the durable feed. A
/// feed built without deltas (or whose bus forgot it) has a `deltas` that yields `None`.
pub struct Subscription {
    pub events: mpsc::Receiver<SharedEvent>,
    pub deltas: mpsc::Receiver<MessageDelta>,
    release: Option<Box<dyn FnOnce() + Send + Sync>>,
}

impl Subscription {
    /// A feed the bus need not be told about when it goes away.
    pub fn new(events: mpsc::Receiver<SharedEvent>) -> Self {
        Self {
            events,
            deltas: Self::no_deltas(),
            release: None,
        }
    }

    /// A feed that calls `release` once, when it is dropped (the bus unregisters it).
    pub fn with_release(
        events: mpsc::Receiver<SharedEvent>,
        release: impl FnOnce() + Send + Sync + 'static,
    ) -> Self {
        Self {
            events,
            deltas: Self::no_deltas(),
            release: Some(Box::new(release)),
        }
    }

    /// The same feed, with the run's deltas arriving on `deltas`.
    #[must_use]
    pub fn with_deltas(mut self, deltas: mpsc::Receiver<MessageDelta>) -> Self {
        self.deltas = deltas;
        self
    }

    /// The same feed, calling `release` too when it is dropped (after the hook it
    /// already had).
    #[must_use]
    pub fn and_release(mut self, release: impl FnOnce() + Send + Sync + 'static) -> Self {
        self.release = Some(match self.release.take() {
            Some(first) => Box::new(move || {
                first();
                release();
            }),
            None => Box::new(release),
        });
        self
    }

    /// A delta receiver that never yields one.
    fn no_deltas() -> mpsc::Receiver<MessageDelta> {
        mpsc::channel(1).1
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if let Some(release) = self.release.take() {
            release();
        }
    }
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("events", &self.events)
            .field("deltas", &self.deltas)
            .field("release", &self.release.is_some())
            .finish()
    }
}

/// What one replica tells the others over the bus (wake a driver, adopt now). Best effort:
/// a lost message costs latency (the lease and adoption loops catch up), never work.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Control {
    /// A client command changed the run: its driver, wherever it is, should look again.
    Wake { tenant: TenantId, run: RunId },
    /// Leases were released (a replica drained): claim what needs driving now rather
    /// than at the next adoption round.
    Adopt,
    /// An API key was revoked: the event streams it opened end, on every replica.
    KeyRevoked { id: uuid::Uuid },
    /// A login session ended (logout): the event streams it opened end.
    SessionEnded { id: uuid::Uuid },
    /// A user left a tenant: the event streams its sessions opened in that tenant end.
    MemberRemoved { tenant: TenantId, user: uuid::Uuid },
}

/// A [`Control`] and the replica that sent it (receivers ignore their own).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ControlMessage {
    pub from: String,
    #[serde(flatten)]
    pub control: Control,
}

/// Publishes committed events and feeds subscribers. The database stays the source of
/// truth: a failed publish is logged and costs latency, never an event.
#[async_trait]
pub trait EventBus: Send + Sync {
    async fn publish(&self, events: &[Envelope]);
    /// Subscribes to one run's events published from now on.
    async fn subscribe(&self, tenant: TenantId, run: RunId) -> Result<Subscription, StoreError>;
    async fn ping(&self) -> Result<(), StoreError>;
    /// Sends an ephemeral event (a token delta) to the run's live subscribers on every
    /// replica. Never stored, never waits: a delta that cannot go out at once is dropped
    /// (the durable `model.completed` carries the whole reply).
    fn publish_delta(&self, tenant: TenantId, run: RunId, delta: MessageDelta);
    /// Tells every replica (this one included); never waits on the bus.
    async fn publish_control(&self, msg: &ControlMessage);
    /// Control messages published from now on; a receiver that falls behind loses
    /// messages (they are hints).
    async fn subscribe_control(&self) -> Result<mpsc::Receiver<ControlMessage>, StoreError>;
    /// At shutdown: hands what is queued to the bus, waiting at most `timeout`.
    async fn close(&self, _timeout: std::time::Duration) {}
}

/// Whoever drives runs (the engine): told when a run may need work.
pub trait RunDriver: Send + Sync {
    fn wake(&self, tenant: TenantId, run: RunId);

    /// [`Self::wake`], given the run as the caller's append left it and the events it
    /// wrote: a driver started for it here takes its first step from that rather than
    /// reading the run again (and, when the events are the whole stream, a run just
    /// created, rather than reading them).
    fn wake_from(&self, run: RunSummary, _events: Vec<Envelope>) {
        self.wake(run.tenant, run.id);
    }
}
