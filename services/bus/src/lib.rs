//! Event bus adapters: NATS for the team tier, in-process for the embedded tier.
//!
//! Both feed the same local [`Hub`], which fans a run's events out to this replica's
//! subscribers through bounded buffers. With NATS, every replica subscribes once to all
//! event subjects and feeds its hub, so any replica's SSE clients see every writer's
//! events. The database stays the source of truth: publishing is best effort and never
//! makes the caller wait on the broker.

mod hub;
mod in_process;
mod nats;
mod publisher;
pub mod subjects;

pub use hub::Hub;
pub use in_process::InProcessBus;
pub use nats::{NatsBus, NatsError, NatsOptions};
