//! The team tier's bus: events are published to `baton.ev.<tenant>.<run>` after commit;
//! one wildcard subscription per replica feeds the local hub. A failed publish is logged
//! and counted: subscribers fill the gap from the database.

use crate::hub::Hub;
use crate::subjects;
use async_trait::async_trait;
use baton_core::StoreError;
use baton_core::ports::{EventBus, Subscription};
use baton_events::{Envelope, RunId, TenantId};
use futures::StreamExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum NatsError {
    #[error("cannot connect to NATS: {0}")]
    Connect(String),
    #[error("cannot subscribe to {subject}: {reason}")]
    Subscribe { subject: String, reason: String },
}

pub struct NatsBus {
    client: async_nats::Client,
    hub: Arc<Hub>,
    publish_failures: AtomicU64,
    forwarder: tokio::task::JoinHandle<()>,
}

impl NatsBus {
    /// Connects, subscribes to every event subject and starts feeding the local hub.
    /// Fails at once when the server is unreachable (start-up should say so, not hang);
    /// after that the client reconnects by itself. The URL may carry credentials; it
    /// never reaches logs or errors.
    pub async fn connect(url: &str, buffer: usize) -> Result<Self, NatsError> {
        let client = async_nats::ConnectOptions::new()
            .connection_timeout(Duration::from_secs(5))
            .name("baton")
            .connect(url)
            .await
            .map_err(|e| NatsError::Connect(e.kind().to_string()))?;
        let hub = Arc::new(Hub::new(buffer));
        let mut sub =
            client
                .subscribe(subjects::ALL_EVENTS)
                .await
                .map_err(|e| NatsError::Subscribe {
                    subject: subjects::ALL_EVENTS.into(),
                    reason: e.to_string(),
                })?;
        // Make sure the server has the subscription before anyone publishes.
        client.flush().await.map_err(|e| NatsError::Subscribe {
            subject: subjects::ALL_EVENTS.into(),
            reason: e.to_string(),
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
        Ok(Self {
            client,
            hub,
            publish_failures: AtomicU64::new(0),
            forwarder,
        })
    }

    pub fn hub(&self) -> &Arc<Hub> {
        &self.hub
    }

    /// Publishes that failed since start (each one costs subscribers latency only).
    pub fn publish_failures(&self) -> u64 {
        self.publish_failures.load(Ordering::Relaxed)
    }
}

impl Drop for NatsBus {
    fn drop(&mut self) {
        self.forwarder.abort();
    }
}

#[async_trait]
impl EventBus for NatsBus {
    async fn publish(&self, events: &[Envelope]) {
        for e in events {
            let subject = subjects::event(e.meta.tenant, e.stream);
            let payload = match serde_json::to_vec(e) {
                Ok(p) => p,
                Err(err) => {
                    tracing::error!(error = %err, "cannot encode an event for the bus");
                    continue;
                }
            };
            let mut headers = async_nats::HeaderMap::new();
            if let Some(tp) = &e.meta.traceparent {
                headers.insert("traceparent", tp.as_str());
            }
            if let Err(err) = self
                .client
                .publish_with_headers(subject, headers, payload.into())
                .await
            {
                self.publish_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(run_id = %e.stream, version = e.version, error = %err,
                    "event publish failed; subscribers will re-read it from the database");
            }
        }
    }

    async fn subscribe(&self, tenant: TenantId, run: RunId) -> Result<Subscription, StoreError> {
        Ok(self.hub.subscribe(tenant, run))
    }

    async fn ping(&self) -> Result<(), StoreError> {
        match self.client.connection_state() {
            async_nats::connection::State::Connected => Ok(()),
            state => Err(StoreError::Unavailable(format!("NATS is {state}"))),
        }
    }
}
