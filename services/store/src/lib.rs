//! Baton's store adapters: [`PgStore`] (team tier) and [`SqliteStore`] (embedded tier)
//! implement the `RunStore`, `AgentStore` and `TenantStore` ports of `baton-core` with
//! identical behaviour, which one contract suite (`tests/contract/`) checks against
//! both. The port implementations are written once, in `adapter`, and expanded for each
//! store. [`migrate`] owns the schema. Queries are runtime-checked and always bind their
//! input; every query on tenant data is scoped by the caller's tenant.

mod adapter;
pub mod migrate;
mod plan;
pub mod postgres;
mod rows;
pub mod sqlite;

pub use migrate::{MigrateError, PG_MIGRATOR, SQLITE_MIGRATOR};
pub use postgres::{PgOptions, PgStore};
pub use sqlite::SqliteStore;
