//! Baton's domain types: runs and their messages, tool-call receipts, agents, tools,
//! tenants and API keys, users, members, invitations and sessions, the audit stream's
//! entries, egress allowlists, retention policies, schedules, webhooks, MCP servers, run workspaces' files, what may be shown of secrets and
//! checkpoints, and who may do what (`access.rs`). Pure data and pure functions; every
//! port and use case speaks in these types.

mod access;
mod agent;
mod audit;
mod checkpoint;
mod egress_allowlist;
mod environment;
mod invitation;
mod mcp;
mod receipt;
mod retention;
mod run;
mod schedule;
mod secret;
mod stream_ticket;
mod tenant;
mod tool;
mod user;
mod webhook;
mod workspace;

pub use access::*;
pub use agent::*;
pub use audit::*;
pub use checkpoint::*;
pub use egress_allowlist::*;
pub use environment::*;
pub use invitation::*;
pub use mcp::*;
pub use receipt::*;
pub use retention::*;
pub use run::*;
pub use schedule::*;
pub use secret::*;
pub use stream_ticket::*;
pub use tenant::*;
pub use tool::*;
pub use user::*;
pub use webhook::*;
pub use workspace::*;

#[cfg(test)]
mod tests;
