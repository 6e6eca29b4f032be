//! Event bus adapters: NATS for the team tier, in-process for the embedded tier.
//!
//! Both feed the same local [`Hub`], which fans a run's events out to this replica's
//! subscribers through bounded buffers. With NATS, every replica subscribes once to all
//! event subjects and feeds its hub, so any replica's SSE clients see every writer's
//! events. The database stays the source of truth: publishing is best effort and never
//! makes the caller wait on the broker.
//!
//! Ephemeral deltas (a model reply's tokens) travel the same way but are never stored:
//! each subscriber gets them through a buffer of their own, dropped when full, so they
//! never close a durable feed. With NATS a replica takes a run's deltas only while it has
//! local subscribers of that run.

mod credentials;
mod deltas;
mod hub;
mod in_process;
mod nats;
mod publisher;
pub mod subjects;

pub use subjects::Subjects;

pub use credentials::{NatsAuth, NatsTls};
pub use hub::Hub;
pub use in_process::InProcessBus;
pub use nats::{NatsBus, NatsError, NatsOptions};
