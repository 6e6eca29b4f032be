//! Recording events: append to the run's stream, then publish what was committed. The one
//! path every writer (use cases and the engine) takes, with the append metrics.

use crate::error::StoreError;
use crate::ports::{AppendOutcome, AppendRequest, EventBus, EventLog};
use baton_events::{Envelope, TenantId};
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
                events.iter().for_each(count);
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

/// Counts what operators watch, from an event just committed (every writer appends here,
/// so each is counted once): turns started, completed and failed by reason; tool calls
/// made by kind, and how they ended by source (a client's output, or Baton's result).
fn count(event: &Envelope) {
    let code = |data: &serde_json::Value| {
        let code = data["error"]["code"].as_str().unwrap_or("unknown");
        crate::labels::bounded("failure_reason", code)
    };
    let text =
        |data: &serde_json::Value, key: &str| data[key].as_str().unwrap_or("unknown").to_owned();
    match event.event_type.as_str() {
        "turn.started" => metrics::counter!("baton_turns_started_total").increment(1),
        "turn.completed" => metrics::counter!("baton_turns_completed_total").increment(1),
        "turn.failed" => {
            metrics::counter!("baton_turns_failed_total", "reason" => code(&event.data))
                .increment(1);
        }
        "tool.intent" => {
            metrics::counter!("baton_tool_calls_total", "kind" => text(&event.data, "kind"))
                .increment(1);
        }
        "tool.result" => {
            let outcome = text(&event.data, "outcome");
            // A client tool's output, or a result Baton recorded (its own call's, or that
            // of a call it refused or cancelled).
            let source = if event.data["from_client"].as_bool() == Some(true) {
                "client"
            } else {
                "baton"
            };
            metrics::counter!(
                "baton_tool_call_outcomes_total",
                "source" => source,
                "outcome" => outcome,
            )
            .increment(1);
        }
        "tool.uncertain" => {
            metrics::counter!(
                "baton_tool_call_outcomes_total",
                "source" => "baton",
                "outcome" => "uncertain",
            )
            .increment(1);
        }
        _ => {}
    }
}
