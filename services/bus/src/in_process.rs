//! The embedded tier's bus: publishing (events and deltas) dispatches straight to the
//! local hub.

use crate::hub::Hub;
use async_trait::async_trait;
use baton_core::StoreError;
use baton_core::ports::{ControlMessage, EventBus, Subscription};
use baton_events::{Envelope, MessageDelta, RunId, TenantId};
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::mpsc;

/// Control messages buffered per subscriber.
const CONTROL_BUFFER: usize = 1024;

#[derive(Clone)]
pub struct InProcessBus {
    hub: Arc<Hub>,
    control: Arc<Mutex<Vec<mpsc::Sender<ControlMessage>>>>,
}

impl InProcessBus {
    pub fn new(buffer: usize) -> Self {
        Self {
            hub: Arc::new(Hub::new(buffer)),
            control: Arc::default(),
        }
    }

    pub fn hub(&self) -> &Arc<Hub> {
        &self.hub
    }
}

#[async_trait]
impl EventBus for InProcessBus {
    async fn publish(&self, events: &[Envelope]) {
        for e in events {
            self.hub.dispatch(e);
        }
    }

    async fn subscribe(&self, tenant: TenantId, run: RunId) -> Result<Subscription, StoreError> {
        Ok(self.hub.subscribe(tenant, run))
    }

    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// Hands the delta to the run's subscribers at once; those without room lose it.
    fn publish_delta(&self, tenant: TenantId, run: RunId, delta: MessageDelta) {
        self.hub.dispatch_delta(tenant, run, &delta);
    }

    async fn publish_control(&self, msg: &ControlMessage) {
        let mut subs = self.control.lock().unwrap_or_else(PoisonError::into_inner);
        // A full receiver loses hints; a closed one is forgotten.
        subs.retain(|tx| {
            !matches!(
                tx.try_send(msg.clone()),
                Err(mpsc::error::TrySendError::Closed(_))
            )
        });
    }

    async fn subscribe_control(&self) -> Result<mpsc::Receiver<ControlMessage>, StoreError> {
        let (tx, rx) = mpsc::channel(CONTROL_BUFFER);
        self.control
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(tx);
        Ok(rx)
    }
}
