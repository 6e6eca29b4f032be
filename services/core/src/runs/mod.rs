//! Run use cases: the commands and queries clients call ([`Runs`]: `commands.rs`, and the
//! actions on a waiting turn in `actions.rs`), decided by the pure functions of [`decide`];
//! following a run's events live ([`follow`]) and waiting for a turn to settle
//! (`wait.rs`); deleting a run (`delete.rs`); a `delegate` call's child run
//! (`delegate.rs`); a run's checkpoints; and the [`Recorder`] every writer appends and
//! publishes through.

mod actions;
mod checkpoints;
mod commands;
pub mod decide;
mod delegate;
mod delete;
mod follow;
mod idempotency;
pub mod metadata;
mod recorder;
mod requests;
mod wait;

pub(crate) use delete::tombstone;

pub use checkpoints::Checkpoints;
pub use commands::Runs;
pub(crate) use commands::{MAX_ATTEMPTS, meta};
pub use delegate::{MAX_CHILDREN, MAX_DEPTH};
pub use follow::{Live, MAX_BACKOFF, follow, follow_live};
pub use recorder::Recorder;
pub use requests::*;
