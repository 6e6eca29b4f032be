//! Schema versions per event type and the upcasters that lift old payloads to the shape
//! this build reads. Events are forever: every schema version ever written stays listed.
//!
//! To change a payload's shape: bump its entry in `SCHEMAS`, add a step to [`upcast`]
//! that turns version N-1 data into version N, and add a golden fixture of the old shape
//! beside one of the new (the golden tests ask for one per entry of [`known_types`]).

use serde_json::Value;

/// The newest schema version of each known event type.
const SCHEMAS: &[(&str, u32)] = &[
    ("run.created", 1),
    ("message.appended", 1),
    ("message.queued", 1),
    ("turn.requested", 1),
    ("turn.started", 1),
    ("turn.completed", 1),
    ("turn.failed", 1),
    ("turn.interrupted", 1),
    ("run.updated", 1),
    ("run.cancel_requested", 1),
    ("run.cancelled", 1),
    ("run.completed", 1),
    ("run.failed", 1),
    ("run.deleted", 1),
    ("lease.acquired", 1),
    ("lease.released", 1),
    ("model.completed", 1),
    ("tool.intent", 1),
    ("tool.result", 1),
    ("tool.uncertain", 1),
    ("tool.resolved", 1),
    ("approval.requested", 1),
    ("approval.decided", 1),
    ("checkpoint.saved", 1),
    ("workspace.changed", 1),
];

/// Every event type this build knows, with its newest schema version: the types it
/// writes, each of which must have a golden fixture at that version.
pub fn known_types() -> impl Iterator<Item = (&'static str, u32)> {
    SCHEMAS.iter().copied()
}

/// The newest schema version of `event_type`, or `None` for a type this build does not know.
pub fn current_schema(event_type: &str) -> Option<u32> {
    SCHEMAS
        .iter()
        .find(|(t, _)| *t == event_type)
        .map(|(_, v)| *v)
}

/// Lifts `data` written with `schema` to the current schema of `event_type`.
/// Fails (with a reason) for an unknown type or a schema newer than this build knows:
/// such events are left to a newer replica and served as raw JSON.
pub fn upcast(event_type: &str, schema: u32, data: Value) -> Result<Value, String> {
    let Some(current) = current_schema(event_type) else {
        return Err(format!("unknown event type {event_type}"));
    };
    if schema == 0 || schema > current {
        return Err(format!(
            "{event_type} schema v{schema} is not supported by this build (knows up to v{current})"
        ));
    }
    // No type has needed an upcaster yet: every known type is still at v1.
    Ok(data)
}
