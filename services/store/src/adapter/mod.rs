//! The port implementations, each written once for every backend: `impl<B: Backend>
//! <Port> for Store<B>` in the file named after the port's in `baton_core::ports`
//! (`runs.rs` is `RunReader`, `append.rs` `EventLog`, `leases.rs`, `agents.rs`,
//! `tools.rs`, `secrets.rs`, `checkpoints.rs`, `sealed.rs`, `tenants.rs`, `api_keys.rs`,
//! `users.rs`, `invitations.rs`, `egress_allowlists.rs`, `retention.rs`, `audit.rs`),
//! with its row types in the same-named module of `crate::rows` where it has any.
//! Two helpers have files of their own: `reads.rs`, the skeletons the methods share (read
//! on a scoped connection, a row by id, a page newest first or in key order, a page of a
//! run's rows, a statement alone in a write, the commit), `receipts.rs`, the receipts
//! projection inside the append, and `workspace.rs`, whose `WorkspaceStore` also folds
//! an append's `workspace.changed` events into the files and blobs. An audited change (`audit.rs`, `Audited`) commits with
//! its audit entry.
//!
//! A method builds its statements as [`Query`](crate::query::Query)s, the `SELECT`s a file
//! reads named as consts at its top, and runs them on a connection of the store's `pools`;
//! what differs between Postgres and SQLite (two locking clauses, error classification,
//! sqlx's typed binding and execution) is [`Backend`](crate::backend::Backend)'s, so both
//! behave identically by construction.
//!
//! Every method takes its connection from `self.pools`, with `self.pools.read(kind, scope)`
//! (a read-only transaction on Postgres) or `self.pools.write(kind, scope)` (a transaction
//! to commit), or through the helpers of `reads.rs` and `audit.rs`, which do the same; each
//! names the pool and the [`Scope`](crate::Scope) it works in: `Scope::Tenant` wherever a
//! tenant is known, `Scope::CrossTenant` only on the paths that are cross-tenant by nature
//! (lease claims across tenants and renewal, key lookups by hash, a user's memberships
//! and invitations, key rotation over all tenants, the retention job), `Scope::NoTenant`
//! where only tables of no tenant are touched. No other way to a connection exists here:
//! the pools are private to `crate::pools`.

mod agents;
mod api_keys;
mod append;
mod audit;
mod checkpoints;
mod deletion;
mod egress_allowlists;
mod environments;
mod invitations;
mod leases;
mod mcp;
mod reads;
mod receipts;
mod retention;
mod runs;
mod schedules;
mod sealed;
mod secrets;
mod stats;
mod stream_tickets;
mod tenants;
mod tools;
mod users;
mod webhooks;
mod workspace;

use baton_core::StoreError;

/// What the port methods return.
type Result<T, E = StoreError> = std::result::Result<T, E>;
