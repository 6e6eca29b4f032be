//! The port implementations both adapters share, written once: `RunStore` (`runs.rs`),
//! the append transaction (`append.rs`) with its receipts projection (`receipts.rs`),
//! `LeaseStore` (`leases.rs`), `AgentStore` (`agents.rs`), `ToolStore` (`tools.rs`),
//! `SecretStore` (`secrets.rs`), `SealedStore` for key rotation (`sealed.rs`),
//! `TenantStore` (`tenants.rs`), `UserStore` (`users.rs`) and `AuditStore` (`audit.rs`,
//! with the insert every audited change makes in its transaction), plus the part of
//! driver-error classification common to both.
//!
//! Each port is a `macro_rules!` that an adapter expands with [`impl_ports!`], so every
//! query is written once yet compiled against the driver's concrete types (generic
//! `sqlx::Database` code would need a long list of bounds on every function). The
//! expansion lives in a `const _: () = { ... };` block, which keeps its imports and
//! helper functions out of the adapter's namespace. The backend differences are the
//! arguments of [`impl_ports!`] and `crate::pools`; everything else behaves identically by
//! construction.
//!
//! Every method takes its connection from the store's `pools` field, with
//! `self.pools.read(kind, scope)` (a read-only transaction on Postgres) or
//! `self.pools.write(kind, scope)` (a transaction to commit), naming the pool and the
//! [`Scope`](crate::Scope) it works in: `Scope::Tenant` wherever a tenant is known,
//! `Scope::CrossTenant` only on the paths that are cross-tenant by nature (lease claims
//! across tenants and renewal, key lookups by hash, a user's memberships, key rotation
//! over all tenants), `Scope::NoTenant` where only tables of no tenant are touched. No
//! other way to a connection exists here: the pools are private to `crate::pools`.

mod agents;
mod api_keys;
mod append;
pub(crate) mod audit;
mod checkpoints;
mod leases;
mod reads;
mod receipts;
mod runs;
mod sealed;
mod secrets;
mod tenants;
mod tools;
mod users;

pub(crate) use append::impl_append;
pub(crate) use receipts::receipts_projection;

/// Implements `RunStore`, `LeaseStore`, `AgentStore`, `ToolStore`, `SecretStore`,
/// `CheckpointStore`, `SealedStore`, `TenantStore`, `UserStore` and `AuditStore` for an
/// adapter's store,
/// which must have a `pools` field holding its `crate::pools::Pools<db>`.
///
/// - `store`: the store type; `db`: its `sqlx::Database`.
/// - `classify`: the adapter's `fn(sqlx::Error) -> StoreError`.
/// - `lock_run`: appended to the `SELECT` that reads the run being appended to, to lock
///   its row until the transaction ends (`""` when a write transaction already holds the
///   database's write lock); a membership change appends it to lock the tenant's owner
///   memberships the same way.
/// - `skip_locked`: appended to the `SELECT` of lease claim candidates so concurrent
///   claimers skip each other's rows (`""` when write transactions are serialized).
macro_rules! impl_ports {
    (
        store: $store:ty,
        db: $db:ty,
        classify: $classify:path,
        lock_run: $lock_run:literal,
        skip_locked: $skip_locked:literal $(,)?
    ) => {
        $crate::adapter::impl_append!($store, $db, $classify, $lock_run);
    };
}
pub(crate) use impl_ports;
