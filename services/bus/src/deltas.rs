//! The NATS bus's read side for ephemeral deltas. Deltas are many (a model's tokens), so a
//! replica does not take all of them: it subscribes to `baton.delta.<tenant>.<run>` only
//! while it has local subscribers of that run, one NATS subscription per run however
//! many subscribers share it, and feeds what arrives to the local hub. The last local
//! subscriber's release drops the NATS subscription.

use crate::hub::Hub;
use crate::nats::round_trip;
use crate::subjects::Subjects;
use baton_events::{MessageDelta, RunId, TenantId};
use futures::StreamExt;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

type Key = (TenantId, RunId);

/// One run's NATS delta subscription, shared by its local subscribers.
struct Feed {
    /// Local subscribers still holding it.
    holders: usize,
    /// Subscribes, then forwards to the hub; aborting it drops (unsubscribes) the
    /// NATS subscription.
    task: JoinHandle<()>,
    /// Turns true once the server confirmed the subscription (or did not in time).
    ready: watch::Receiver<bool>,
}

pub(crate) struct DeltaFeeds {
    client: async_nats::Client,
    subjects: Subjects,
    hub: Arc<Hub>,
    feeds: Mutex<HashMap<Key, Feed>>,
}

impl DeltaFeeds {
    pub(crate) fn new(client: async_nats::Client, subjects: Subjects, hub: Arc<Hub>) -> Self {
        Self {
            client,
            subjects,
            hub,
            feeds: Mutex::new(HashMap::new()),
        }
    }

    /// Counts one more local subscriber of the run, subscribing on NATS for the first.
    /// Waits, at most `wait` and only while connected, until the server has the
    /// subscription, so deltas published after this returns reach the run's
    /// subscribers. Every call must be matched by one [`DeltaFeeds::release`].
    pub(crate) async fn acquire(&self, tenant: TenantId, run: RunId, wait: Duration) {
        let mut ready = {
            let mut feeds = self.lock();
            let feed = feeds.entry((tenant, run)).or_insert_with(|| {
                let (tx, ready) = watch::channel(false);
                let task = tokio::spawn(forward(
                    self.client.clone(),
                    self.subjects.clone(),
                    self.hub.clone(),
                    (tenant, run),
                    wait,
                    tx,
                ));
                Feed {
                    holders: 0,
                    task,
                    ready,
                }
            });
            feed.holders += 1;
            feed.ready.clone()
        };
        if self.client.connection_state() == async_nats::connection::State::Connected {
            // Ends early when the feed goes away (its sender drops): nothing to wait for.
            let _ = tokio::time::timeout(wait, ready.wait_for(|r| *r)).await;
        }
    }

    /// One local subscriber of the run is gone; the last one ends the NATS subscription.
    pub(crate) fn release(&self, tenant: TenantId, run: RunId) {
        let mut feeds = self.lock();
        let key = (tenant, run);
        let last = match feeds.get_mut(&key) {
            Some(feed) => {
                feed.holders = feed.holders.saturating_sub(1);
                feed.holders == 0
            }
            None => false,
        };
        if last && let Some(feed) = feeds.remove(&key) {
            feed.task.abort();
        }
    }

    /// Runs this replica holds a NATS delta subscription for.
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Key, Feed>> {
        // A panic while holding this lock cannot leave the map inconsistent.
        self.feeds.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for DeltaFeeds {
    /// Ends every feed with the bus (subscriptions that outlive it get no more deltas).
    fn drop(&mut self) {
        for (_, feed) in self.lock().drain() {
            feed.task.abort();
        }
    }
}

/// Subscribes to the run's delta subject, says so on `ready` once the server confirmed it
/// (or `wait` passed), and hands every delta to the hub until aborted.
async fn forward(
    client: async_nats::Client,
    subjects: Subjects,
    hub: Arc<Hub>,
    (tenant, run): Key,
    wait: Duration,
    ready: watch::Sender<bool>,
) {
    let subject = subjects.delta(tenant, run);
    let mut sub = match client.subscribe(subject.clone()).await {
        Ok(sub) => sub,
        Err(e) => {
            // Only when the client is gone or the subject is invalid: the run's
            // subscribers get its durable events, not its deltas.
            tracing::warn!(%subject, error = %e, "cannot subscribe to a run's deltas");
            return;
        }
    };
    // Unconfirmed in time (NATS is away), the subscription still takes effect once the
    // server gets it; subscribers have waited long enough.
    let _ = round_trip(&client, &subjects, wait).await;
    ready.send_replace(true);
    while let Some(msg) = sub.next().await {
        match serde_json::from_slice::<MessageDelta>(&msg.payload) {
            Ok(delta) => hub.dispatch_delta(tenant, run, &delta),
            Err(e) => tracing::debug!(%subject, error = %e, "dropping an undecodable delta"),
        }
    }
}
