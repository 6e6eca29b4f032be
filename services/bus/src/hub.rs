//! Local fan-out of one replica: subscribers per run, each with a bounded buffer. A
//! subscriber whose buffer is full is dropped (its receiver ends) so one slow client
//! never holds up the others; it resumes from its cursor.

use baton_core::ports::Subscription;
use baton_events::{Envelope, RunId, TenantId};
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::mpsc;

type Key = (TenantId, RunId);

pub struct Hub {
    subscribers: Mutex<HashMap<Key, Vec<mpsc::Sender<Envelope>>>>,
    buffer: usize,
    closed_slow: AtomicU64,
}

impl Hub {
    /// `buffer` is each subscriber's capacity in events (at least 1).
    pub fn new(buffer: usize) -> Self {
        Self {
            subscribers: Mutex::new(HashMap::new()),
            buffer: buffer.max(1),
            closed_slow: AtomicU64::new(0),
        }
    }

    pub fn subscribe(&self, tenant: TenantId, run: RunId) -> Subscription {
        let (tx, rx) = mpsc::channel(self.buffer);
        self.lock().entry((tenant, run)).or_default().push(tx);
        Subscription { events: rx }
    }

    /// Hands the event to every subscriber of its run, dropping the full and the gone.
    pub fn dispatch(&self, event: &Envelope) {
        let key = (event.meta.tenant, event.stream);
        let mut subs = self.lock();
        let Some(list) = subs.get_mut(&key) else {
            return;
        };
        list.retain(|tx| match tx.try_send(event.clone()) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.closed_slow.fetch_add(1, Ordering::Relaxed);
                tracing::info!(run_id = %event.stream, "closing a slow event subscriber");
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        });
        if list.is_empty() {
            subs.remove(&key);
        }
    }

    /// Subscribers closed because they fell behind, since start.
    pub fn closed_slow(&self) -> u64 {
        self.closed_slow.load(Ordering::Relaxed)
    }

    /// Live subscribers (pruning those whose receiver is gone).
    pub fn subscriber_count(&self) -> usize {
        let mut subs = self.lock();
        subs.retain(|_, list| {
            list.retain(|tx| !tx.is_closed());
            !list.is_empty()
        });
        subs.values().map(Vec::len).sum()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Vec<mpsc::Sender<Envelope>>>> {
        // A panic while holding this lock cannot leave the map inconsistent.
        self.subscribers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
