//! Recording events: append to the run's stream, then publish what was committed. The one
//! path every writer (use cases and the engine) takes, with the append metrics.

use crate::error::StoreError;
use crate::ports::{AppendOutcome, AppendRequest, EventBus, EventLog};
use baton_events::TenantId;
use std::sync::Arc;

/// Appends and then publishes what was committed. The one path every writer uses.
#[derive(Clone)]
pub struct Recorder {
    pub log: Arc<dyn EventLog>,
    pub bus: Arc<dyn EventBus>,
}

impl Recorder {
    pub async fn append(
        &self,
        tenant: TenantId,
        req: AppendRequest,
    ) -> Result<AppendOutcome, StoreError> {
        let started = std::time::Instant::now();
        let outcome = self.log.append(tenant, req).await;
        metrics::histogram!("baton_event_append_duration_seconds")
            .record(started.elapsed().as_secs_f64());
        match &outcome {
            Ok(AppendOutcome::Appended { events, .. }) => {
                metrics::counter!("baton_events_appended_total").increment(events.len() as u64);
                self.bus.publish(events).await;
            }
            Ok(AppendOutcome::Duplicate(_)) => {}
            Err(StoreError::Conflict { .. }) => {
                metrics::counter!("baton_append_conflicts_total").increment(1);
            }
            Err(StoreError::Fenced) => metrics::counter!("baton_appends_fenced_total").increment(1),
            Err(_) => metrics::counter!("baton_append_errors_total").increment(1),
        }
        outcome
    }
}
