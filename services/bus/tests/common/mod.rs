//! Helpers shared by the bus test binaries: events and a receive with a deadline.

use baton_core::ports::Subscription;
use baton_events::{Envelope, EventId, EventMeta, RunId, SharedEvent, TenantId};
use std::time::Duration;

pub fn event(tenant: TenantId, run: RunId, version: i64) -> Envelope {
    Envelope {
        id: EventId::new(),
        stream: run,
        version,
        position: version,
        event_type: "turn.started".into(),
        schema: 1,
        data: serde_json::json!({ "turn": version }),
        meta: EventMeta::new(tenant),
        recorded_at: chrono::Utc::now(),
    }
}

/// The next event, or `None` when the feed ends or nothing comes within 15 s.
pub async fn recv(sub: &mut Subscription) -> Option<Envelope> {
    // Generous: a loaded CI machine can stall a loopback round trip for seconds.
    tokio::time::timeout(Duration::from_secs(15), sub.events.recv())
        .await
        .ok()
        .flatten()
        .map(SharedEvent::into_envelope)
}
