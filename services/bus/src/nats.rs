//! The team tier's bus: events are published to `<prefix>.ev.<tenant>.<run>` after commit;
//! one wildcard subscription per replica feeds the local hub. Publishing never waits on
//! NATS: events go through a bounded queue to a background publisher, and a lost or
//! failed publish is counted and logged (throttled): subscribers fill the gap from the
//! database.
//!
//! Ephemeral deltas go to `<prefix>.delta.<tenant>.<run>` through the same queue (dropped
//! when it is half full). A replica takes a run's deltas only while it has local
//! subscribers of that run (see [`crate::deltas`]).

use crate::credentials::{NatsAuth, NatsTls};
use crate::deltas::DeltaFeeds;
use crate::hub::Hub;
use crate::publisher::Publisher;
use crate::subjects::Subjects;
use async_trait::async_trait;
use baton_core::StoreError;
use baton_core::ports::{ControlMessage, EventBus, Subscription};
use baton_events::{Envelope, MessageDelta, RunId, TenantId};
use futures::StreamExt;
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum NatsError {
    #[error("cannot connect to NATS: {0}")]
    Connect(String),
    #[error("cannot subscribe to {subject}: {reason}")]
    Subscribe { subject: String, reason: String },
}

/// `message` with the user names, passwords and tokens of the (comma-separated) NATS URLs
/// in `urls` masked, so a cause quoting them tells no secret. (The client's causes are I/O,
/// TLS, DNS and protocol errors, which do not quote the URL; this is the guard if one did.)
/// Pieces shorter than four characters are left, or every such letter would be masked.
fn without_credentials(message: &str, urls: &str) -> String {
    let mut out = message.to_owned();
    for url in urls.split(',') {
        let rest = url.trim().split_once("://").map_or(url, |(_, rest)| rest);
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        if let Some((userinfo, _)) = authority.rsplit_once('@') {
            for piece in userinfo.split(':').filter(|p| p.len() >= 4) {
                out = out.replace(piece, "***");
            }
        }
    }
    out
}

/// How a [`NatsBus`] connects and buffers;
/// `NatsOptions { publish_queue: 64, ..Default::default() }`.
#[derive(Debug, Clone)]
pub struct NatsOptions {
    /// The installation's subjects (its prefix).
    pub subjects: Subjects,
    /// Credentials beyond the URL's.
    pub auth: NatsAuth,
    pub tls: NatsTls,
    /// Each local subscriber's buffer, in events (at least 1); a subscriber that falls
    /// this far behind is closed and resumes from its cursor.
    pub subscriber_buffer: usize,
    /// Events waiting for the background publisher (at least 1). While NATS is slow or
    /// down this fills up, and further events are dropped and counted, not waited for.
    pub publish_queue: usize,
    /// How long the first connection may take before start-up fails.
    pub connect_timeout: Duration,
}

impl Default for NatsOptions {
    fn default() -> Self {
        Self {
            subjects: Subjects::default(),
            auth: NatsAuth::None,
            tls: NatsTls::default(),
            subscriber_buffer: 256,
            publish_queue: 8192,
            connect_timeout: Duration::from_secs(5),
        }
    }
}

pub struct NatsBus {
    client: async_nats::Client,
    subjects: Subjects,
    hub: Arc<Hub>,
    publisher: Publisher,
    forwarder: tokio::task::JoinHandle<()>,
    deltas: Arc<DeltaFeeds>,
}

/// How long subscribing may wait for the server to confirm a run's delta subscription
/// (only while connected; a later confirmation still delivers the deltas after it).
const DELTA_SUBSCRIBE_WAIT: Duration = Duration::from_secs(2);

impl NatsBus {
    /// [`NatsBus::connect_with`] with `buffer` per subscriber and default options.
    pub async fn connect(url: &str, buffer: usize) -> Result<Self, NatsError> {
        let options = NatsOptions {
            subscriber_buffer: buffer,
            ..NatsOptions::default()
        };
        Self::connect_with(url, options).await
    }

    /// Connects, subscribes to every event subject, starts feeding the local hub and
    /// starts the background publisher. Fails at once when the server is unreachable
    /// (start-up should say so, not hang); after that the client reconnects by itself.
    /// The URL may carry credentials; it never reaches logs or errors.
    pub async fn connect_with(url: &str, options: NatsOptions) -> Result<Self, NatsError> {
        // The process's rustls crypto provider is ring (the only one built in; reqwest is
        // built without its aws-lc-rs default). Installed explicitly, so TLS to NATS keeps
        // working should another provider ever be linked in.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let connect = async_nats::ConnectOptions::new()
            .connection_timeout(options.connect_timeout)
            .name("baton");
        let connect = options
            .auth
            .apply(options.tls.apply(connect))
            .await
            .map_err(|e| NatsError::Connect(format!("reading the NATS credentials file: {e}")))?;
        let client = connect
            .connect(url)
            .await
            .map_err(|e| NatsError::Connect(without_credentials(&e.to_string(), url)))?;
        let subjects = options.subjects;
        let hub = Arc::new(Hub::new(options.subscriber_buffer));
        let all_events = subjects.all_events();
        let mut sub =
            client
                .subscribe(all_events.clone())
                .await
                .map_err(|e| NatsError::Subscribe {
                    subject: all_events.clone(),
                    reason: e.to_string(),
                })?;
        // Make sure the server has the subscription before anyone publishes; an account
        // that may not subscribe there gets a permissions violation instead.
        round_trip(&client, &subjects, options.connect_timeout)
            .await
            .map_err(|reason| NatsError::Subscribe {
                subject: all_events,
                reason,
            })?;
        let feed = hub.clone();
        let forwarder = tokio::spawn(async move {
            while let Some(msg) = sub.next().await {
                match serde_json::from_slice::<Envelope>(&msg.payload) {
                    Ok(env) => feed.dispatch(&env),
                    Err(e) => tracing::warn!(subject = %msg.subject, error = %e,
                        "dropping an undecodable event message"),
                }
            }
        });
        // Detached: it ends soon after the publisher handle drops with the bus.
        let (publisher, _) =
            Publisher::start(client.clone(), subjects.clone(), options.publish_queue);
        let deltas = Arc::new(DeltaFeeds::new(
            client.clone(),
            subjects.clone(),
            hub.clone(),
        ));
        Ok(Self {
            client,
            subjects,
            hub,
            publisher,
            forwarder,
            deltas,
        })
    }

    pub fn hub(&self) -> &Arc<Hub> {
        &self.hub
    }

    /// Publishes the NATS client refused since start (each one costs subscribers
    /// latency only).
    pub fn publish_failures(&self) -> u64 {
        self.publisher.failures()
    }

    /// Events never handed to NATS because the publish queue was full, since start
    /// (each one costs subscribers latency only).
    pub fn publish_dropped(&self) -> u64 {
        self.publisher.dropped()
    }

    /// Deltas never handed to NATS because the publish queue was half full, since start.
    pub fn deltas_dropped(&self) -> u64 {
        self.publisher.deltas_dropped()
    }

    /// Runs whose deltas this replica takes from NATS (those with local subscribers).
    pub fn delta_subscriptions(&self) -> usize {
        self.deltas.len()
    }
}

impl Drop for NatsBus {
    /// Stops the forwarder; dropping the publisher handle stops the publisher.
    fn drop(&mut self) {
        self.forwarder.abort();
    }
}

#[async_trait]
impl EventBus for NatsBus {
    /// Queues the events for the background publisher and returns at once.
    async fn publish(&self, events: &[Envelope]) {
        for e in events {
            self.publisher.offer(e);
        }
    }

    /// Registers with the hub, and makes sure this replica takes the run's deltas from
    /// NATS for as long as the subscription lives.
    async fn subscribe(&self, tenant: TenantId, run: RunId) -> Result<Subscription, StoreError> {
        let feeds = Arc::downgrade(&self.deltas);
        let sub = self.hub.subscribe(tenant, run).and_release(move || {
            if let Some(feeds) = feeds.upgrade() {
                feeds.release(tenant, run);
            }
        });
        // Counted before the wait: should the caller give up on it, dropping `sub`
        // releases what was acquired.
        self.deltas.acquire(tenant, run, DELTA_SUBSCRIBE_WAIT).await;
        Ok(sub)
    }

    /// The client's connection state: publishing itself never fails, so this is where
    /// a NATS outage shows.
    async fn ping(&self) -> Result<(), StoreError> {
        match self.client.connection_state() {
            async_nats::connection::State::Connected => Ok(()),
            state => Err(StoreError::Unavailable(format!("NATS is {state}"))),
        }
    }

    /// Queues the delta for the background publisher, or drops it; never waits.
    fn publish_delta(&self, tenant: TenantId, run: RunId, delta: MessageDelta) {
        self.publisher.offer_delta(tenant, run, delta);
    }

    async fn publish_control(&self, msg: &ControlMessage) {
        self.publisher.offer_control(msg);
    }

    async fn subscribe_control(
        &self,
    ) -> Result<tokio::sync::mpsc::Receiver<ControlMessage>, StoreError> {
        let mut sub = self
            .client
            .subscribe(self.subjects.control())
            .await
            .map_err(|e| StoreError::Unavailable(format!("cannot subscribe to control: {e}")))?;
        // Control messages are hints: should the server not confirm in time, the
        // subscription still takes effect once it gets there.
        if let Err(reason) = round_trip(&self.client, &self.subjects, CONTROL_SUBSCRIBE_WAIT).await
        {
            tracing::warn!(%reason, "the control subscription is not confirmed yet");
        }
        let (tx, rx) = tokio::sync::mpsc::channel(CONTROL_BUFFER);
        tokio::spawn(async move {
            while let Some(msg) = sub.next().await {
                match serde_json::from_slice::<ControlMessage>(&msg.payload) {
                    // A full receiver loses hints, never work.
                    Ok(control) => {
                        if let Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) =
                            tx.try_send(control)
                        {
                            return;
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "dropping an undecodable control message"),
                }
            }
        });
        Ok(rx)
    }

    async fn close(&self, timeout: Duration) {
        self.publisher.flush(timeout).await;
    }
}

/// Control messages buffered per subscriber.
const CONTROL_BUFFER: usize = 1024;

/// How long subscribing to control messages waits for the server to confirm.
const CONTROL_SUBSCRIBE_WAIT: Duration = Duration::from_secs(5);

/// Waits, at most `timeout`, until the server has processed everything this client sent
/// so far, its subscriptions included: the server handles a connection's messages in
/// order, so once a message to a fresh probe subject of ours comes back, what was sent
/// before it has taken effect. (`Client::flush` only empties the client's own write
/// buffer.) The probe is under the installation's prefix, which its account allows.
pub(crate) async fn round_trip(
    client: &async_nats::Client,
    subjects: &Subjects,
    timeout: Duration,
) -> Result<(), String> {
    let probe = subjects.probe();
    let mut echo = client
        .subscribe(probe.clone())
        .await
        .map_err(|e| e.to_string())?;
    client
        .publish(probe, bytes::Bytes::new())
        .await
        .map_err(|e| e.to_string())?;
    match tokio::time::timeout(timeout, echo.next()).await {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err("the connection closed".into()),
        Err(_) => Err(format!("no answer from the server within {timeout:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::without_credentials;

    #[test]
    fn a_cause_quoting_a_urls_credentials_is_masked() {
        let said = "auth failed for nats://alice:s3cret-pass@h:4222 (token tok-12345)";
        let masked = without_credentials(
            said,
            "nats://alice:s3cret-pass@h:4222, nats://tok-12345@other:4222",
        );
        assert_eq!(masked, "auth failed for nats://***:***@h:4222 (token ***)");
        assert_eq!(without_credentials("IO error", "nats://h:4222"), "IO error");
    }
}
