//! Baton's execution backend: commands run in bubblewrap sandboxes over a private copy of
//! a run's workspace.
//!
//! - [`workdir`]: the copy — materialized from the store's files into a fresh directory,
//!   compared afterwards into the [`ChangeSet`] to promote, removed when dropped;
//! - [`bwrap`]: the sandbox — namespaces, read-only system directories, kernel limits, a
//!   wall-time kill that takes every process of the command with it;
//! - [`relay`]: a networked command's only way out, to the egress proxy.
//!
//! What a command may change is only its copy; whether the change set lands in the
//! workspace (promoted with the tool's result, or discarded on a timeout, a kill or a
//! crash) is the engine's decision.

pub mod bwrap;
pub mod relay;
pub mod workdir;

pub use bwrap::{Exit, Limits, Outcome, Relay, Sandbox, Spec, Unavailable};
pub use workdir::{Change, ChangeSet, Owner, Refused, Workdir};
