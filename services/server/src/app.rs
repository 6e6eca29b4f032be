//! Wiring: builds the concrete stores, bus, engine and router from a [`Config`] and runs
//! the HTTP server until shut down. The binary and the end-to-end tests both call
//! [`start`]; only this module knows every concrete type.

use crate::config::{Bus, Config, SqliteLocation, Storage};
use anyhow::Context;
use baton_api::{AppState, AuthMode, HttpSettings};
use baton_bus::{InProcessBus, NatsBus};
use baton_core::agents::Agents;
use baton_core::model::Tenant;
use baton_core::ports::{
    AgentStore, CheckpointStore, Clock, EventBus, LeaseStore, RunStore, SecretStore, SystemClock,
    TenantStore, ToolStore, UserStore,
};
use baton_core::runs::{Checkpoints, EventLog, Runs};
use baton_core::secrets::Secrets;
use baton_core::tools::Tools;
use baton_core::{StoreError, TenantId};
use baton_engine::{Engine, EngineOptions, EnginePorts};
use baton_store::{PgOptions, PgStore, SqliteStore};
use secrecy::ExposeSecret;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// The tenant that unauthenticated loopback requests act in (embedded tier, auth off).
pub const DEFAULT_TENANT: &str = "default";

/// The store ports, backed by one database.
#[derive(Clone)]
pub struct Stores {
    pub runs: Arc<dyn RunStore>,
    pub leases: Arc<dyn LeaseStore>,
    pub agents: Arc<dyn AgentStore>,
    pub tools: Arc<dyn ToolStore>,
    pub secrets: Arc<dyn SecretStore>,
    pub checkpoints: Arc<dyn CheckpointStore>,
    /// Secrets and checkpoints by the key that sealed them, for key rotation.
    pub sealed: Arc<dyn baton_core::ports::SealedStore>,
    pub tenants: Arc<dyn TenantStore>,
    pub users: Arc<dyn UserStore>,
    /// The per-tenant audit stream.
    pub audit: Arc<dyn baton_core::ports::AuditStore>,
    closer: Closer,
}

#[derive(Clone)]
enum Closer {
    Pg(PgStore),
    Sqlite(SqliteStore),
}

impl Stores {
    /// Sets the pool gauges (sampled when `/metrics` is scraped).
    pub fn record_pool_gauges(&self) {
        let stats = match &self.closer {
            Closer::Pg(s) => s.pool_stats(),
            Closer::Sqlite(s) => s.pool_stats(),
        };
        for p in stats {
            let idle = f64::from(p.idle);
            let in_use = f64::from(p.size.saturating_sub(p.idle));
            metrics::gauge!("baton_db_pool_connections", "pool" => p.name, "state" => "idle")
                .set(idle);
            metrics::gauge!("baton_db_pool_connections", "pool" => p.name, "state" => "in_use")
                .set(in_use);
            metrics::gauge!("baton_db_pool_max_connections", "pool" => p.name)
                .set(f64::from(p.max));
        }
    }

    pub async fn close(&self) {
        match &self.closer {
            Closer::Pg(s) => s.close().await,
            Closer::Sqlite(s) => s.close().await,
        }
    }
}

fn sqlite_target(location: &SqliteLocation) -> anyhow::Result<String> {
    Ok(match location {
        SqliteLocation::File(path) => {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("creating the data directory {}", dir.display()))?;
            }
            path.to_string_lossy().into_owned()
        }
        SqliteLocation::Url(url) => url.clone(),
    })
}

/// Applies pending migrations (`baton migrate`, and `serve` unless switched off).
pub async fn migrate(storage: &Storage) -> anyhow::Result<()> {
    match storage {
        Storage::Sqlite { location, .. } => {
            baton_store::migrate::sqlite(&sqlite_target(location)?).await?
        }
        Storage::Postgres { url, .. } => {
            baton_store::migrate::postgres(url.expose_secret()).await?
        }
    }
    Ok(())
}

/// Checks, changing nothing, that the database has exactly this binary's migrations (for
/// `serve` when `database.migrate_on_start` is false and a separate job migrates).
async fn check_migrations(storage: &Storage) -> anyhow::Result<()> {
    match storage {
        Storage::Sqlite { location, .. } => {
            baton_store::migrate::check_sqlite(&sqlite_target(location)?).await?
        }
        Storage::Postgres { url, .. } => {
            baton_store::migrate::check_postgres(url.expose_secret()).await?
        }
    }
    Ok(())
}

/// Opens the database, migrating first when the configuration says so; otherwise refuses
/// a database whose migrations are not exactly this binary's (unknown, edited, failed or
/// pending ones).
pub async fn open_stores(storage: &Storage) -> anyhow::Result<Stores> {
    if storage.migrate_on_start() {
        migrate(storage).await.context("migrating the database")?;
    } else {
        check_migrations(storage)
            .await
            .context("checking the database migrations (database.migrate_on_start = false)")?;
    }
    match storage {
        Storage::Sqlite {
            location, pools, ..
        } => {
            let store = SqliteStore::open(&sqlite_target(location)?, pools.app)
                .await
                .context("opening the SQLite database")?;
            let s = Arc::new(store.clone());
            Ok(Stores {
                runs: s.clone(),
                leases: s.clone(),
                agents: s.clone(),
                tools: s.clone(),
                secrets: s.clone(),
                checkpoints: s.clone(),
                sealed: s.clone(),
                audit: s.clone(),
                tenants: s.clone(),
                users: s,
                closer: Closer::Sqlite(store),
            })
        }
        Storage::Postgres {
            url,
            pools,
            statement_timeout,
            acquire_timeout,
            ..
        } => {
            let opts = PgOptions {
                url: url.expose_secret().to_string(),
                app_pool_size: pools.app,
                control_pool_size: pools.control,
                checkpoint_pool_size: pools.checkpoint,
                statement_timeout: *statement_timeout,
                acquire_timeout: *acquire_timeout,
            };
            let store = PgStore::connect(&opts)
                .await
                .context("connecting to Postgres")?;
            let s = Arc::new(store.clone());
            Ok(Stores {
                runs: s.clone(),
                leases: s.clone(),
                agents: s.clone(),
                tools: s.clone(),
                secrets: s.clone(),
                checkpoints: s.clone(),
                sealed: s.clone(),
                audit: s.clone(),
                tenants: s.clone(),
                users: s,
                closer: Closer::Pg(store),
            })
        }
    }
}

async fn open_bus(bus: &Bus, buffer: usize) -> anyhow::Result<Arc<dyn EventBus>> {
    Ok(match bus {
        Bus::InProcess => Arc::new(InProcessBus::new(buffer)),
        Bus::Nats { url } => Arc::new(
            NatsBus::connect(url.expose_secret(), buffer)
                .await
                .context("connecting to NATS")?,
        ),
    })
}

/// The tenant named [`DEFAULT_TENANT`], created on first use.
pub async fn default_tenant(tenants: &dyn TenantStore) -> Result<TenantId, StoreError> {
    if let Some(t) = tenants.find_tenant_by_name(DEFAULT_TENANT).await? {
        return Ok(t.id);
    }
    let tenant = Tenant {
        id: TenantId::new(),
        name: DEFAULT_TENANT.into(),
        created_at: SystemClock.now(),
    };
    match tenants.create_tenant(&tenant).await {
        Ok(()) => Ok(tenant.id),
        // Another process created it first.
        Err(_) => tenants
            .find_tenant_by_name(DEFAULT_TENANT)
            .await?
            .map(|t| t.id)
            .ok_or(StoreError::NotFound),
    }
}

/// A running server.
pub struct RunningApp {
    pub addr: SocketAddr,
    pub engine: Engine,
    pub stores: Stores,
    shutdown: CancellationToken,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl RunningApp {
    /// A token that shuts the server down when cancelled.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Stops accepting requests, ends SSE streams, lets drivers reach a step boundary
    /// and closes the database.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        self.shutdown.cancel();
        self.wait().await
    }

    /// Waits until the server stops (call after the shutdown token is cancelled): the
    /// HTTP server finishes its requests and closes SSE streams while, at the same time,
    /// the engine stops adopting, brings its runs to a step boundary and hands them off.
    pub async fn wait(self) -> anyhow::Result<()> {
        let (served, ()) = tokio::join!(self.server, self.engine.shutdown());
        self.stores.close().await;
        served.context("the HTTP server task failed")??;
        Ok(())
    }
}

/// The Prometheus text exposition of every metric.
fn metrics_text() -> axum::response::Response {
    use axum::response::IntoResponse;
    match crate::telemetry::metrics::handle() {
        Some(handle) => (
            [(
                axum::http::header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            handle.render(),
        )
            .into_response(),
        None => (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "another metrics recorder is installed in this process",
        )
            .into_response(),
    }
}

/// The user and session use cases with the configured password parameters and session
/// lifetime (`baton serve`, and `baton admin create-user`).
pub fn users(
    config: &Config,
    stores: &Stores,
    clock: Arc<dyn Clock>,
) -> anyhow::Result<baton_core::users::Users> {
    let lifetime = chrono::TimeDelta::from_std(config.login.session_lifetime)
        .context("the session lifetime is too long")?;
    Ok(baton_core::users::Users {
        store: stores.users.clone(),
        passwords: baton_core::users::Passwords::new(config.login.password)
            .context("the argon2 password parameters")?,
        clock,
        session_lifetime: lifetime,
    })
}

/// Refuses a listener on a non-loopback address without auth, whatever the config said.
fn check_exposure(addr: SocketAddr, auth_required: bool) -> anyhow::Result<()> {
    if !addr.ip().is_loopback() && !auth_required {
        anyhow::bail!(
            "refusing to listen on {addr} without authentication: set auth.required = true \
             or listen on a loopback address"
        );
    }
    Ok(())
}

/// Starts Baton on `listener` (bind port 0 in tests).
pub async fn start(config: &Config, listener: TcpListener) -> anyhow::Result<RunningApp> {
    let addr = listener
        .local_addr()
        .context("reading the listener address")?;
    check_exposure(addr, config.auth_required)?;
    // Installed before anything records, so no early measurement is lost.
    crate::telemetry::metrics::handle();
    let keyring = crate::keyring::load(&config.crypto).context("loading the encryption keys")?;
    tracing::info!(
        active_key = keyring.active_id(),
        keys = keyring.ids().count(),
        "encryption keyring loaded"
    );
    let stores = open_stores(&config.storage).await?;
    let bus = open_bus(&config.bus, config.http.sse_buffer).await?;
    let auth = if config.auth_required {
        AuthMode::Required
    } else {
        let tenant = default_tenant(stores.tenants.as_ref())
            .await
            .context("preparing the default tenant")?;
        AuthMode::LocalOwner { tenant }
    };
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let users = users(config, &stores, clock.clone())?;
    let keyring = Arc::new(keyring);
    let secrets = Secrets {
        store: stores.secrets.clone(),
        keyring: keyring.clone(),
        clock: clock.clone(),
    };
    let encryption = baton_core::rotation::EncryptionKeys::new(
        baton_core::rotation::Rotation {
            store: stores.sealed.clone(),
            keyring: keyring.clone(),
        },
        stores.audit.clone(),
        clock.clone(),
    );
    let log = EventLog {
        store: stores.runs.clone(),
        bus,
    };
    // The full boot id: with a shortened one, two boots of one pod name could collide
    // and the newer would renew the older's leases.
    let replica = format!("{}/{}", config.replica_name, uuid::Uuid::new_v4().simple());
    let engine = Engine::new(
        EnginePorts {
            log: log.clone(),
            leases: stores.leases.clone(),
            agents: stores.agents.clone(),
            tools: stores.tools.clone(),
            secrets: Arc::new(secrets.clone()),
            checkpoints: stores.checkpoints.clone(),
            keyring,
            clock: clock.clone(),
        },
        EngineOptions {
            replica: replica.clone(),
            lease_ttl: config.cluster.lease_ttl,
            renew_every: config.cluster.renew_every,
            adopt_every: config.cluster.adopt_every,
            adopt_batch: config.cluster.adopt_batch,
        },
    );
    engine.start().await.context("starting the engine")?;
    let shutdown = CancellationToken::new();
    let state = AppState {
        runs: Runs {
            log,
            replica: replica.clone(),
            agents: stores.agents.clone(),
            driver: Arc::new(engine.clone()),
            clock: clock.clone(),
        },
        agents: Agents {
            store: stores.agents.clone(),
            tools: stores.tools.clone(),
            clock: clock.clone(),
        },
        tools: Tools {
            store: stores.tools.clone(),
            clock,
        },
        secrets,
        audit: baton_core::audit::Audit {
            store: stores.audit.clone(),
        },
        encryption,
        checkpoints: Checkpoints {
            store: stores.checkpoints.clone(),
            runs: stores.runs.clone(),
        },
        tenants: stores.tenants.clone(),
        accounts: baton_api::accounts::Accounts {
            users,
            login_limits: baton_api::accounts::LoginLimits::new(
                config.login.account_rate_limit,
                config.login.address_rate_limit,
            ),
        },
        auth,
        http: HttpSettings {
            body_limit_bytes: config.http.body_limit_bytes,
            sse_keepalive: config.http.sse_keepalive,
            sse_resync: config.http.sse_resync,
            header_limit_bytes: config.http.header_limit_bytes,
            allowed_hosts: config.http.allowed_hosts.clone(),
            allowed_origins: config.http.allowed_origins.clone(),
        },
        limits: baton_api::limits::RateLimits::new(
            config.http.key_rate_limit,
            config.http.tenant_rate_limit,
        ),
        replica: replica.clone(),
        shutdown: shutdown.clone(),
    };
    let metrics = axum::Router::new().route(
        "/metrics",
        axum::routing::get({
            let stores = stores.clone();
            move || async move {
                stores.record_pool_gauges();
                metrics_text()
            }
        }),
    );
    let router = baton_api::router(state, metrics);
    let token = shutdown.clone();
    let server = tokio::spawn(async move {
        // With each connection's peer address: login attempts are limited per address.
        let app = router.into_make_service_with_connect_info::<SocketAddr>();
        axum::serve(listener, app)
            .with_graceful_shutdown(token.cancelled_owned())
            .await
    });
    tracing::info!(%addr, tier = config.tier.as_str(), %replica, "baton is serving");
    Ok(RunningApp {
        addr,
        engine,
        stores,
        shutdown,
        server,
    })
}
