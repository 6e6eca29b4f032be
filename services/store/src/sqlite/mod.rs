//! The SQLite adapter of the store ports (embedded tier): opening a database file (or a
//! shared in-memory database for tests) with WAL, a busy timeout and foreign keys, and
//! the one function that classifies driver errors (the rest of what is SQLite's own is its
//! `Backend` in `crate::backend`). The port implementations are the shared ones of
//! `crate::adapter`; none of them formats input into SQL. SQLite has no
//! row-level security: the scope the port code names for each connection is ignored here
//! (see `crate::pools`), and isolation rests on the queries' tenant filters.

use crate::backend;
use crate::pools::Pools;
use crate::store::Store;
use baton_core::StoreError;
use sqlx::Sqlite;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

/// How long a statement waits for another connection's write lock before `Unavailable`.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// The SQLite store. Cheap to clone: the pools are shared. One pool serves every kind of
/// work (a single process drives an embedded database), and a database file's writes
/// queue for one connection of their own (`crate::pools`).
pub type SqliteStore = Store<Sqlite>;

impl SqliteStore {
    /// Opens the database at `target` with up to `pool_size` connections, creating the
    /// file and its parent directory if missing. `target` is a path, a `sqlite:` URL
    /// (`sqlite://data/baton.db`, `sqlite:baton.db?mode=rwc`), or `sqlite::memory:` for a
    /// private in-memory database shared by the pool's connections (gone when the store
    /// is dropped). Migrations are not run here: see [`SqliteStore::migrate`] and
    /// [`crate::migrate::sqlite`].
    pub async fn open(target: &str, pool_size: u32) -> Result<Self, StoreError> {
        let (opts, in_memory) = connect_options(target)?;
        let options = |size: u32| {
            SqlitePoolOptions::new()
                .max_connections(size)
                .acquire_timeout(BUSY_TIMEOUT)
                // A connection to a file in this process cannot be cut off as a network
                // one can, and sqlx tests each one as it comes back to the pool anyway: a
                // test before every acquire would be one more round trip to the
                // connection's worker thread for every read and write.
                .test_before_acquire(false)
        };
        let mut pool = options(pool_size.max(1));
        if in_memory {
            // The database lives only while a connection to it is open: keep one for good.
            pool = pool
                .min_connections(1)
                .idle_timeout(None)
                .max_lifetime(None);
        }
        let app = pool.connect_with(opts.clone()).await.map_err(classify)?;
        // A file's writes queue for one connection of their own (`crate::pools`). (Another
        // pool on an in-memory database would open a database of its own.)
        let writer = if in_memory {
            None
        } else {
            Some(options(1).connect_with(opts).await.map_err(classify)?)
        };
        Ok(Store {
            pools: Pools::single(app, writer, classify),
            info: (),
        })
    }

    /// A fresh, migrated in-memory database: for tests of the layers above the store.
    pub async fn in_memory() -> Result<Self, StoreError> {
        let store = Self::open("sqlite::memory:", 4).await?;
        store
            .migrate()
            .await
            .map_err(|e| StoreError::Other(e.to_string()))?;
        Ok(store)
    }

    /// The connection pool, for tests that need SQL the ports do not offer. (The port
    /// code, shared with Postgres, takes its connections through `crate::pools`.)
    pub fn pool(&self) -> &SqlitePool {
        self.pools.raw()
    }
}

/// Connection settings for `target` (see [`SqliteStore::open`]) and whether it names an
/// in-memory database; creates the parent directory of a database file.
pub(crate) fn connect_options(target: &str) -> Result<(SqliteConnectOptions, bool), StoreError> {
    let invalid = |e: sqlx::Error| StoreError::Other(format!("invalid SQLite target: {e}"));
    let in_memory = matches!(target, ":memory:" | "sqlite::memory:")
        || (target.starts_with("sqlite:") && target.contains("mode=memory"));
    let opts = if matches!(target, ":memory:" | "sqlite::memory:") {
        SqliteConnectOptions::from_str("sqlite::memory:").map_err(invalid)?
    } else if target.starts_with("sqlite:") {
        SqliteConnectOptions::from_str(target).map_err(invalid)?
    } else {
        SqliteConnectOptions::new().filename(target)
    };
    let opts = opts
        .create_if_missing(true)
        .busy_timeout(BUSY_TIMEOUT)
        .foreign_keys(true);
    if in_memory {
        return Ok((opts, true));
    }
    if let Some(dir) = opts
        .get_filename()
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
    {
        create_dir(dir)?;
    }
    let opts = opts
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal);
    Ok((opts, false))
}

fn create_dir(dir: &Path) -> Result<(), StoreError> {
    std::fs::create_dir_all(dir).map_err(|e| {
        StoreError::Unavailable(format!("cannot create directory {}: {e}", dir.display()))
    })
}

/// The one place SQLite driver errors become [`StoreError`]s: the shared rules of
/// [`backend::classify`], where these also count as `Unavailable`: a database still locked
/// after the busy timeout, an I/O error and a file that cannot be opened.
pub(crate) fn classify(e: sqlx::Error) -> StoreError {
    backend::classify(e, |e| match e {
        sqlx::Error::Database(db) => {
            let primary = db
                .code()
                .and_then(|c| c.parse::<i32>().ok())
                .map(|c| c & 0xff);
            // SQLITE_BUSY, SQLITE_LOCKED, SQLITE_IOERR, SQLITE_CANTOPEN
            matches!(primary, Some(5 | 6 | 10 | 14))
        }
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pools a store reports, by name, with their maximum.
    fn pools(store: &SqliteStore) -> Vec<(&'static str, u32)> {
        store.pool_stats().iter().map(|p| (p.name, p.max)).collect()
    }

    #[tokio::test]
    async fn a_database_files_writes_take_turns_on_one_connection_of_their_own() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("baton.db");
        let store = SqliteStore::open(file.to_str().expect("UTF-8"), 4)
            .await
            .expect("open");
        assert_eq!(pools(&store), [("app", 4), ("write", 1)]);
        store.close().await;
        // Another pool on an in-memory database would open a database of its own.
        let memory = SqliteStore::open("sqlite::memory:", 4).await.expect("open");
        assert_eq!(pools(&memory), [("app", 4)]);
    }
}
