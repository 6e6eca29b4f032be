//! Local fan-out of one replica: subscribers per run, each with a bounded buffer. A
//! subscriber whose buffer is full is dropped (its receiver ends) so one slow client
//! never holds up the others; it resumes from its cursor. A dropped [`Subscription`]
//! unregisters itself, so finished or abandoned runs leave nothing behind. Knows nothing
//! of NATS.
//!
//! Ephemeral deltas go to each subscriber through a second bounded buffer: a delta that
//! does not fit is dropped and counted, and never closes the subscriber's durable feed.

use baton_core::ports::Subscription;
use baton_events::{Envelope, MessageDelta, RunId, SharedEvent, TenantId};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio::sync::mpsc;

type Key = (TenantId, RunId);

/// Each subscriber's buffer of deltas. They are small and come in bursts (a model's
/// tokens); a subscriber this far behind loses deltas, not its feed.
const DELTA_BUFFER: usize = 1024;

struct Subscriber {
    id: u64,
    tx: mpsc::Sender<SharedEvent>,
    deltas: mpsc::Sender<MessageDelta>,
}

pub struct Hub {
    subscribers: Mutex<HashMap<Key, Vec<Subscriber>>>,
    buffer: usize,
    next_id: AtomicU64,
    closed_slow: AtomicU64,
    deltas_dropped: AtomicU64,
}

impl Hub {
    /// `buffer` is each subscriber's capacity in events (at least 1).
    pub fn new(buffer: usize) -> Self {
        Self {
            subscribers: Mutex::new(HashMap::new()),
            buffer: buffer.max(1),
            next_id: AtomicU64::new(0),
            closed_slow: AtomicU64::new(0),
            deltas_dropped: AtomicU64::new(0),
        }
    }

    /// A feed of the run's events and deltas dispatched from now on. Dropping it removes
    /// exactly this subscriber (and the run's entry once it has none); the hook holds
    /// only a weak reference, so a subscription may outlive the hub.
    pub fn subscribe(self: &Arc<Self>, tenant: TenantId, run: RunId) -> Subscription {
        let (tx, rx) = mpsc::channel(self.buffer);
        let (deltas, deltas_rx) = mpsc::channel(DELTA_BUFFER);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let key = (tenant, run);
        self.lock()
            .entry(key)
            .or_default()
            .push(Subscriber { id, tx, deltas });
        let hub = Arc::downgrade(self);
        Subscription::with_release(rx, move || {
            if let Some(hub) = hub.upgrade() {
                hub.remove(key, id);
            }
        })
        .with_deltas(deltas_rx)
    }

    /// Hands the event to every subscriber of its run, dropping the full and the gone.
    /// They all share one copy of it (and its JSON, encoded by the first stream that
    /// sends it).
    pub fn dispatch(&self, event: &Envelope) {
        // From the appender's clock to this one: over NATS, any skew between the
        // replicas' clocks is included.
        let lag = (chrono::Utc::now() - event.recorded_at)
            .to_std()
            .unwrap_or_default();
        metrics::histogram!("baton_bus_lag_seconds").record(lag);
        let key = (event.meta.tenant, event.stream);
        let mut subs = self.lock();
        let Some(list) = subs.get_mut(&key) else {
            return;
        };
        let shared = SharedEvent::new(event.clone());
        list.retain(|s| match s.tx.try_send(shared.clone()) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.closed_slow.fetch_add(1, Ordering::Relaxed);
                metrics::counter!("baton_sse_closed_slow_total").increment(1);
                tracing::info!(run_id = %event.stream, "closing a slow event subscriber");
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        });
        if list.is_empty() {
            subs.remove(&key);
        }
    }

    /// Hands the delta to every subscriber of the run that has room for it; the others
    /// lose it (counted) and keep their subscription.
    pub fn dispatch_delta(&self, tenant: TenantId, run: RunId, delta: &MessageDelta) {
        let subs = self.lock();
        let Some(list) = subs.get(&(tenant, run)) else {
            return;
        };
        for s in list {
            // A closed receiver does not take deltas (or is on its way out): nothing lost.
            if let Err(mpsc::error::TrySendError::Full(_)) = s.deltas.try_send(delta.clone()) {
                self.deltas_dropped.fetch_add(1, Ordering::Relaxed);
                metrics::counter!("baton_sse_deltas_dropped_total").increment(1);
            }
        }
    }

    /// Deltas lost because a subscriber's delta buffer was full, since start.
    pub fn deltas_dropped(&self) -> u64 {
        self.deltas_dropped.load(Ordering::Relaxed)
    }

    /// Subscribers closed because they fell behind, since start.
    pub fn closed_slow(&self) -> u64 {
        self.closed_slow.load(Ordering::Relaxed)
    }

    /// Live subscribers: registered and still listening.
    pub fn subscriber_count(&self) -> usize {
        self.lock()
            .values()
            .flatten()
            .filter(|s| !s.tx.is_closed())
            .count()
    }

    /// Runs with at least one registered subscriber (the size of the internal map).
    pub fn runs_tracked(&self) -> usize {
        self.lock().len()
    }

    fn remove(&self, key: Key, id: u64) {
        let mut subs = self.lock();
        if let Some(list) = subs.get_mut(&key) {
            list.retain(|s| s.id != id);
            if list.is_empty() {
                subs.remove(&key);
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Key, Vec<Subscriber>>> {
        // A panic while holding this lock cannot leave the map inconsistent.
        self.subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}
