//! Baton's store adapters: [`PgStore`] (team tier) and [`SqliteStore`] (embedded tier)
//! implement the `RunStore`, `LeaseStore`, `AgentStore`, `ToolStore`, `SecretStore`,
//! `CheckpointStore`, `SealedStore`, `TenantStore` and `UserStore` ports of `baton-core`
//! with identical behaviour, which one contract suite (`tests/contract/`) checks against
//! both. The port implementations are written once, in `adapter`, and expanded for each
//! store. [`migrate`] owns the schema. Queries are runtime-checked and always bind their
//! input; every query on tenant data is filtered by the caller's tenant.
//!
//! On Postgres the database enforces that too: row-level security on every tenant table
//! shows a transaction only the rows of the tenant it names, and the port code gets its
//! connections only from `pools`, each with its [`Scope`] (one tenant, explicitly every
//! tenant, or none) set before its first statement. A query that forgot its tenant filter
//! then finds nothing of another tenant. See `pools` and [`postgres`] for how, and
//! `docs/security.md` for why.

mod adapter;
mod backend;
pub mod migrate;
mod plan;
mod pools;
pub mod postgres;
mod query;
mod rows;
pub mod sqlite;
mod store;

pub use migrate::{MigrateError, PG_MIGRATOR, SQLITE_MIGRATOR};
pub use pools::{PoolKind, Scope};
pub use postgres::{DbRole, PgOptions, PgStore};
pub use sqlite::SqliteStore;
pub use store::Store;

/// A connection pool's state, for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolStats {
    /// `app` (requests) or `control` (leases, adoption).
    pub name: &'static str,
    /// Open connections, idle or in use.
    pub size: u32,
    pub idle: u32,
    /// The pool's configured maximum.
    pub max: u32,
}

/// Takes a connection from `pool` (named `name` in metrics), recording how long the
/// caller waited for it: the pool's wait, where a saturated pool shows first.
async fn acquire<DB: sqlx::Database>(
    pool: &sqlx::Pool<DB>,
    name: &'static str,
) -> Result<sqlx::pool::PoolConnection<DB>, sqlx::Error> {
    let started = std::time::Instant::now();
    let conn = pool.acquire().await;
    metrics::histogram!("baton_db_pool_wait_seconds", "pool" => name).record(started.elapsed());
    conn
}

impl PoolStats {
    fn of<DB: sqlx::Database>(name: &'static str, pool: &sqlx::Pool<DB>) -> Self {
        PoolStats {
            name,
            size: pool.size(),
            idle: u32::try_from(pool.num_idle()).unwrap_or(u32::MAX),
            max: pool.options().get_max_connections(),
        }
    }
}
