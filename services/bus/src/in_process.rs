//! The embedded tier's bus: publishing dispatches straight to the local hub.

use crate::hub::Hub;
use async_trait::async_trait;
use baton_core::StoreError;
use baton_core::ports::{EventBus, Subscription};
use baton_events::{Envelope, RunId, TenantId};
use std::sync::Arc;

#[derive(Clone)]
pub struct InProcessBus {
    hub: Arc<Hub>,
}

impl InProcessBus {
    pub fn new(buffer: usize) -> Self {
        Self {
            hub: Arc::new(Hub::new(buffer)),
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
}
