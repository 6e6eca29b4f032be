//! The Postgres adapter of the store ports (team tier): connection options, the `app` and
//! `control` pools, and the one function that classifies driver errors. The port
//! implementations are the shared ones of `crate::adapter`; none of them formats input
//! into SQL.

use crate::adapter;
use baton_core::StoreError;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

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
    /// Server-side limit on any one statement (`statement_timeout`).
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

/// The Postgres store. Cheap to clone: the pools are shared.
#[derive(Clone, Debug)]
pub struct PgStore {
    app: PgPool,
    control: PgPool,
    checkpoint: PgPool,
}

impl PgStore {
    /// Connects the pools. The `app` pool opens a connection at once, so a wrong DSN or
    /// an unreachable server fails here; the `control` pool connects on first use.
    /// Migrations are not run here: see [`crate::migrate::postgres`].
    pub async fn connect(opts: &PgOptions) -> Result<Self, StoreError> {
        let timeout_ms = opts.statement_timeout.as_millis().max(1);
        let connect = PgConnectOptions::from_str(&opts.url)
            .map_err(|e| StoreError::Other(format!("invalid Postgres DSN: {e}")))?
            .options([("statement_timeout", format!("{timeout_ms}ms"))])
            .application_name("baton");
        let pool = |size: u32| {
            PgPoolOptions::new()
                .max_connections(size.max(1))
                .acquire_timeout(opts.acquire_timeout)
        };
        let app = pool(opts.app_pool_size)
            .connect_with(connect.clone())
            .await
            .map_err(classify)?;
        let control = pool(opts.control_pool_size).connect_lazy_with(connect.clone());
        let checkpoint = pool(opts.checkpoint_pool_size).connect_lazy_with(connect);
        Ok(PgStore {
            app,
            control,
            checkpoint,
        })
    }

    /// The pool serving requests.
    pub fn app_pool(&self) -> &PgPool {
        &self.app
    }

    /// The small pool reserved for lease renewal and adoption.
    /// The pools' state, for metrics.
    pub fn pool_stats(&self) -> Vec<crate::PoolStats> {
        vec![
            crate::PoolStats::of("app", &self.app),
            crate::PoolStats::of("control", &self.control),
            crate::PoolStats::of("checkpoint", &self.checkpoint),
        ]
    }

    pub fn control_pool(&self) -> &PgPool {
        &self.control
    }

    /// Closes the pools, waiting for connections in use to be returned.
    pub async fn close(&self) {
        self.app.close().await;
        self.control.close().await;
        self.checkpoint.close().await;
    }
}

crate::adapter::impl_ports! {
    store: PgStore,
    db: sqlx::Postgres,
    classify: classify,
    // What `Pool::begin` sends.
    begin: "BEGIN",
    // Locks the run row an append reads until the transaction ends.
    lock_run: " FOR UPDATE",
    // Concurrent replicas claiming leases skip each other's candidates.
    skip_locked: " FOR UPDATE SKIP LOCKED",
    // Lease renewal and adoption never wait behind request load.
    control: control,
    // Nor does anything wait behind a burst of checkpoint writes.
    checkpoint: checkpoint,
}

/// The one place Postgres driver errors become [`StoreError`]s: the shared rules of
/// [`adapter::classify`], where these also count as `Unavailable` (worth retrying): lost
/// connections (SQLSTATE class `08`), exhausted resources (`53`), server shutdowns and
/// other operator intervention (`57P`), statement timeouts (`57014`), serialization
/// failures (`40001`), deadlocks (`40P01`), writes on a read-only server (`25006`, a
/// connection still on a demoted primary during failover), and TLS or protocol failures.
pub(crate) fn classify(e: sqlx::Error) -> StoreError {
    adapter::classify(e, |e| match e {
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
