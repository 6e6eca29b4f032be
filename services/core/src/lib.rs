//! Baton's domain and what it does, with no I/O but through its ports.
//!
//! - [`model`]: the domain types (runs, receipts, agents, tools, tenants, users, audit
//!   entries) and who may do what;
//! - [`ports`]: the traits the store, bus and engine implement, one file per port;
//! - the use cases, one module each: [`runs`], [`agents`], [`tools`], [`secrets`],
//!   [`api_keys`], [`users`], [`members`], [`invitations`], [`auth`], [`encryption_keys`],
//!   [`audit`], [`retention`], [`workspace`];
//! - [`crypto`]: the encryption keys that seal records at rest, password hashing and bearer
//!   tokens;
//! - [`egress`]: which addresses and hosts an outbound call a tenant chose may reach, and
//!   [`egress_allowlists`], the tenant's own narrower list.
//!
//! Every port method and use case takes the caller's [`TenantId`] (or a [`Principal`]
//! carrying it) first.

pub mod agents;
pub mod api_keys;
pub mod audit;
pub mod auth;
pub mod crypto;
pub mod egress;
pub mod egress_allowlists;
pub mod encryption_keys;
pub mod environments;
pub mod error;
pub mod invitations;
pub mod labels;
pub mod mcp_servers;
pub mod members;
pub mod model;
pub mod page;
pub mod ports;
pub mod retention;
pub mod runs;
pub mod schedules;
pub mod secrets;
pub mod stream_tickets;
pub mod tools;
pub mod trace;
pub mod users;
pub mod validate;
pub mod webhooks;
pub mod workspace;

pub use baton_events::{
    AgentId, EventId, McpServerId, MessageId, RunId, ScheduleId, TenantId, ToolId, WebhookId,
};
pub use error::{CoreError, StoreError};
pub use model::{Action, Principal, Role};
