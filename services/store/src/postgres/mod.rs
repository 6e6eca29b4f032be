//! The Postgres adapter of the store ports (team tier): connection options, the `app`,
//! `control` and `checkpoint` pools, the database role the connections act as, and the one
//! function that classifies driver errors (the rest of what is Postgres's own is its
//! `Backend` in `crate::backend`). The port implementations are the shared ones of
//! `crate::adapter`; none of them formats input into SQL.
//!
//! Row-level security (migration 0006) binds every role but superusers and roles with
//! BYPASSRLS, which ignore policies even on tables that force them. So at connect the
//! store looks at its login role: when it bypasses row-level security and may switch to
//! [`APP_ROLE`] (the NOLOGIN role without bypass that migration 0006 makes when it can),
//! every connection of every pool acts as that role from its start (the `role` setting in
//! the connection's startup options, so no connection ever runs a statement as the login
//! role). A login role that bypasses nothing, such as a plain owner of the tables, needs no
//! switch: the policies are forced on the owner. Whichever role results, the store logs a
//! warning at connect when it still bypasses row-level security. The migrations use a
//! connection of their own (`crate::migrate`) that keeps the login role.

use crate::backend;
use crate::pools::{PoolKind, Pools, Scope, Server};
use crate::store::Store;
use baton_core::StoreError;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, Postgres, Transaction};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

/// The role the store's connections switch to when their login role would bypass
/// row-level security. Migration 0006 makes it (NOLOGIN, without BYPASSRLS, allowed to
/// read and write the tables) when the migrating role is a superuser or has CREATEROLE.
pub const APP_ROLE: &str = "baton_app";

/// How to reach Postgres and how many connections to keep.
#[derive(Clone)]
pub struct PgOptions {
    /// The DSN, `postgres://user:password@host:port/database?...`. Redacted in `Debug`.
    pub url: String,
    /// Connections serving requests.
    pub app_pool_size: u32,
    /// Connections reserved for lease renewal and adoption, so request load never
    /// starves them.
    pub control_pool_size: u32,
    /// Connections for checkpoint writes, so a burst of checkpoints never delays requests.
    pub checkpoint_pool_size: u32,
    /// Server-side limit on any one statement (`statement_timeout`), and on how long a
    /// transaction may sit idle between its statements
    /// (`idle_in_transaction_session_timeout`): Postgres ends a session that leaves a
    /// transaction open longer, which frees the row locks it holds. A replica frozen
    /// mid-transaction (SIGSTOP, a paused VM) would otherwise keep its runs' rows locked,
    /// and the lease claims, which skip locked rows, would never adopt those runs.
    pub statement_timeout: Duration,
    /// How long to wait for a connection, new or pooled, before reporting `Unavailable`.
    pub acquire_timeout: Duration,
}

impl PgOptions {
    /// Options with the defaults: 10 app, 2 control and 2 checkpoint connections, 30 s
    /// statement timeout, 5 s acquire timeout.
    pub fn new(url: impl Into<String>) -> Self {
        PgOptions {
            url: url.into(),
            app_pool_size: 10,
            control_pool_size: 2,
            checkpoint_pool_size: 2,
            statement_timeout: Duration::from_secs(30),
            acquire_timeout: Duration::from_secs(5),
        }
    }
}

impl fmt::Debug for PgOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgOptions")
            .field("url", &redact(&self.url))
            .field("app_pool_size", &self.app_pool_size)
            .field("control_pool_size", &self.control_pool_size)
            .field("checkpoint_pool_size", &self.checkpoint_pool_size)
            .field("statement_timeout", &self.statement_timeout)
            .field("acquire_timeout", &self.acquire_timeout)
            .finish()
    }
}

/// The database role the store's connections act as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DbRole {
    /// `current_user` of the connections: [`APP_ROLE`] when they switched to it.
    pub name: String,
    /// Whether the role ignores row-level security (a superuser, or BYPASSRLS): tenant
    /// isolation then rests on the queries' own filters alone.
    pub bypasses_rls: bool,
}

/// The Postgres store. Cheap to clone: the pools are shared.
pub type PgStore = Store<Postgres>;

impl PgStore {
    /// Connects the pools, as [`APP_ROLE`] when the login role would bypass row-level
    /// security and may switch to it. The `app` pool opens a connection at once, so a
    /// wrong DSN or an unreachable server fails here; the others connect on first use.
    /// Migrations are not run here: see [`crate::migrate::postgres`].
    pub async fn connect(opts: &PgOptions) -> Result<Self, StoreError> {
        let timeout_ms = opts.statement_timeout.as_millis().max(1);
        let mut connect = PgConnectOptions::from_str(&opts.url)
            .map_err(|e| StoreError::Other(format!("invalid Postgres DSN: {e}")))?
            .options([
                ("statement_timeout", format!("{timeout_ms}ms")),
                (
                    "idle_in_transaction_session_timeout",
                    format!("{timeout_ms}ms"),
                ),
            ])
            .application_name("baton");
        let server = place(&connect);
        let at = |e: StoreError| match e {
            StoreError::Unavailable(m) => StoreError::Unavailable(format!("{server}: {m}")),
            StoreError::Other(m) => StoreError::Other(format!("{server}: {m}")),
            other => other,
        };
        if login_must_switch(&connect, opts.acquire_timeout)
            .await
            .map_err(at)?
        {
            connect = connect.options([("role", APP_ROLE)]);
        }
        // No ping before handing out a connection: the `BEGIN` of every transaction, which
        // also sets its scope, checks the connection instead (`crate::pools`).
        let pool = |size: u32| {
            PgPoolOptions::new()
                .max_connections(size.max(1))
                .acquire_timeout(opts.acquire_timeout)
                .test_before_acquire(false)
        };
        let app = pool(opts.app_pool_size)
            .connect_with(connect.clone())
            .await
            .map_err(|e| at(classify(e)))?;
        let role = effective_role(&app).await?;
        if role.bypasses_rls {
            tracing::warn!(
                role = %role.name,
                "the database role of Baton's connections bypasses row-level security: \
                 tenant isolation rests on the queries' filters alone. Run `baton migrate` \
                 as a superuser or a role with CREATEROLE (it makes the role {APP_ROLE}), or \
                 connect as a role that is neither superuser nor BYPASSRLS"
            );
        }
        let server = Server::of(&connect);
        let control = pool(opts.control_pool_size).connect_lazy_with(connect.clone());
        let checkpoint = pool(opts.checkpoint_pool_size).connect_lazy_with(connect);
        Ok(Store {
            pools: Pools::new(app, control, checkpoint, classify).with_server(server),
            info: Arc::new(role),
        })
    }

    /// The role the connections act as, and whether it bypasses row-level security.
    pub fn role(&self) -> &DbRole {
        &self.info
    }

    /// A transaction exactly like those of the port implementations: on `kind`'s pool, as
    /// the store's role, seeing and writing only `scope`'s rows. For tests and tools that
    /// need SQL the ports do not offer; what it writes is kept only if it is committed.
    pub async fn transaction(
        &self,
        kind: PoolKind,
        scope: Scope,
    ) -> Result<Transaction<'static, Postgres>, StoreError> {
        self.pools.write(kind, scope).await
    }
}

/// Whether the login role of `connect` bypasses row-level security and may switch to
/// [`APP_ROLE`] (which must exist and bypass nothing itself). Asked on a connection of its
/// own, closed at once, before any pool connects.
async fn login_must_switch(
    connect: &PgConnectOptions,
    timeout: Duration,
) -> Result<bool, StoreError> {
    let mut conn = match tokio::time::timeout(timeout, connect.connect()).await {
        Ok(conn) => conn.map_err(classify)?,
        Err(_) => {
            return Err(StoreError::Unavailable(format!(
                "no connection to Postgres within {timeout:?}"
            )));
        }
    };
    // From Postgres 16 on a membership may exist without the right to SET ROLE; a
    // superuser may switch to any role (`pg_has_role` is true for it).
    let answer: Result<(bool, bool), _> = sqlx::query_as(
        "SELECT me.rolsuper OR me.rolbypassrls, \
            COALESCE((SELECT NOT (app.rolsuper OR app.rolbypassrls) AND \
                        CASE WHEN current_setting('server_version_num')::int >= 160000 \
                             THEN pg_has_role(current_user, app.oid, 'SET') \
                             ELSE pg_has_role(current_user, app.oid, 'MEMBER') END \
                      FROM pg_roles app WHERE app.rolname = $1), false) \
         FROM pg_roles me WHERE me.rolname = current_user",
    )
    .bind(APP_ROLE)
    .fetch_one(&mut conn)
    .await;
    if let Err(e) = conn.close().await {
        tracing::debug!(error = %e, "closing the role probe connection failed");
    }
    let (bypasses, may_switch) = answer.map_err(classify)?;
    Ok(bypasses && may_switch)
}

/// The role a connection of `pool` acts as.
async fn effective_role(pool: &PgPool) -> Result<DbRole, StoreError> {
    let (name, bypasses_rls): (String, bool) = sqlx::query_as(
        "SELECT current_user::text, rolsuper OR rolbypassrls FROM pg_roles \
         WHERE rolname = current_user",
    )
    .fetch_one(pool)
    .await
    .map_err(classify)?;
    Ok(DbRole { name, bypasses_rls })
}

/// The one place Postgres driver errors become [`StoreError`]s: the shared rules of
/// [`backend::classify`], where these also count as `Unavailable` (worth retrying): lost
/// connections (SQLSTATE class `08`), exhausted resources (`53`), server shutdowns and
/// other operator intervention (`57P`), statement timeouts (`57014`), serialization
/// failures (`40001`), deadlocks (`40P01`), writes on a read-only server (`25006`, a
/// connection still on a demoted primary during failover), and TLS or protocol failures.
pub(crate) fn classify(e: sqlx::Error) -> StoreError {
    backend::classify(e, |e| match e {
        sqlx::Error::Database(db) => {
            let code = db.code().unwrap_or_default();
            code.starts_with("08")
                || code.starts_with("53")
                || code.starts_with("57P")
                || matches!(&*code, "57014" | "40001" | "40P01" | "25006")
        }
        sqlx::Error::Tls(_) | sqlx::Error::Protocol(_) => true,
        _ => false,
    })
}

/// Where the Postgres server of `opts` is, for errors: host (or socket directory), port
/// and database, never the user or password.
pub(crate) fn place(opts: &PgConnectOptions) -> String {
    let host = match opts.get_socket() {
        Some(dir) => dir.display().to_string(),
        None => opts.get_host().to_owned(),
    };
    format!(
        "Postgres at {host}:{}/{}",
        opts.get_port(),
        opts.get_database().unwrap_or_default()
    )
}

/// The DSN without its password (in the authority or a `password` parameter), for logs
/// and `Debug`.
pub fn redact(url: &str) -> String {
    let Ok(mut u) = url::Url::parse(url) else {
        return "<unparsable DSN>".to_string();
    };
    if u.password().is_some() {
        // Setting a password only fails for URLs that cannot have one.
        let _ = u.set_password(Some("****"));
    }
    if u.query_pairs().any(|(k, _)| k == "password") {
        let pairs: Vec<(String, String)> = u
            .query_pairs()
            .map(|(k, v)| {
                let v = if k == "password" {
                    "****".into()
                } else {
                    v.into_owned()
                };
                (k.into_owned(), v)
            })
            .collect();
        u.query_pairs_mut().clear().extend_pairs(pairs);
    }
    u.to_string()
}
