//! Schema migrations: the embedded migrators and the functions that run them safely.
//!
//! Before applying anything, a database is refused when it has applied migrations this
//! binary does not know (a newer binary migrated it: upgrade) or a known migration whose
//! checksum differs (an applied migration was edited). On Postgres, migrations run on a
//! dedicated connection that is closed afterwards: sqlx's session-level advisory lock
//! serializes racing migrators, and closing the session releases it even after a failure.
//! SQLite has no such lock; migrators in one process are serialized by a mutex (the
//! embedded tier is one process).
//!
//! The Postgres migration connection keeps the DSN's own role (the store's pools may
//! switch theirs, see [`crate::postgres`]) and sets `baton.scope = 'all'` for its session:
//! a migration that reads or rewrites tenant rows works on every tenant's, also when
//! row-level security binds the migrating role.
//!
//! When migrations run as a separate job (`baton migrate`), [`check_postgres`] and
//! [`check_sqlite`] verify a database without changing it: they refuse everything the
//! migrators refuse and, in addition, a database that lacks migrations this binary needs.

use crate::sqlite::{SqliteStore, connect_options};
use sqlx::migrate::{AppliedMigration, Migrate, Migrator};
use sqlx::{Connection, PgConnection, SqliteConnection};
use std::str::FromStr;
use std::time::Duration;

/// The Postgres migrations, from `migrations/postgres`.
pub static PG_MIGRATOR: Migrator = sqlx::migrate!("../../migrations/postgres");

/// The SQLite migrations, from `migrations/sqlite`.
pub static SQLITE_MIGRATOR: Migrator = sqlx::migrate!("../../migrations/sqlite");

/// sqlx's bookkeeping table.
const TABLE: &str = "_sqlx_migrations";

/// How long opening the migration connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Serializes SQLite migrators within this process.
static SQLITE_LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A migration applied by this call: its version and its description (the file name
/// after the version).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub version: i64,
    pub description: String,
}

/// Why a database was not migrated.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error(
        "database has migrations this binary does not know: {}; upgrade baton",
        list(.versions)
    )]
    UnknownMigrations { versions: Vec<i64> },
    #[error(
        "migration {version} was changed after it was applied (checksum differs); \
         applied migrations must never be edited"
    )]
    ChecksumMismatch { version: i64 },
    #[error("migration {version} was left partially applied; repair the database by hand")]
    Dirty { version: i64 },
    #[error(
        "database lacks migrations this binary needs: {}; run `baton migrate`",
        list(.versions)
    )]
    Pending { versions: Vec<i64> },
    #[error("cannot open the database to migrate it: {0}")]
    Connect(String),
    #[error("migration failed: {}", failure(.0))]
    Failed(#[source] sqlx::migrate::MigrateError),
}

/// What a failed migration says, database errors told by [`crate::backend::describe`].
fn failure(e: &sqlx::migrate::MigrateError) -> String {
    match e {
        sqlx::migrate::MigrateError::Execute(e) => crate::backend::describe(e),
        sqlx::migrate::MigrateError::ExecuteMigration(e, version) => {
            format!("migration {version}: {}", crate::backend::describe(e))
        }
        other => other.to_string(),
    }
}

impl From<sqlx::migrate::MigrateError> for MigrateError {
    fn from(e: sqlx::migrate::MigrateError) -> Self {
        use sqlx::migrate::MigrateError as E;
        match e {
            E::VersionMissing(v) => MigrateError::UnknownMigrations { versions: vec![v] },
            E::VersionMismatch(version) => MigrateError::ChecksumMismatch { version },
            E::Dirty(version) => MigrateError::Dirty { version },
            other => MigrateError::Failed(other),
        }
    }
}

impl From<sqlx::Error> for MigrateError {
    fn from(e: sqlx::Error) -> Self {
        MigrateError::Failed(sqlx::migrate::MigrateError::Execute(e))
    }
}

/// Applies the pending Postgres migrations to the database at `dsn`; returns those it
/// applied, oldest first (none when the database was up to date).
pub async fn postgres(dsn: &str) -> Result<Vec<Applied>, MigrateError> {
    let opts = sqlx::postgres::PgConnectOptions::from_str(dsn)
        .map_err(|e| MigrateError::Connect(e.to_string()))?;
    let mut conn = connect::<PgConnection>(&opts, &crate::postgres::place(&opts)).await?;
    // The migrator takes the (re-entrant) advisory lock again inside.
    let result = async {
        sqlx::query("SELECT set_config('baton.scope', 'all', false)")
            .execute(&mut conn)
            .await?;
        conn.lock().await?;
        let applied = precheck(&PG_MIGRATOR, &mut conn).await?;
        let done = run_on(&PG_MIGRATOR, &mut conn, &applied).await?;
        conn.unlock().await?;
        Ok(done)
    }
    .await;
    // Closing the session releases the advisory lock, whatever happened.
    closed(conn, result).await
}

/// Applies the pending SQLite migrations to the database file at `target` (a path or
/// `sqlite:` URL), creating it if missing. For an in-memory database use
/// [`SqliteStore::migrate`]: a connection of its own would see an empty database. Returns
/// the migrations it applied, oldest first.
pub async fn sqlite(target: &str) -> Result<Vec<Applied>, MigrateError> {
    let (opts, _) = connect_options(target).map_err(|e| MigrateError::Connect(e.to_string()))?;
    let _guard = SQLITE_LOCK.lock().await;
    let mut conn = connect::<SqliteConnection>(&opts, &sqlite_place(&opts)).await?;
    let result = async {
        let applied = precheck(&SQLITE_MIGRATOR, &mut conn).await?;
        run_on(&SQLITE_MIGRATOR, &mut conn, &applied).await
    }
    .await;
    closed(conn, result).await
}

/// Checks, without changing anything, that the Postgres database at `dsn` has exactly the
/// migrations this binary knows: refuses a dirty database, unknown applied versions, edited
/// migrations and pending ones. Reads in one read-only transaction on a dedicated
/// connection (closed afterwards) and takes no lock. A database without the bookkeeping
/// table has every migration pending.
pub async fn check_postgres(dsn: &str) -> Result<(), MigrateError> {
    let opts = sqlx::postgres::PgConnectOptions::from_str(dsn)
        .map_err(|e| MigrateError::Connect(e.to_string()))?;
    let mut conn = connect::<PgConnection>(&opts, &crate::postgres::place(&opts)).await?;
    let result = async {
        let mut tx = conn
            .begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .await?;
        let (exists,): (bool,) = sqlx::query_as("SELECT to_regclass($1) IS NOT NULL")
            .bind(TABLE)
            .fetch_one(&mut *tx)
            .await?;
        let checked = check_on(&PG_MIGRATOR, &mut *tx, exists).await;
        tx.rollback().await?;
        checked
    }
    .await;
    closed(conn, result).await
}

/// Checks, without changing anything, that the SQLite database file at `target` (a path
/// or `sqlite:` URL) has exactly the migrations this binary knows; see [`check_postgres`].
/// A missing file has every migration pending and is not created. The dedicated
/// connection is `query_only`, reads in one transaction and is closed afterwards; no lock
/// is taken. (An in-memory target is a fresh, empty database: everything is pending.)
pub async fn check_sqlite(target: &str) -> Result<(), MigrateError> {
    let (opts, in_memory) =
        connect_options(target).map_err(|e| MigrateError::Connect(e.to_string()))?;
    if !in_memory && !opts.get_filename().exists() {
        return check_pending(&SQLITE_MIGRATOR, &[]);
    }
    let opts = opts.create_if_missing(false).pragma("query_only", "ON");
    let mut conn = connect::<SqliteConnection>(&opts, &sqlite_place(&opts)).await?;
    let result = async {
        let mut tx = conn.begin().await?;
        let (exists,): (bool,) = sqlx::query_as(
            "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?)",
        )
        .bind(TABLE)
        .fetch_one(&mut *tx)
        .await?;
        let checked = check_on(&SQLITE_MIGRATOR, &mut *tx, exists).await;
        tx.rollback().await?;
        checked
    }
    .await;
    closed(conn, result).await
}

/// Where a SQLite database is, for errors: its file.
fn sqlite_place(opts: &sqlx::sqlite::SqliteConnectOptions) -> String {
    format!("SQLite database {}", opts.get_filename().display())
}

impl SqliteStore {
    /// Applies the pending SQLite migrations through this store's pool (works for
    /// in-memory databases too); returns those it applied.
    pub async fn migrate(&self) -> Result<Vec<Applied>, MigrateError> {
        let _guard = SQLITE_LOCK.lock().await;
        let mut conn = self.pool().acquire().await?;
        let applied = precheck(&SQLITE_MIGRATOR, &mut *conn).await?;
        run_on(&SQLITE_MIGRATOR, &mut *conn, &applied).await
    }
}

/// Opens the dedicated migration connection to the database at `place` (for errors),
/// giving up after [`CONNECT_TIMEOUT`].
async fn connect<C: Connection>(opts: &C::Options, place: &str) -> Result<C, MigrateError> {
    match tokio::time::timeout(CONNECT_TIMEOUT, C::connect_with(opts)).await {
        Ok(Ok(conn)) => Ok(conn),
        Ok(Err(e)) => Err(MigrateError::Connect(format!(
            "{place}: {}",
            crate::backend::describe(&e)
        ))),
        Err(_) => Err(MigrateError::Connect(format!(
            "{place}: no connection within {CONNECT_TIMEOUT:?}"
        ))),
    }
}

/// Runs `migrator` on exactly this connection. `Migrator::run` takes an `Acquire`, whose
/// higher-ranked bound makes the callers' futures unprovably `Send` ("implementation of
/// `Acquire` is not general enough"); `run_direct` is the entry point sqlx provides to get
/// around that, on a connection it never swaps. `before` is what was applied before (from
/// [`precheck`], under the same lock); returns what this run applied.
async fn run_on<C: Migrate>(
    migrator: &Migrator,
    conn: &mut C,
    before: &[AppliedMigration],
) -> Result<Vec<Applied>, MigrateError> {
    migrator.run_direct(None, conn, false).await?;
    Ok(pending(migrator, before)
        .map(|m| Applied {
            version: m.version,
            description: m.description.to_string(),
        })
        .collect())
}

/// What runs under the migration lock before the migrator: refuses a dirty database,
/// unknown applied versions and edited migrations; returns the applied ones.
async fn precheck<C: Migrate>(
    migrator: &Migrator,
    conn: &mut C,
) -> Result<Vec<AppliedMigration>, MigrateError> {
    conn.ensure_migrations_table(TABLE).await?;
    inspect(migrator, conn).await
}

/// The known (up) migrations not in `applied`, oldest first.
fn pending<'a>(
    migrator: &'a Migrator,
    applied: &'a [AppliedMigration],
) -> impl Iterator<Item = &'a sqlx::migrate::Migration> {
    migrator
        .iter()
        .filter(|m| !m.migration_type.is_down_migration())
        .filter(|m| !applied.iter().any(|a| a.version == m.version))
}

/// The read-only check: what [`precheck`] refuses, plus pending migrations. `table_exists`
/// says whether the bookkeeping table exists (without it, everything is pending).
async fn check_on<C: Migrate>(
    migrator: &Migrator,
    conn: &mut C,
    table_exists: bool,
) -> Result<(), MigrateError> {
    let applied = if table_exists {
        inspect(migrator, conn).await?
    } else {
        Vec::new()
    };
    check_pending(migrator, &applied)
}

/// Reads the applied migrations (the bookkeeping table must exist), refusing a dirty
/// database, unknown applied versions and edited migrations. Writes nothing.
async fn inspect<C: Migrate>(
    migrator: &Migrator,
    conn: &mut C,
) -> Result<Vec<AppliedMigration>, MigrateError> {
    if let Some(version) = conn.dirty_version(TABLE).await? {
        return Err(MigrateError::Dirty { version });
    }
    let applied = conn.list_applied_migrations(TABLE).await?;
    check_applied(migrator, &applied)?;
    Ok(applied)
}

/// Refuses known migrations that are not applied, naming all of them.
fn check_pending(migrator: &Migrator, applied: &[AppliedMigration]) -> Result<(), MigrateError> {
    let pending: Vec<i64> = pending(migrator, applied).map(|m| m.version).collect();
    if pending.is_empty() {
        Ok(())
    } else {
        Err(MigrateError::Pending { versions: pending })
    }
}

/// Refuses unknown applied versions (naming all of them) and edited migrations.
fn check_applied(migrator: &Migrator, applied: &[AppliedMigration]) -> Result<(), MigrateError> {
    let unknown: Vec<i64> = applied
        .iter()
        .map(|a| a.version)
        .filter(|v| !migrator.version_exists(*v))
        .collect();
    if !unknown.is_empty() {
        return Err(MigrateError::UnknownMigrations { versions: unknown });
    }
    for a in applied {
        let known = migrator
            .iter()
            .find(|m| m.version == a.version && !m.migration_type.is_down_migration());
        if known.is_some_and(|m| m.checksum != a.checksum) {
            return Err(MigrateError::ChecksumMismatch { version: a.version });
        }
    }
    Ok(())
}

fn list(versions: &[i64]) -> String {
    versions
        .iter()
        .map(i64::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Closes a migration connection (which also releases any session lock it held) and
/// passes `result` through; a failure to close is only logged.
async fn closed<C: Connection, T>(conn: C, result: T) -> T {
    if let Err(e) = conn.close().await {
        tracing::warn!(error = %e, "closing the migration connection failed");
    }
    result
}
