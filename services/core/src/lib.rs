//! Baton's domain: the run model and its projection, the use cases the API and the engine
//! call, the authorization decisions, and the ports (traits) that adapters implement.
//!
//! Nothing here does I/O except through a port. Every port method and use case takes the
//! caller's [`TenantId`] (or a [`Principal`] carrying it) first.

pub mod agents;
pub mod api_keys;
pub mod audit;
pub mod auth;
pub mod crypto;
pub mod error;
pub mod keys;
pub mod model;
pub mod page;
pub mod ports;
pub mod rotation;
pub mod runs;
pub mod secrets;
pub mod tools;
pub mod trace;
pub mod users;
pub mod validate;

pub use auth::{Action, Principal, Role};
pub use baton_events::{AgentId, EventId, MessageId, RunId, TenantId, ToolId};
pub use error::{CoreError, StoreError};
