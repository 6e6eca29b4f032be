//! Baton's event catalogue: the wire and storage contract of every run stream.
//!
//! This crate owns the event [`Envelope`], the typed payloads of [`RunEvent`], the
//! schema versions and the upcasters that keep old events readable. It does no I/O.
//! Payloads are only ever extended; a changed shape gets a new schema version and an
//! upcaster in [`upcast`]. Golden fixtures in `tests/fixtures/` must deserialize forever.

pub mod envelope;
pub mod ids;
pub mod payloads;
pub mod tools;
pub mod upcast;
pub mod workspace;

pub use envelope::{Decoded, Envelope, EventMeta, NewEvent, SharedEvent};
pub use ids::{
    AgentId, ApprovalId, CheckpointId, EventId, McpServerId, MessageId, ReceiptId, RunId,
    ScheduleId, TenantId, ToolId, WebhookId,
};
pub use payloads::*;
pub use tools::*;
pub use workspace::*;
