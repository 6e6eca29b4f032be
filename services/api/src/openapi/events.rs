//! Run events as the API serves them: an envelope (`baton_events::Envelope`) whose `type`
//! says what its `data` holds.
//!
//! utoipa derives `RunEvent` as the event catalogue stores it, adjacently tagged: one
//! `{type, data}` object per event type, `data` a reference to its payload schema
//! (`RunCreated`, `ModelCompleted`, ...). Here each becomes a whole envelope,
//! `<Payload>Event`: the envelope's fields with `type` a `const` and `data` the payload.
//! `RunEvent` becomes the `oneOf` of those and of `UnknownEvent`, an envelope of any other
//! type: a newer replica may write types this build does not know, and clients must skip
//! them, so the union stays open. The generic `Envelope` is not served under its own
//! name: `UnknownEvent` is that shape.

use serde_json::{Value, json};

const SCHEMAS: &str = "#/components/schemas/";

/// Replaces the derived `RunEvent` with the union of typed envelopes.
pub(super) fn type_events(doc: &mut Value) {
    let schemas = &mut doc["components"]["schemas"];
    let envelope = schemas
        .as_object_mut()
        .and_then(|s| s.remove("Envelope"))
        .expect("the document registers baton_events::Envelope");
    let derived = schemas["RunEvent"]["oneOf"]
        .as_array()
        .cloned()
        .expect("RunEvent is a oneOf, one variant per event type");
    let mut refs = Vec::new();
    let mut known = Vec::new();
    for variant in derived {
        let event_type = variant["properties"]["type"]["enum"][0]
            .as_str()
            .expect("each RunEvent variant has its type")
            .to_string();
        let data = variant["properties"]["data"].clone();
        let payload = data["$ref"]
            .as_str()
            .and_then(|r| r.strip_prefix(SCHEMAS))
            .expect("each RunEvent variant's data is a payload schema")
            .to_string();
        let mut typed = envelope.clone();
        typed["description"] = json!(format!(
            "A `{event_type}` event: its `data` is a `{payload}`."
        ));
        typed["properties"]["type"] = json!({ "type": "string", "const": event_type });
        typed["properties"]["data"] = data;
        let name = format!("{payload}Event");
        refs.push(json!({ "$ref": format!("{SCHEMAS}{name}") }));
        schemas[&name] = typed;
        known.push(event_type);
    }
    let mut unknown = envelope;
    unknown["description"] = json!(
        "An event of a type this document does not list (written by a newer version): \
         skip it, or read its `data` as plain JSON."
    );
    unknown["properties"]["type"] = json!({ "type": "string", "not": { "enum": known } });
    schemas["UnknownEvent"] = unknown;
    refs.push(json!({ "$ref": format!("{SCHEMAS}UnknownEvent") }));
    schemas["RunEvent"] = json!({
        "description": "One event of a run's stream: an envelope whose `type` says what its \
            `data` holds. `version` numbers the run's events from 1 without gaps. Types are \
            added over time: skip an `UnknownEvent`.",
        "oneOf": refs,
    });
}
