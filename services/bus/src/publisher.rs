//! The NATS bus's write side: callers hand events to a bounded queue without waiting, and
//! one background task publishes them with the NATS client. When NATS is slow or down the
//! queue fills and further events are dropped and counted, never waited for: the database
//! stays the source of truth and subscribers re-read gaps from it. Must never block a
//! caller and never log once per event.
//!
//! Ephemeral deltas share the queue but may fill only half of it, so a flood of tokens
//! never crowds out durable events; a delta that finds no room is dropped and counted
//! apart (it is lost for good, which is fine: the durable reply follows).

use crate::subjects::Subjects;
use baton_core::ports::ControlMessage;
use baton_events::{Envelope, MessageDelta, RunId, TenantId};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, watch};

/// What the background task publishes, in queue order.
pub(crate) enum Outgoing {
    Event(Box<Envelope>),
    Control(ControlMessage),
    Delta {
        tenant: TenantId,
        run: RunId,
        delta: MessageDelta,
    },
    /// Everything queued before it has been handed to the client and flushed.
    Flush(oneshot::Sender<()>),
}

/// At most one warning per this interval for dropped or failed publishes.
const LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Counters shared by the callers and the background task.
#[derive(Default)]
struct Counters {
    failures: AtomicU64,
    dropped: AtomicU64,
    deltas_dropped: AtomicU64,
}

/// The caller's handle. Dropping it stops the task: what the client takes without
/// waiting is still published, the rest is abandoned.
pub(crate) struct Publisher {
    queue: mpsc::Sender<Outgoing>,
    counters: Arc<Counters>,
    drop_log: Throttle,
    capacity: usize,
    _stop: watch::Sender<()>,
}

impl Publisher {
    /// Starts the background task; `capacity` (at least 1) is the queue's size in events.
    /// The task ends soon after the handle is dropped; awaiting it is optional.
    pub(crate) fn start(
        client: async_nats::Client,
        subjects: Subjects,
        capacity: usize,
    ) -> (Self, tokio::task::JoinHandle<()>) {
        let capacity = capacity.max(1);
        let (queue, rx) = mpsc::channel(capacity);
        let (stop, stopped) = watch::channel(());
        let counters = Arc::new(Counters::default());
        let task = tokio::spawn(run(client, subjects, rx, stopped, counters.clone()));
        let publisher = Self {
            queue,
            counters,
            drop_log: Throttle::new(LOG_INTERVAL),
            capacity,
            _stop: stop,
        };
        (publisher, task)
    }

    /// Queues the event for publishing, or drops and counts it when the queue is full.
    /// Never waits.
    pub(crate) fn offer(&self, event: &Envelope) {
        self.try_queue(Outgoing::Event(Box::new(event.clone())));
    }

    /// Queues a control message like [`Publisher::offer`].
    pub(crate) fn offer_control(&self, msg: &ControlMessage) {
        self.try_queue(Outgoing::Control(msg.clone()));
    }

    /// Queues a delta for publishing unless the queue is half full already (what is
    /// left is kept for durable events), or drops and counts it. Never waits.
    pub(crate) fn offer_delta(&self, tenant: TenantId, run: RunId, delta: MessageDelta) {
        let room = self.queue.capacity() * 2 > self.capacity;
        if !room
            || self
                .queue
                .try_send(Outgoing::Delta { tenant, run, delta })
                .is_err()
        {
            self.counters.deltas_dropped.fetch_add(1, Ordering::Relaxed);
            metrics::counter!("baton_bus_deltas_dropped_total").increment(1);
        }
    }

    /// Waits, at most `timeout`, until everything queued so far reached the client and
    /// the client flushed it.
    pub(crate) async fn flush(&self, timeout: Duration) {
        let (done, flushed) = oneshot::channel();
        let waited = tokio::time::timeout(timeout, async {
            if self.queue.send(Outgoing::Flush(done)).await.is_ok() {
                let _ = flushed.await;
            }
        })
        .await;
        if waited.is_err() {
            tracing::warn!(
                ?timeout,
                "the bus did not drain in time; queued messages are lost"
            );
        }
    }

    fn try_queue(&self, item: Outgoing) {
        if let Err(err) = self.queue.try_send(item) {
            let dropped = self.counters.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            metrics::counter!("baton_bus_publish_dropped_total").increment(1);
            if self.drop_log.ready() {
                let reason = match err {
                    mpsc::error::TrySendError::Full(_) => "the publish queue is full",
                    mpsc::error::TrySendError::Closed(_) => "the publisher has stopped",
                };
                tracing::warn!(
                    dropped_total = dropped,
                    queue_capacity = self.capacity,
                    reason,
                    "dropping bus messages; subscribers will re-read events from the database"
                );
            }
        }
    }

    pub(crate) fn failures(&self) -> u64 {
        self.counters.failures.load(Ordering::Relaxed)
    }

    pub(crate) fn dropped(&self) -> u64 {
        self.counters.dropped.load(Ordering::Relaxed)
    }

    pub(crate) fn deltas_dropped(&self) -> u64 {
        self.counters.deltas_dropped.load(Ordering::Relaxed)
    }
}

/// Publishes queued events in order until the handle is dropped. A publish that waits
/// (the client's own buffer is full while NATS is away) is abandoned on stop, so the task
/// never outlives its bus by more than what the client accepts at once.
async fn run(
    client: async_nats::Client,
    subjects: Subjects,
    mut queue: mpsc::Receiver<Outgoing>,
    mut stopped: watch::Receiver<()>,
    counters: Arc<Counters>,
) {
    let failure_log = Throttle::new(LOG_INTERVAL);
    while let Some(item) = queue.recv().await {
        let (subject, headers, payload) = match item {
            Outgoing::Flush(done) => {
                tokio::select! {
                    biased;
                    _ = client.flush() => {}
                    () = closed(&mut stopped) => return,
                }
                let _ = done.send(());
                continue;
            }
            Outgoing::Event(event) => {
                let mut headers = async_nats::HeaderMap::new();
                if let Some(tp) = &event.meta.traceparent {
                    headers.insert("traceparent", tp.as_str());
                }
                let subject = subjects.event(event.meta.tenant, event.stream);
                (subject, headers, serde_json::to_vec(&event))
            }
            Outgoing::Delta { tenant, run, delta } => (
                subjects.delta(tenant, run),
                async_nats::HeaderMap::new(),
                serde_json::to_vec(&delta),
            ),
            Outgoing::Control(msg) => (
                subjects.control(),
                async_nats::HeaderMap::new(),
                serde_json::to_vec(&msg),
            ),
        };
        let payload = match payload {
            Ok(p) => p,
            Err(err) => {
                counters.failures.fetch_add(1, Ordering::Relaxed);
                tracing::error!(%subject, error = %err, "cannot encode a bus message");
                continue;
            }
        };
        let result = tokio::select! {
            biased;
            r = client.publish_with_headers(subject.clone(), headers, payload.into()) => r,
            () = closed(&mut stopped) => return,
        };
        if let Err(err) = result {
            let failures = counters.failures.fetch_add(1, Ordering::Relaxed) + 1;
            metrics::counter!("baton_bus_publish_failures_total").increment(1);
            if failure_log.ready() {
                tracing::warn!(failures_total = failures, %subject, error = %err,
                    "bus publish failed; subscribers will re-read events from the database");
            }
        }
    }
}

/// Resolves once the stop sender is gone (at once if it already is).
async fn closed(stopped: &mut watch::Receiver<()>) {
    while stopped.changed().await.is_ok() {}
}

/// Lets one caller through per interval, the first one at once; lock free.
struct Throttle {
    start: Instant,
    interval_ms: u64,
    next_ms: AtomicU64,
}

impl Throttle {
    fn new(interval: Duration) -> Self {
        Self {
            start: Instant::now(),
            interval_ms: u64::try_from(interval.as_millis()).unwrap_or(u64::MAX),
            next_ms: AtomicU64::new(0),
        }
    }

    fn ready(&self) -> bool {
        let now = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        let next = self.next_ms.load(Ordering::Relaxed);
        now >= next
            && self
                .next_ms
                .compare_exchange(
                    next,
                    now.saturating_add(self.interval_ms),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_events::{EventId, EventMeta, RunId, TenantId};
    use baton_testkit::TestNats;

    fn event(tenant: TenantId, run: RunId, version: i64) -> Envelope {
        Envelope {
            id: EventId::new(),
            stream: run,
            version,
            position: version,
            event_type: "turn.started".into(),
            schema: 1,
            data: serde_json::json!({}),
            meta: EventMeta::new(tenant),
            recorded_at: chrono::Utc::now(),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_publisher_task_ends_when_its_handle_drops_even_while_nats_is_down() {
        let mut nats = TestNats::start().await.expect("nats-server");
        // A client that buffers little while disconnected, so the task soon waits on it.
        let client = async_nats::ConnectOptions::new()
            .client_capacity(16)
            .connect(nats.url())
            .await
            .expect("connect");
        let (publisher, task) = Publisher::start(client.clone(), Subjects::default(), 4);
        nats.stop();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while client.connection_state() == async_nats::connection::State::Connected {
            assert!(
                tokio::time::Instant::now() < deadline,
                "client never noticed"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let (tenant, run) = (TenantId::new(), RunId::new());
        // Far more than the client buffers: the task ends up waiting on the client.
        for v in 1..=5000 {
            publisher.offer(&event(tenant, run, v));
            tokio::task::yield_now().await;
        }
        assert!(
            publisher.dropped() > 4900,
            "the task must be stuck on the client: {} dropped",
            publisher.dropped()
        );
        assert!(!task.is_finished());
        drop(publisher);
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("the publisher outlived its handle")
            .expect("the publisher ended cleanly");
    }

    #[test]
    fn a_throttle_lets_the_first_caller_through_then_none_until_the_interval_passes() {
        let t = Throttle::new(Duration::from_secs(3600));
        assert!(t.ready());
        assert!((0..1000).all(|_| !t.ready()));
        let t = Throttle::new(Duration::ZERO);
        assert!(t.ready() && t.ready());
    }
}
