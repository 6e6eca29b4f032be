//! Baton's store: [`PgStore`] (team tier) and [`SqliteStore`] (embedded tier), the two
//! instances of the generic [`Store`], implement every store port of `baton-core`
//! (`RunReader`, `EventLog`, `LeaseStore` and the rest) with identical behaviour, which
//! one contract suite (`tests/contract/`) checks against both. [`migrate`] owns the
//! schema.
//!
//! Where things are: `adapter/<port>.rs` implements each port once, for any backend, with
//! its row types in `rows/<port>.rs` and what an append writes decided in `plan` (pure).
//! A statement is a `query::Query`; what differs between the databases (two locking
//! clauses, error classification, sqlx's typed binding and execution) is the `Backend`
//! trait, implemented for both side by side in `backend`. [`postgres`] and [`sqlite`] open
//! a store and classify their driver's errors; `pools` is the only way to a connection.
//! Queries are runtime-checked and always bind their input; every query on tenant data is
//! filtered by the caller's tenant.
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
