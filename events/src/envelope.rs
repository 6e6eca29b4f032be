//! The event envelope as stored and published, and the decoding of its payload.
//!
//! Reading a stream never fails because of a payload: an event whose type or schema this
//! build does not know decodes to [`Decoded::Unknown`] and keeps its raw JSON.

use crate::ids::{EventId, RunId, TenantId};
use crate::payloads::RunEvent;
use crate::upcast;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::sync::{Arc, OnceLock};

/// Who and what caused an event. Extended over time; unknown fields are kept on read
/// by older builds only as far as serde allows, so new fields must be optional.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct EventMeta {
    pub tenant: TenantId,
    /// The principal that caused the event: `key:<id>`, `local`, `engine`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    /// The client's idempotency key for the command that produced the event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// Groups every event of one logical operation (a turn, a request).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation: Option<EventId>,
    /// The event that directly caused this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub causation: Option<EventId>,
    /// The replica that wrote the event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica: Option<String>,
    /// W3C trace context of the writer, for cross-replica traces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

impl EventMeta {
    pub fn new(tenant: TenantId) -> Self {
        Self {
            tenant,
            actor: None,
            request_id: None,
            correlation: None,
            causation: None,
            replica: None,
            traceparent: None,
        }
    }
}

/// A stored event. `version` is the 1-based position in its stream (no gaps);
/// `position` is the global order assigned by the store at append time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Envelope {
    pub id: EventId,
    pub stream: RunId,
    pub version: i64,
    pub position: i64,
    #[serde(rename = "type")]
    pub event_type: String,
    pub schema: u32,
    #[schema(value_type = Object)]
    pub data: serde_json::Value,
    pub meta: EventMeta,
    pub recorded_at: DateTime<Utc>,
}

/// An event as one process hands it to its many readers (every stream following the
/// run): shared rather than copied, and encoded as JSON at most once, by whichever reader
/// asks first, however many streams send it.
#[derive(Clone)]
pub struct SharedEvent(Arc<Shared>);

struct Shared {
    envelope: Envelope,
    json: OnceLock<Result<String, String>>,
}

impl SharedEvent {
    pub fn new(envelope: Envelope) -> Self {
        Self(Arc::new(Shared {
            envelope,
            json: OnceLock::new(),
        }))
    }

    /// The envelope as JSON (what `serde_json::to_string` makes of it), encoded on the
    /// first call; the encoder's message if it cannot be.
    pub fn json(&self) -> Result<&str, &str> {
        self.0
            .json
            .get_or_init(|| serde_json::to_string(&self.0.envelope).map_err(|e| e.to_string()))
            .as_deref()
            .map_err(String::as_str)
    }

    /// The envelope, copied out (cheaply when this is its last holder).
    pub fn into_envelope(self) -> Envelope {
        match Arc::try_unwrap(self.0) {
            Ok(shared) => shared.envelope,
            Err(arc) => arc.envelope.clone(),
        }
    }
}

impl std::ops::Deref for SharedEvent {
    type Target = Envelope;

    fn deref(&self) -> &Envelope {
        &self.0.envelope
    }
}

impl From<Envelope> for SharedEvent {
    fn from(envelope: Envelope) -> Self {
        Self::new(envelope)
    }
}

impl PartialEq for SharedEvent {
    fn eq(&self, other: &Self) -> bool {
        self.0.envelope == other.0.envelope
    }
}

impl std::fmt::Debug for SharedEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.envelope.fmt(f)
    }
}

/// The payload of an envelope, decoded as far as this build can.
#[derive(Debug, Clone, PartialEq)]
pub enum Decoded {
    Known(RunEvent),
    /// A type or schema version this build does not know, or a payload that does not
    /// match its declared schema. Kept as raw JSON; never an error that hides the stream.
    Unknown {
        reason: String,
    },
}

impl Envelope {
    /// Decodes the payload, upcasting older schema versions first.
    pub fn decode(&self) -> Decoded {
        decode_payload(&self.event_type, self.schema, &self.data)
    }

    /// Whether this event ends its run for good.
    pub fn is_terminal(&self) -> bool {
        matches!(self.decode(), Decoded::Known(e) if e.is_terminal())
    }
}

/// Decodes a raw payload of the given type and schema.
pub fn decode_payload(event_type: &str, schema: u32, data: &serde_json::Value) -> Decoded {
    match upcast::upcast(event_type, schema, data.clone()) {
        Ok(data) => {
            let tagged = serde_json::json!({ "type": event_type, "data": data });
            match serde_json::from_value::<RunEvent>(tagged) {
                Ok(event) => Decoded::Known(event),
                Err(e) => Decoded::Unknown {
                    reason: format!("payload does not match {event_type} v{schema}: {e}"),
                },
            }
        }
        Err(reason) => Decoded::Unknown { reason },
    }
}

/// An event about to be appended; the store gives it a version, position and time.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    pub id: EventId,
    pub event: RunEvent,
    pub meta: EventMeta,
}

impl NewEvent {
    pub fn new(event: RunEvent, meta: EventMeta) -> Self {
        Self {
            id: EventId::new(),
            event,
            meta,
        }
    }

    pub fn event_type(&self) -> &'static str {
        self.event.event_type()
    }

    /// The payload as stored: the `data` half of the tagged representation.
    pub fn data(&self) -> serde_json::Value {
        self.event.data()
    }
}
