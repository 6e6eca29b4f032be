//! How the port implementations reach the database: only through [`Pools::read`] and
//! [`Pools::write`], which hand out a connection of one of the store's pools with the tenant
//! [`Scope`] of what the caller is about to do already set. The pools themselves are
//! private to this module, so code written against the ports cannot take a connection
//! without naming its scope.
//!
//! On Postgres every tenant table has a row-level security policy (migration 0006): a row
//! is visible and writable only when its `tenant_id` equals the transaction's
//! `baton.tenant_id` setting, or when `baton.scope` is `all`. Both `read` and `write` begin
//! a transaction whose first statements set both settings transaction-locally
//! (`SET LOCAL`), sent with the `BEGIN` in one round trip. The settings end
//! with the transaction, so a pooled connection carries none of them to its next user, and
//! no caller depends on what a previous one left. A read's transaction is `READ ONLY`
//! and need not be ended: a transaction dropped open is rolled back when its connection
//! goes back to the pool, in the round trip sqlx makes then to check the connection
//! anyway, off the caller's path. A write must commit.
//!
//! The cost stays low: the Postgres pools do not ping a connection before handing it out,
//! since the `BEGIN` that sets the scope checks it as well (see `Pools::begin`). A read
//! takes two round trips (the `BEGIN` and the query), a write one per statement plus the
//! `BEGIN` and the `COMMIT`.
//!
//! SQLite has no row-level security (one process on one machine): a read is
//! a plain pooled connection and a write a transaction begun with `BEGIN IMMEDIATE`, which
//! takes the database's write lock up front so writers are serialized and never fail to
//! upgrade a read lock. A database file has one more pool, of one connection, for the
//! writes alone: writers wait their turn for it in the pool's queue, in order, instead of
//! meeting the lock in SQLite, whose busy handler has each one that loses sleep and try
//! again after 1, 2, 5, 10, … up to 100 ms (228 ms over its first eleven tries), while
//! later writers get in first.

use baton_core::StoreError;
use baton_events::TenantId;
use sqlx::pool::PoolConnection;
use sqlx::postgres::PgConnection;
use sqlx::sqlite::SqliteConnection;
use sqlx::{AssertSqlSafe, Database, Pool, Postgres, SqlSafeStr, Sqlite, Transaction};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// Which rows a connection may see and write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// One tenant's rows: every path that acts for a tenant.
    Tenant(TenantId),
    /// Every tenant's rows: only the paths that are cross-tenant by nature (lease claims
    /// and renewal, lookups by token hash before the tenant is known, a user's
    /// memberships, key rotation over all tenants).
    CrossTenant,
    /// No tenant's rows: paths that touch only tables of no tenant (tenants, users,
    /// sessions).
    NoTenant,
}

/// Where the database server listens, to tell a server that is down (its connections
/// refused) from pools that are busy.
#[derive(Debug, Clone)]
pub(crate) enum Server {
    Tcp(String, u16),
    Unix(std::path::PathBuf),
}

impl Server {
    /// The server of Postgres connect options: its socket when it names one, else its
    /// host and port.
    pub(crate) fn of(options: &sqlx::postgres::PgConnectOptions) -> Server {
        let host = options.get_host();
        let port = options.get_port();
        match options.get_socket() {
            Some(dir) => Server::Unix(dir.join(format!(".s.PGSQL.{port}"))),
            None if host.starts_with('/') => {
                Server::Unix(std::path::Path::new(host).join(format!(".s.PGSQL.{port}")))
            }
            None => Server::Tcp(host.to_string(), port),
        }
    }

    /// Whether a connection to the server is refused (nothing listens: it is down), within
    /// [`PROBE_TIMEOUT`]; a server that does not answer in time counts as up (it may be
    /// busy, the pools' own timeout decides).
    async fn refuses(&self) -> bool {
        let connect = async {
            match self {
                Server::Tcp(host, port) => {
                    let mut s = tokio::net::TcpStream::connect((host.as_str(), *port)).await?;
                    ask_for_tls(&mut s).await
                }
                Server::Unix(path) => {
                    let mut s = tokio::net::UnixStream::connect(path).await?;
                    ask_for_tls(&mut s).await
                }
            }
        };
        matches!(
            tokio::time::timeout(PROBE_TIMEOUT, connect).await,
            Ok(Err(e)) if matches!(
                e.kind(),
                std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound
            )
        )
    }
}

/// Sends Postgres's `SSLRequest` and reads its one-byte answer: a complete exchange, so the
/// server does not log the probe as an incomplete connection.
async fn ask_for_tls(
    stream: &mut (impl tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin),
) -> std::io::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // Length 8, then the request code 80877103.
    stream.write_all(&[0, 0, 0, 8, 4, 210, 22, 47]).await?;
    let mut answer = [0u8; 1];
    stream.read_exact(&mut answer).await.map(drop)
}

/// How long a connection may be waited for before the server is asked whether it is there
/// at all.
const SLOW_ACQUIRE: std::time::Duration = std::time::Duration::from_millis(50);
/// How long that question may take.
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(200);

/// The store's pools, kept apart so one kind of work never starves another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolKind {
    /// Requests, and a single run's lease claim and release.
    App,
    /// Lease renewal and batch adoption.
    Control,
    /// Checkpoint writes and reads.
    Checkpoint,
}

/// The pools of a store. SQLite has one pool, which serves every kind, and for a database
/// file one connection for the writes.
#[derive(Debug)]
pub struct Pools<DB: Database> {
    app: Pool<DB>,
    control: Option<Pool<DB>>,
    checkpoint: Option<Pool<DB>>,
    /// SQLite's one connection for writes, when the database is a file (see the module
    /// docs); without it, writes take the pool of their kind.
    writer: Option<Pool<DB>>,
    /// The adapter's classification of driver errors, applied to failures to get a
    /// connection or begin its transaction.
    classify: fn(sqlx::Error) -> StoreError,
    /// The database server, when it is one (not SQLite): a connection that is slow to come
    /// makes the pools ask it whether it is down, and fail at once if it is.
    server: Option<Arc<ServerState>>,
}

#[derive(Debug)]
struct ServerState {
    server: Server,
    /// The server refused the last probe: until a connection comes again, every acquire
    /// asks it first rather than waiting out the pool's timeout.
    down: AtomicBool,
    /// The last probe: when it was answered, and whether the server refused. Held while
    /// a probe runs, so callers waiting at once share one probe.
    last: tokio::sync::Mutex<Option<(Instant, bool)>>,
}

impl ServerState {
    /// Whether the server refuses connections, for a caller that began waiting at
    /// `since`: a probe answered after that serves it, else it probes.
    async fn refuses(&self, since: Instant) -> bool {
        let mut last = self.last.lock().await;
        if let Some((at, refused)) = *last
            && at >= since
        {
            return refused;
        }
        let refused = self.server.refuses().await;
        *last = Some((Instant::now(), refused));
        self.down.store(refused, Ordering::Relaxed);
        refused
    }
}

// By hand: a derive would ask `DB: Clone`; the pools are handles to shared state.
impl<DB: Database> Clone for Pools<DB> {
    fn clone(&self) -> Self {
        Pools {
            app: self.app.clone(),
            control: self.control.clone(),
            checkpoint: self.checkpoint.clone(),
            writer: self.writer.clone(),
            classify: self.classify,
            server: self.server.clone(),
        }
    }
}

impl<DB: Database> Pools<DB> {
    /// Three pools.
    pub(crate) fn new(
        app: Pool<DB>,
        control: Pool<DB>,
        checkpoint: Pool<DB>,
        classify: fn(sqlx::Error) -> StoreError,
    ) -> Self {
        Pools {
            app,
            control: Some(control),
            checkpoint: Some(checkpoint),
            writer: None,
            classify,
            server: None,
        }
    }

    /// The same pools, failing fast when `server` refuses connections.
    pub(crate) fn with_server(mut self, server: Server) -> Self {
        self.server = Some(Arc::new(ServerState {
            server,
            down: AtomicBool::new(false),
            last: tokio::sync::Mutex::new(None),
        }));
        self
    }

    /// One pool for every kind of work, and `writer` for the writes if given.
    pub(crate) fn single(
        app: Pool<DB>,
        writer: Option<Pool<DB>>,
        classify: fn(sqlx::Error) -> StoreError,
    ) -> Self {
        Pools {
            app,
            control: None,
            checkpoint: None,
            writer,
            classify,
            server: None,
        }
    }

    /// The pool serving `kind` and its name in metrics.
    fn pool(&self, kind: PoolKind) -> (&Pool<DB>, &'static str) {
        let own = match kind {
            PoolKind::App => None,
            PoolKind::Control => self.control.as_ref().map(|p| (p, "control")),
            PoolKind::Checkpoint => self.checkpoint.as_ref().map(|p| (p, "checkpoint")),
        };
        own.unwrap_or((&self.app, "app"))
    }

    /// A connection of `kind`'s pool, the wait for it recorded in metrics; no scope set.
    /// (The transactions below begin on it with `Transaction::begin`, which is what
    /// `Pool::begin_with` does after its own, unmeasured, acquire.)
    ///
    /// With a database server: when the server is known to be down, or a connection takes
    /// longer than [`SLOW_ACQUIRE`] to come, the server is asked whether it listens at all;
    /// if it refuses, this fails at once (an I/O error, "connection refused") instead of
    /// waiting out the pool's timeout, which sqlx spends retrying the refused connects.
    async fn acquire(&self, kind: PoolKind) -> Result<PoolConnection<DB>, sqlx::Error> {
        let (pool, name) = self.pool(kind);
        self.acquire_in(pool, name).await
    }

    /// A connection for a write of `kind`: the writer's, if there is one.
    async fn acquire_for_write(&self, kind: PoolKind) -> Result<PoolConnection<DB>, sqlx::Error> {
        match &self.writer {
            Some(writer) => self.acquire_in(writer, "write").await,
            None => self.acquire(kind).await,
        }
    }

    /// A connection of `pool` (named `name` in metrics); see [`Self::acquire`].
    async fn acquire_in(
        &self,
        pool: &Pool<DB>,
        name: &'static str,
    ) -> Result<PoolConnection<DB>, sqlx::Error> {
        let Some(server) = &self.server else {
            return crate::acquire(pool, name).await;
        };
        let since = Instant::now();
        if server.down.load(Ordering::Relaxed) && server.refuses(since).await {
            return Err(refused());
        }
        let acquire = crate::acquire(pool, name);
        tokio::pin!(acquire);
        let early = tokio::select! {
            got = &mut acquire => Some(got),
            () = tokio::time::sleep(SLOW_ACQUIRE) => None,
        };
        let got = match early {
            Some(got) => got,
            None if server.refuses(since).await => return Err(refused()),
            None => acquire.await,
        };
        if got.is_ok() {
            server.down.store(false, Ordering::Relaxed);
        }
        got
    }

    /// The pools' state, for metrics.
    pub(crate) fn stats(&self) -> Vec<crate::PoolStats> {
        let mut stats = vec![crate::PoolStats::of("app", &self.app)];
        if let Some(p) = &self.control {
            stats.push(crate::PoolStats::of("control", p));
        }
        if let Some(p) = &self.checkpoint {
            stats.push(crate::PoolStats::of("checkpoint", p));
        }
        if let Some(p) = &self.writer {
            stats.push(crate::PoolStats::of("write", p));
        }
        stats
    }

    /// Closes the pools, waiting for connections in use to be returned.
    pub(crate) async fn close(&self) {
        self.app.close().await;
        for p in [&self.control, &self.checkpoint, &self.writer]
            .into_iter()
            .flatten()
        {
            p.close().await;
        }
    }
}

/// A connection the pools handed out, its scope set: a transaction, or SQLite's plain
/// read connection. What a [`Query`](crate::query::Query) runs on.
pub trait Conn<DB: Database> {
    /// The driver's connection underneath.
    fn connection(&mut self) -> &mut DB::Connection;
}

impl<DB: Database> Conn<DB> for Transaction<'static, DB> {
    fn connection(&mut self) -> &mut DB::Connection {
        self
    }
}

impl<DB: Database> Conn<DB> for PoolConnection<DB> {
    fn connection(&mut self) -> &mut DB::Connection {
        self
    }
}

/// A database whose pools hand out connections set to a [`Scope`]: how [`Pools::read`] and
/// [`Pools::write`] begin on each backend (below).
pub trait Scoped: Database {
    /// The backend as metrics name it (`backend` label).
    const LABEL: &'static str;

    /// What a read gets: a read-only transaction on Postgres, a plain connection on SQLite.
    type Read: Conn<Self> + Send;

    /// See [`Pools::read`].
    fn read(
        pools: &Pools<Self>,
        kind: PoolKind,
        scope: Scope,
    ) -> impl Future<Output = Result<Self::Read, StoreError>> + Send;

    /// See [`Pools::write`].
    fn write(
        pools: &Pools<Self>,
        kind: PoolKind,
        scope: Scope,
    ) -> impl Future<Output = Result<Transaction<'static, Self>, StoreError>> + Send;

    /// See [`Pools::rescope`].
    fn rescope(
        pools: &Pools<Self>,
        tx: &mut Self::Connection,
        scope: Scope,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

impl<DB: Scoped> Pools<DB> {
    /// A connection of `kind`'s pool that sees `scope`'s rows: on Postgres a read-only
    /// transaction, which dropping ends (see the module docs).
    pub(crate) async fn read(&self, kind: PoolKind, scope: Scope) -> Result<DB::Read, StoreError> {
        let read = DB::read(self, kind, scope).await?;
        count_transaction::<DB>("read");
        Ok(read)
    }

    /// A transaction on `kind`'s pool that sees and writes `scope`'s rows; it must be
    /// committed.
    pub(crate) async fn write(
        &self,
        kind: PoolKind,
        scope: Scope,
    ) -> Result<Transaction<'static, DB>, StoreError> {
        let write = DB::write(self, kind, scope).await?;
        count_transaction::<DB>("write");
        Ok(write)
    }

    /// Sets `scope` anew inside a transaction of [`Pools::write`], for one that works
    /// through several tenants one after another (a batch of key rotation swaps).
    pub(crate) async fn rescope(
        &self,
        tx: &mut DB::Connection,
        scope: Scope,
    ) -> Result<(), StoreError> {
        DB::rescope(self, tx, scope).await
    }
}

/// Counts a read or write begun (`baton_db_transactions_total`; a SQLite read is a plain
/// connection, counted the same): with the statements `Query` counts, what a piece of
/// work costs in round trips. On Postgres a read is its `BEGIN` and its statements, a
/// write those and its `COMMIT`; on SQLite a read is its statements alone.
fn count_transaction<DB: Scoped>(access: &'static str) {
    metrics::counter!("baton_db_transactions_total", "backend" => DB::LABEL, "access" => access)
        .increment(1);
}

impl Scoped for Postgres {
    const LABEL: &'static str = "postgres";
    type Read = Transaction<'static, Postgres>;

    /// A read-only transaction on `kind`'s pool that sees `scope`'s rows. Dropping it
    /// ends it (see the module docs).
    async fn read(
        pools: &Pools<Postgres>,
        kind: PoolKind,
        scope: Scope,
    ) -> Result<Transaction<'static, Postgres>, StoreError> {
        pools
            .begin(kind, " READ ONLY", scope)
            .await
            .map_err(pools.classify)
    }

    async fn write(
        pools: &Pools<Postgres>,
        kind: PoolKind,
        scope: Scope,
    ) -> Result<Transaction<'static, Postgres>, StoreError> {
        pools.begin(kind, "", scope).await.map_err(pools.classify)
    }

    async fn rescope(
        pools: &Pools<Postgres>,
        tx: &mut PgConnection,
        scope: Scope,
    ) -> Result<(), StoreError> {
        // No arguments: sent as one simple query, both statements in one round trip.
        sqlx::Executor::execute(tx, AssertSqlSafe(set_local(scope)))
            .await
            .map(drop)
            .map_err(pools.classify)
    }
}

impl Pools<Postgres> {
    /// Begins a transaction in `mode` with `scope` set on a live connection of `kind`'s
    /// pool.
    ///
    /// The Postgres pools do not ping a connection before handing it out
    /// (`test_before_acquire` is off, see [`crate::postgres`]): this `BEGIN`, which every
    /// transaction sends anyway, is the check instead, and saves that round trip. A
    /// connection found dead (the server restarted, the network dropped it while idle)
    /// is dropped, which closes it, and the next one is tried, as the ping would have
    /// done; after as many tries as the pool holds connections, plus one that it opens
    /// afresh, the error is the caller's.
    ///
    /// It runs to its end whatever becomes of the caller ([`run_to_end`]).
    async fn begin(
        &self,
        kind: PoolKind,
        mode: &'static str,
        scope: Scope,
    ) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
        let pools = self.clone();
        run_to_end(async move { pools.begin_now(kind, mode, scope).await }).await
    }

    async fn begin_now(
        &self,
        kind: PoolKind,
        mode: &'static str,
        scope: Scope,
    ) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
        let (pool, _) = self.pool(kind);
        let tries = pool.options().get_max_connections().saturating_add(1);
        let mut tried = 0;
        loop {
            let conn = self.acquire(kind).await?;
            let statement = begin_statement(mode, scope).into_sql_str();
            match Transaction::begin(conn, Some(statement)).await {
                Err(e) if is_dead(&e) && tried + 1 < tries => tried += 1,
                done => return done,
            }
        }
    }
}

/// What a connection to a server that is down fails with.
fn refused() -> sqlx::Error {
    sqlx::Error::Io(std::io::Error::new(
        std::io::ErrorKind::ConnectionRefused,
        "the database server refuses connections",
    ))
}

/// Runs `begin` (taking a connection and beginning a transaction on it) to its end on a
/// task of its own, so that dropping the caller's future cannot cut it short.
///
/// A `BEGIN` cut short after it was sent leaves the server in a transaction that sqlx does
/// not know of (it counts a transaction, and so rolls it back when dropped, only once the
/// server confirmed it), and the connection would go back to the pool inside it: the next
/// user's `BEGIN` would be ignored, and a write would meet a read-only transaction. Run to
/// its end, the transaction is confirmed first; should the caller be gone by then, it is
/// dropped like any other, which rolls it back.
async fn run_to_end<T: Send + 'static>(
    begin: impl Future<Output = Result<T, sqlx::Error>> + Send + 'static,
) -> Result<T, sqlx::Error> {
    tokio::spawn(begin)
        .await
        .map_err(|_| sqlx::Error::WorkerCrashed)?
}

/// Whether `e` says the connection is gone: I/O and protocol failures, and the server's
/// "connection failure" (SQLSTATE class `08`) and "operator intervention" (`57P`, such as a
/// server shut down or restarted) errors.
fn is_dead(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_) | sqlx::Error::Tls(_) | sqlx::Error::Protocol(_) => true,
        sqlx::Error::Database(db) => db
            .code()
            .is_some_and(|c| c.starts_with("08") || c.starts_with("57P")),
        _ => false,
    }
}

/// The statement that begins a Postgres transaction (`BEGIN` and `mode`) and sets its
/// scope, in the same round trip.
fn begin_statement(mode: &str, scope: Scope) -> AssertSqlSafe<String> {
    AssertSqlSafe(format!("BEGIN{mode}; {}", set_local(scope)))
}

/// The statements that set `scope` for the rest of the current transaction. `SET LOCAL`
/// rather than `SELECT set_config(..., true)`: a utility statement needs no planning,
/// which the server would otherwise do for every transaction.
fn set_local(scope: Scope) -> String {
    let (tenant, all) = match scope {
        Scope::Tenant(t) => (t.as_uuid().hyphenated().to_string(), ""),
        Scope::CrossTenant => (String::new(), "all"),
        Scope::NoTenant => (String::new(), ""),
    };
    // The values are a UUID's hyphenated hex digits (or nothing) and a fixed word: nothing
    // that could end the quotes. Bound parameters would need a round trip of their own.
    format!("SET LOCAL baton.tenant_id = '{tenant}'; SET LOCAL baton.scope = '{all}'")
}

impl Scoped for Sqlite {
    const LABEL: &'static str = "sqlite";
    type Read = PoolConnection<Sqlite>;

    /// A connection of `kind`'s pool; `scope` has no meaning without row-level security.
    async fn read(
        pools: &Pools<Sqlite>,
        kind: PoolKind,
        _scope: Scope,
    ) -> Result<PoolConnection<Sqlite>, StoreError> {
        pools.acquire(kind).await.map_err(pools.classify)
    }

    /// A transaction on `kind`'s pool holding the write lock; it must be committed. Begun
    /// to its end whatever becomes of the caller ([`run_to_end`]), as on Postgres.
    async fn write(
        pools: &Pools<Sqlite>,
        kind: PoolKind,
        _scope: Scope,
    ) -> Result<Transaction<'static, Sqlite>, StoreError> {
        let own = pools.clone();
        run_to_end(async move {
            let conn = own.acquire_for_write(kind).await?;
            Transaction::begin(conn, Some(AssertSqlSafe("BEGIN IMMEDIATE").into_sql_str())).await
        })
        .await
        .map_err(pools.classify)
    }

    /// Nothing to set: see the Postgres `rescope`.
    async fn rescope(
        _pools: &Pools<Sqlite>,
        _tx: &mut SqliteConnection,
        _scope: Scope,
    ) -> Result<(), StoreError> {
        Ok(())
    }
}

impl Pools<Sqlite> {
    /// The pool itself, for tests that need SQL the ports do not offer.
    pub(crate) fn raw(&self) -> &Pool<Sqlite> {
        &self.app
    }
}
