//! What the shared port code needs from a database, and all that differs between the two:
//! [`Backend`] and its implementations for `sqlx::Postgres` and `sqlx::Sqlite`, side by
//! side, with the values both can bind ([`Bind`]), the rows both can decode ([`Decode`])
//! and the driver-error classification the two share (each adds its own retryable errors,
//! in `crate::postgres` and `crate::sqlite`). Nothing here runs a query of its own.
//!
//! sqlx binds, decodes and executes only for a concrete database, and generic
//! `sqlx::Database` code would have to repeat that as where-clauses on every function.
//! Here each backend does those few things in a line or two, and [`Bind`] and [`Decode`]
//! state the sqlx bounds of both databases as supertraits, which (unlike where-clauses) a
//! bound of `T: Bind` implies wherever it is written.

use crate::pools::Scoped;
use crate::postgres::DbRole;
use crate::query::Query;
use baton_core::StoreError;
use sqlx::error::BoxDynError;
use sqlx::postgres::{PgArguments, PgConnection, PgRow};
use sqlx::sqlite::{SqliteArguments, SqliteConnection, SqliteRow};
use sqlx::{Arguments, Encode, FromRow, Postgres, Sqlite, Type};
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;

/// What a primitive returns: the driver's result, which [`Query`] classifies.
pub type Driver<T> = Result<T, sqlx::Error>;

/// A value either database can bind as a query argument: what sqlx asks of it for each.
pub trait Bind<'t>:
    Encode<'t, Postgres> + Type<Postgres> + Encode<'t, Sqlite> + Type<Sqlite>
{
}

impl<'t, T> Bind<'t> for T where
    T: Encode<'t, Postgres> + Type<Postgres> + Encode<'t, Sqlite> + Type<Sqlite>
{
}

/// A row type either database can decode a result row into: a `#[derive(sqlx::FromRow)]`
/// struct of `crate::rows`, or a tuple of database-neutral column types.
pub trait Decode:
    for<'r> FromRow<'r, PgRow> + for<'r> FromRow<'r, SqliteRow> + Send + Unpin
{
}

impl<R> Decode for R where
    R: for<'r> FromRow<'r, PgRow> + for<'r> FromRow<'r, SqliteRow> + Send + Unpin
{
}

/// A database the store runs on. Its connections come from `crate::pools` ([`Scoped`]);
/// the rest is what differs between the two backends: two clauses of SQL, which driver
/// errors are worth retrying, and the typed primitives through which every [`Query`] is
/// bound and run.
pub trait Backend: Scoped + Sync {
    /// Ends a `SELECT` to lock the rows it reads until the transaction ends: the run an
    /// append reads, the owner memberships of a membership change. Empty where a write
    /// transaction holds the database's write lock already.
    const LOCK_ROWS: &'static str;

    /// Ends the `SELECT` of lease claim candidates so concurrent claimers skip each
    /// other's rows. Empty where write transactions are serialized.
    const SKIP_LOCKED: &'static str;

    /// The function giving the 1-based position of its second argument in its first (0
    /// when absent), up to and including its `(`: the title search.
    const POSITION_OF: &'static str;

    /// An `UPDATE … FROM` may name the `FROM` side's columns in its `RETURNING`, and
    /// takes a `WITH … AS MATERIALIZED`: a lease claim returns the lease it replaced from
    /// the statement that takes it.
    const RETURNING_SEES_FROM: bool;

    /// What the store keeps about its database besides the pools.
    type Info: Clone + Debug + Send + Sync;

    /// Appends ` AND` conditions that the row's `metadata` holds every pair of `labels`.
    fn push_labels(q: &mut Query<Self>, labels: &[(String, String)]);

    /// Appends ` AND` the condition that timestamp `column` is more than `days` days
    /// before `now`; `column` and `days` are SQL of the caller's (columns, never input).
    fn push_older_than_days(
        q: &mut Query<Self>,
        column: &'static str,
        days: &'static str,
        now: chrono::DateTime<chrono::Utc>,
    );

    /// The one place this backend's driver errors become [`StoreError`]s.
    fn classify(e: sqlx::Error) -> StoreError;

    /// Adds `value` to the end of `args`.
    fn add<'t, T: Bind<'t>>(args: &mut Self::Arguments, value: T) -> Result<(), BoxDynError>;

    /// Runs `q`; the number of rows it changed.
    fn execute(
        conn: &mut Self::Connection,
        q: Query<Self>,
    ) -> impl Future<Output = Driver<u64>> + Send;

    /// Every row `q` returns.
    fn fetch_all<R: Decode>(
        conn: &mut Self::Connection,
        q: Query<Self>,
    ) -> impl Future<Output = Driver<Vec<R>>> + Send;

    /// The first row `q` returns, if any.
    fn fetch_optional<R: Decode>(
        conn: &mut Self::Connection,
        q: Query<Self>,
    ) -> impl Future<Output = Driver<Option<R>>> + Send;

    /// The first row `q` returns; an error when there is none.
    fn fetch_one<R: Decode>(
        conn: &mut Self::Connection,
        q: Query<Self>,
    ) -> impl Future<Output = Driver<R>> + Send;
}

impl Backend for Postgres {
    // Locks the rows a write reads until the transaction ends.
    const LOCK_ROWS: &'static str = " FOR UPDATE";
    // Concurrent replicas claiming leases skip each other's candidates.
    const SKIP_LOCKED: &'static str = " FOR UPDATE SKIP LOCKED";
    const POSITION_OF: &'static str = "strpos(";
    const RETURNING_SEES_FROM: bool = true;

    type Info = Arc<DbRole>;

    // A containment test per pair (one object of all pairs would keep only the last of
    // two on one key); `<> '{}'` lets the partial GIN index serve them.
    fn push_labels(q: &mut Query<Self>, labels: &[(String, String)]) {
        if labels.is_empty() {
            return;
        }
        q.push(" AND metadata <> '{}'::jsonb");
        for (key, value) in labels {
            let pair = serde_json::json!({ key: value });
            q.push(" AND metadata @> ")
                .push_bind(sqlx::types::Json(pair));
        }
    }

    fn push_older_than_days(
        q: &mut Query<Self>,
        column: &'static str,
        days: &'static str,
        now: chrono::DateTime<chrono::Utc>,
    ) {
        q.push(" AND ")
            .push(column)
            .push(" < ")
            .push_bind(now)
            .push(" - (")
            .push(days)
            .push(") * INTERVAL '1 day'");
    }

    fn classify(e: sqlx::Error) -> StoreError {
        crate::postgres::classify(e)
    }

    fn add<'t, T: Bind<'t>>(args: &mut PgArguments, value: T) -> Result<(), BoxDynError> {
        args.add(value)
    }

    async fn execute(conn: &mut PgConnection, q: Query<Self>) -> Driver<u64> {
        let (sql, args) = q.into_parts()?;
        Ok(sqlx::query_with(sql, args)
            .execute(conn)
            .await?
            .rows_affected())
    }

    async fn fetch_all<R: Decode>(conn: &mut PgConnection, q: Query<Self>) -> Driver<Vec<R>> {
        let (sql, args) = q.into_parts()?;
        sqlx::query_as_with(sql, args).fetch_all(conn).await
    }

    async fn fetch_optional<R: Decode>(
        conn: &mut PgConnection,
        q: Query<Self>,
    ) -> Driver<Option<R>> {
        let (sql, args) = q.into_parts()?;
        sqlx::query_as_with(sql, args).fetch_optional(conn).await
    }

    async fn fetch_one<R: Decode>(conn: &mut PgConnection, q: Query<Self>) -> Driver<R> {
        let (sql, args) = q.into_parts()?;
        sqlx::query_as_with(sql, args).fetch_one(conn).await
    }
}

impl Backend for Sqlite {
    // A write transaction begins with `BEGIN IMMEDIATE` (`crate::pools`), which takes the
    // database's write lock up front: the rows a write reads need no lock of their own,
    // and lease claimers are serialized already.
    const LOCK_ROWS: &'static str = "";
    const SKIP_LOCKED: &'static str = "";
    const POSITION_OF: &'static str = "instr(";
    // "the auxiliary tables named in the FROM clause may not participate in the RETURNING
    // clause" (SQLite's documentation of RETURNING).
    const RETURNING_SEES_FROM: bool = false;

    type Info = ();

    // Keys are ASCII letters, digits, `_`, `-` and `.` (checked by the core), so the
    // quoted path names exactly the key; the path is bound, never written into the SQL.
    fn push_labels(q: &mut Query<Self>, labels: &[(String, String)]) {
        for (key, value) in labels {
            q.push(" AND json_extract(metadata, ")
                .push_bind(format!("$.\"{key}\""))
                .push(") = ")
                .push_bind(value.clone());
        }
    }

    // Timestamps are RFC 3339 text, which `julianday` reads (a day is 1.0).
    fn push_older_than_days(
        q: &mut Query<Self>,
        column: &'static str,
        days: &'static str,
        now: chrono::DateTime<chrono::Utc>,
    ) {
        q.push(" AND julianday(")
            .push(column)
            .push(") < julianday(")
            .push_bind(now)
            .push(") - (")
            .push(days)
            .push(")");
    }

    fn classify(e: sqlx::Error) -> StoreError {
        crate::sqlite::classify(e)
    }

    fn add<'t, T: Bind<'t>>(args: &mut SqliteArguments, value: T) -> Result<(), BoxDynError> {
        args.add(value)
    }

    async fn execute(conn: &mut SqliteConnection, q: Query<Self>) -> Driver<u64> {
        let (sql, args) = q.into_parts()?;
        Ok(sqlx::query_with(sql, args)
            .execute(conn)
            .await?
            .rows_affected())
    }

    async fn fetch_all<R: Decode>(conn: &mut SqliteConnection, q: Query<Self>) -> Driver<Vec<R>> {
        let (sql, args) = q.into_parts()?;
        sqlx::query_as_with(sql, args).fetch_all(conn).await
    }

    async fn fetch_optional<R: Decode>(
        conn: &mut SqliteConnection,
        q: Query<Self>,
    ) -> Driver<Option<R>> {
        let (sql, args) = q.into_parts()?;
        sqlx::query_as_with(sql, args).fetch_optional(conn).await
    }

    async fn fetch_one<R: Decode>(conn: &mut SqliteConnection, q: Query<Self>) -> Driver<R> {
        let (sql, args) = q.into_parts()?;
        sqlx::query_as_with(sql, args).fetch_one(conn).await
    }
}

/// The classification both backends share; each backend's [`Backend::classify`] supplies
/// `is_transient`, its own notion of a retryable error.
///
/// A unique violation becomes `Conflict { expected: 0, actual: 0 }`; the append path
/// replaces the numbers with the stream's real version, and elsewhere (a duplicate tenant
/// name, agent, tool or key) it means "already exists". A foreign key violation (a row for a
/// tenant that does not exist) is `NotFound`. I/O failures, an exhausted or closed pool,
/// a crashed worker and whatever `is_transient` accepts are `Unavailable` (worth
/// retrying); everything else is `Other`.
pub(crate) fn classify(
    e: sqlx::Error,
    is_transient: impl FnOnce(&sqlx::Error) -> bool,
) -> StoreError {
    if let sqlx::Error::Database(db) = &e {
        if db.is_unique_violation() {
            return StoreError::Conflict {
                expected: 0,
                actual: 0,
            };
        }
        if db.is_foreign_key_violation() {
            return StoreError::NotFound;
        }
    }
    let transient = matches!(
        e,
        sqlx::Error::Io(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed
    ) || is_transient(&e);
    if transient {
        StoreError::Unavailable(describe(&e))
    } else {
        StoreError::Other(describe(&e))
    }
}

/// A database error as Baton tells it: the server's message and code, without the line of
/// the server's own source that sqlx appends to Postgres errors ("… at line 948"); other
/// errors as sqlx tells them.
pub(crate) fn describe(e: &sqlx::Error) -> String {
    match e {
        sqlx::Error::Database(db) => match db.code() {
            Some(code) => format!("{} (code {code})", db.message()),
            None => db.message().to_owned(),
        },
        other => other.to_string(),
    }
}
