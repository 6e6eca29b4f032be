//! Wiring: builds the concrete stores, bus, engine and router from a [`Config`] and runs
//! the HTTP server until shut down. The binary and the end-to-end tests both call
//! [`start`]; only this module knows every concrete type.

use crate::config::{Bus, Config, SqliteLocation, Storage};
use crate::data_dir::DataDirLock;
use anyhow::Context;
use baton_api::revocations::Revocations;
use baton_api::{AppState, HttpSettings};
use baton_bus::{InProcessBus, NatsBus, NatsOptions};
use baton_core::agents::Agents;
use baton_core::api_keys::ApiKeys;
use baton_core::audit::Audit;
use baton_core::auth::{Announcer, Authenticator};
use baton_core::crypto::Keyring;
use baton_core::egress::EgressPolicy;
use baton_core::egress_allowlists::EgressAllowlists;
use baton_core::encryption_keys::{EncryptionKeys, Resealer};
use baton_core::environments::Environments;
use baton_core::invitations::Invitations;
use baton_core::mcp_servers::McpServers;
use baton_core::members::Members;
use baton_core::model::Tenant;
use baton_core::ports::{
    AgentStore, ApiKeyStore, AuditStore, CheckpointStore, Clock, DelegatorSlot,
    EgressAllowlistStore, EnvironmentStore, EventBus, EventLog, InvitationStore, LeaseStore,
    McpServerStore, RetentionStore, RunReader, ScheduleStore, SealedStore, SecretStore, StatsStore,
    StreamTicketStore, SystemClock, TenantStore, ToolStore, UserStore, WebhookStore,
    WorkspaceStore,
};
use baton_core::retention::Retention;
use baton_core::runs::{Checkpoints, Recorder, Runs};
use baton_core::schedules::Schedules;
use baton_core::secrets::Secrets;
use baton_core::stream_tickets::StreamTickets;
use baton_core::tools::Tools;
use baton_core::webhooks::Webhooks;
use baton_core::workspace::Workspaces;
use baton_core::{StoreError, TenantId};
use baton_egress::Egress;
use baton_engine::{CodeTools, Engine, EngineOptions, EnginePorts};
use baton_store::{PgOptions, PgStore, SqliteStore};
use secrecy::ExposeSecret;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The tenant that unauthenticated loopback requests act in (embedded tier, auth off).
pub const DEFAULT_TENANT: &str = "default";

/// The store ports, backed by one database.
#[derive(Clone)]
pub struct Stores {
    pub runs: Arc<dyn RunReader>,
    pub log: Arc<dyn EventLog>,
    pub leases: Arc<dyn LeaseStore>,
    pub agents: Arc<dyn AgentStore>,
    pub tools: Arc<dyn ToolStore>,
    pub secrets: Arc<dyn SecretStore>,
    pub checkpoints: Arc<dyn CheckpointStore>,
    /// Secrets and checkpoints by the encryption key that sealed them.
    pub sealed: Arc<dyn SealedStore>,
    pub tenants: Arc<dyn TenantStore>,
    pub api_keys: Arc<dyn ApiKeyStore>,
    pub users: Arc<dyn UserStore>,
    pub invitations: Arc<dyn InvitationStore>,
    pub egress_allowlists: Arc<dyn EgressAllowlistStore>,
    /// Tenants' own execution environments.
    pub environments: Arc<dyn EnvironmentStore>,
    /// Retention policies, the runs past them, and the retention job's lease.
    pub retention: Arc<dyn RetentionStore>,
    /// Schedules, and the ones due across tenants.
    pub schedules: Arc<dyn ScheduleStore>,
    /// Webhook endpoints and their deliveries.
    pub webhooks: Arc<dyn WebhookStore>,
    /// MCP servers and their discoveries.
    pub mcp_servers: Arc<dyn McpServerStore>,
    /// Runs' files and the contents they hold.
    pub workspaces: Arc<dyn WorkspaceStore>,
    /// Tickets that open a run's event stream from a browser.
    pub stream_tickets: Arc<dyn StreamTicketStore>,
    /// Counts over every tenant, for `/metrics`.
    pub stats: Arc<dyn StatsStore>,
    /// The per-tenant audit stream.
    pub audit: Arc<dyn AuditStore>,
    closer: Closer,
}

/// Every store port: what one database adapter implements.
trait AllPorts:
    RunReader
    + EventLog
    + LeaseStore
    + AgentStore
    + ToolStore
    + SecretStore
    + CheckpointStore
    + SealedStore
    + TenantStore
    + ApiKeyStore
    + UserStore
    + InvitationStore
    + EgressAllowlistStore
    + EnvironmentStore
    + RetentionStore
    + ScheduleStore
    + WebhookStore
    + McpServerStore
    + WorkspaceStore
    + StreamTicketStore
    + StatsStore
    + AuditStore
    + 'static
{
}

impl<T> AllPorts for T where
    T: RunReader
        + EventLog
        + LeaseStore
        + AgentStore
        + ToolStore
        + SecretStore
        + CheckpointStore
        + SealedStore
        + TenantStore
        + ApiKeyStore
        + UserStore
        + InvitationStore
        + EgressAllowlistStore
        + EnvironmentStore
        + RetentionStore
        + ScheduleStore
        + WebhookStore
        + McpServerStore
        + WorkspaceStore
        + StreamTicketStore
        + StatsStore
        + AuditStore
        + 'static
{
}

#[derive(Clone)]
enum Closer {
    Pg(PgStore),
    Sqlite(SqliteStore),
}

impl Stores {
    /// Every port of `store`, which `closer` closes.
    fn of(store: impl AllPorts, closer: Closer) -> Self {
        let s = Arc::new(store);
        Stores {
            runs: s.clone(),
            log: s.clone(),
            leases: s.clone(),
            agents: s.clone(),
            tools: s.clone(),
            secrets: s.clone(),
            checkpoints: s.clone(),
            sealed: s.clone(),
            tenants: s.clone(),
            api_keys: s.clone(),
            audit: s.clone(),
            invitations: s.clone(),
            egress_allowlists: s.clone(),
            environments: s.clone(),
            retention: s.clone(),
            schedules: s.clone(),
            webhooks: s.clone(),
            mcp_servers: s.clone(),
            workspaces: s.clone(),
            stream_tickets: s.clone(),
            stats: s.clone(),
            users: s,
            closer,
        }
    }

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

/// The SQLite target of `location`. A database file's directory is created (0700) when
/// missing; with `create`, so is the file itself, and it and its WAL files are made 0600
/// ([`crate::data_dir::private_file`]).
fn sqlite_target(location: &SqliteLocation, create: bool) -> anyhow::Result<String> {
    Ok(match location {
        SqliteLocation::File(path) => {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                crate::data_dir::create_private_dir(dir)
                    .with_context(|| format!("creating the data directory {}", dir.display()))?;
            }
            if create {
                crate::data_dir::private_file(path)?;
                for suffix in ["-wal", "-shm"] {
                    let mut name = path.as_os_str().to_owned();
                    name.push(suffix);
                    let side = std::path::PathBuf::from(name);
                    if side.exists() {
                        crate::data_dir::private_file(&side)?;
                    }
                }
            }
            path.to_string_lossy().into_owned()
        }
        SqliteLocation::Url(url) => url.clone(),
    })
}

/// What [`migrate`] did: the migrations it applied (oldest first), and the version the
/// database is at now.
#[derive(Debug)]
pub struct Migrated {
    pub applied: Vec<baton_store::migrate::Applied>,
    pub version: i64,
}

/// Applies pending migrations (`baton migrate`, and `serve` unless switched off).
pub async fn migrate(storage: &Storage) -> anyhow::Result<Migrated> {
    use baton_store::migrate::{PG_MIGRATOR, SQLITE_MIGRATOR};
    let (applied, migrator) = match storage {
        Storage::Sqlite { location, .. } => (
            baton_store::migrate::sqlite(&sqlite_target(location, true)?).await?,
            &SQLITE_MIGRATOR,
        ),
        Storage::Postgres { url, .. } => (
            baton_store::migrate::postgres(url.expose_secret()).await?,
            &PG_MIGRATOR,
        ),
    };
    let version = migrator.iter().map(|m| m.version).max().unwrap_or(0);
    Ok(Migrated { applied, version })
}

/// Checks, changing nothing, that the database has exactly this binary's migrations (for
/// `serve` when `database.migrate_on_start` is false and a separate job migrates).
async fn check_migrations(storage: &Storage) -> anyhow::Result<()> {
    match storage {
        Storage::Sqlite { location, .. } => {
            baton_store::migrate::check_sqlite(&sqlite_target(location, false)?).await?
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
        let migrated = migrate(storage).await.context("migrating the database")?;
        if !migrated.applied.is_empty() {
            tracing::info!(
                applied = ?migrated.applied.iter().map(|m| m.version).collect::<Vec<_>>(),
                version = migrated.version,
                "database migrated"
            );
        }
    } else {
        check_migrations(storage)
            .await
            .context("checking the database migrations (database.migrate_on_start = false)")?;
    }
    match storage {
        Storage::Sqlite {
            location, pools, ..
        } => {
            let store = SqliteStore::open(&sqlite_target(location, true)?, pools.app)
                .await
                .context("opening the SQLite database")?;
            Ok(Stores::of(store.clone(), Closer::Sqlite(store)))
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
            Ok(Stores::of(store.clone(), Closer::Pg(store)))
        }
    }
}

async fn open_bus(bus: &Bus, buffer: usize) -> anyhow::Result<Arc<dyn EventBus>> {
    Ok(match bus {
        Bus::InProcess => Arc::new(InProcessBus::new(buffer)),
        Bus::Nats {
            url,
            subjects,
            auth,
            tls,
        } => {
            let options = NatsOptions {
                subjects: subjects.clone(),
                auth: auth.clone(),
                tls: tls.clone(),
                subscriber_buffer: buffer,
                ..NatsOptions::default()
            };
            Arc::new(
                NatsBus::connect_with(url.expose_secret(), options)
                    .await
                    .with_context(|| {
                        format!(
                            "connecting to NATS at {}",
                            crate::config::redact_nats_url(url.expose_secret())
                        )
                    })?,
            )
        }
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
    /// Background work of requests (reseals, API key last-use writes).
    tasks: TaskTracker,
    /// The embedded tier's hold on its data directory, released with the app.
    _data_dir_lock: Option<DataDirLock>,
    server: tokio::task::JoinHandle<()>,
}

impl RunningApp {
    /// A token that shuts the server down when cancelled.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Stops accepting requests, ends SSE streams, lets drivers reach a step boundary,
    /// waits for background work and closes the database.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        self.shutdown.cancel();
        self.wait().await
    }

    /// Waits until the server stops (call after the shutdown token is cancelled): the
    /// HTTP server finishes its requests and closes SSE streams while, at the same time,
    /// the engine stops adopting, brings its runs to a step boundary and hands them off.
    pub async fn wait(self) -> anyhow::Result<()> {
        let (served, ()) = tokio::join!(self.server, self.engine.shutdown());
        self.tasks.close();
        self.tasks.wait().await;
        self.stores.close().await;
        served.context("the HTTP server task failed")?;
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
    announcer: Announcer,
) -> anyhow::Result<baton_core::users::Users> {
    let lifetime = chrono::TimeDelta::from_std(config.login.session_lifetime)
        .context("the session lifetime is too long")?;
    Ok(baton_core::users::Users {
        store: stores.users.clone(),
        passwords: baton_core::crypto::Passwords::new(config.login.password)
            .context("the argon2 password parameters")?,
        clock,
        session_lifetime: lifetime,
        announcer,
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
    let keyring =
        crate::encryption_keys::load(&config.crypto).context("loading the encryption keys")?;
    tracing::info!(
        active_key = keyring.active_id(),
        keys = keyring.ids().count(),
        "encryption keyring loaded"
    );
    // The embedded tier's data directory is one process's: holding its lock, this one
    // knows the leases in the database are a dead process's, and adopts their runs at once.
    let data_dir_lock = match &config.storage {
        Storage::Sqlite {
            location: SqliteLocation::File(_),
            ..
        } => Some(DataDirLock::take(&config.data_dir)?),
        _ => None,
    };
    let stores = open_stores(&config.storage).await?;
    if let Some(lock) = &data_dir_lock {
        let ended = stores
            .leases
            .expire_leases(SystemClock.now())
            .await
            .context("ending the leases of the previous process")?;
        if ended > 0 {
            tracing::info!(
                leases = ended,
                lock = %lock.path().display(),
                "adopting the runs of the previous process on this data directory"
            );
        }
    }
    let bus = open_bus(&config.bus, config.http.sse_buffer).await?;
    let local_owner = if config.auth_required {
        None
    } else {
        let tenant = default_tenant(stores.tenants.as_ref())
            .await
            .context("preparing the default tenant")?;
        Some(tenant)
    };
    // The full boot id: with a shortened one, two boots of one pod name could collide
    // and the newer would renew the older's leases.
    let replica = format!("{}/{}", config.replica_name, uuid::Uuid::new_v4().simple());
    let egress = EgressPolicy {
        own_addresses: baton_egress::own_addresses(),
        ..config.egress.clone()
    };
    let egress = Arc::new(egress);
    // Commands' private copies go under the system's temporary directory, which a
    // sandbox's unprivileged user can pass through (the data directory is private).
    let code = if config.code_tools {
        // Networked commands' relay is this binary (`baton sandbox-relay`).
        let relay = std::env::current_exe()
            .ok()
            .map(|program| baton_sandbox::Relay {
                program,
                args: vec![crate::cli::SANDBOX_RELAY.into()],
            });
        CodeTools::detect(&std::env::temp_dir(), config.workspaces, relay).await
    } else {
        CodeTools::disabled(config.workspaces)
    };
    match &code.sandbox {
        Ok(_) => tracing::info!("code tools: commands run in bubblewrap sandboxes"),
        Err(why) => tracing::warn!(%why, "code tools: commands cannot run on this replica"),
    }
    let wiring = Wiring {
        config,
        stores: &stores,
        keyring: Arc::new(keyring),
        egress_client: Egress::new(egress.clone()).context("building the outbound client")?,
        egress,
        recorder: Recorder {
            log: stores.log.clone(),
            bus,
        },
        clock: Arc::new(SystemClock),
        replica,
        delegator: DelegatorSlot::default(),
        code,
    };
    let engine = wiring.engine();
    // The run use cases start the children of `delegate` calls, driven by this engine:
    // in place before the engine adopts a run whose delegation it must run again.
    wiring.delegator.set(Arc::new(wiring.runs(&engine)));
    engine.start().await.context("starting the engine")?;
    let shutdown = CancellationToken::new();
    let tasks = TaskTracker::new();
    let revocations = Revocations::default();
    revocations
        .listen(wiring.recorder.bus.as_ref(), &tasks, shutdown.clone())
        .await
        .context("listening for ended credentials")?;
    let state = wiring.state(
        &engine,
        local_owner,
        &revocations,
        shutdown.clone(),
        tasks.clone(),
    )?;
    // Every replica offers to run the retention job; its lease lets one at a time.
    tasks.spawn(wiring.retention().run(shutdown.clone()));
    // Every replica fires due schedules; the store's version checks decide each fire once.
    tasks.spawn(state.schedules.clone().run(shutdown.clone()));
    // Every replica attempts due webhook deliveries, each leased to one at a time.
    tasks.spawn(state.webhooks.clone().run(shutdown.clone()));
    let router = baton_api::router(state, metrics_route(&stores));
    let server = tokio::spawn(crate::serve::serve(
        listener,
        router,
        config.http.header_read_timeout,
        shutdown.clone(),
    ));
    tracing::info!(%addr, tier = config.tier.as_str(), replica = %wiring.replica, "baton is serving");
    Ok(RunningApp {
        addr,
        engine,
        stores,
        shutdown,
        tasks,
        _data_dir_lock: data_dir_lock,
        server,
    })
}

/// `/metrics`, with the pool gauges, the process's figures and the installation's counts
/// sampled at each scrape.
fn metrics_route(stores: &Stores) -> axum::Router {
    let stores = stores.clone();
    let counts = Arc::new(crate::telemetry::metrics::Counts::default());
    axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || async move {
            stores.record_pool_gauges();
            counts.record(stores.stats.as_ref()).await;
            crate::telemetry::metrics::record_process();
            metrics_text()
        }),
    )
}

/// What the engine and the use cases are built from.
struct Wiring<'a> {
    config: &'a Config,
    stores: &'a Stores,
    keyring: Arc<Keyring>,
    /// The configured egress policy with this machine's own addresses.
    egress: Arc<EgressPolicy>,
    /// The one outbound client, under that policy.
    egress_client: Egress,
    recorder: Recorder,
    clock: Arc<dyn Clock>,
    replica: String,
    /// The engine's way to start delegated runs, filled with the run use cases.
    delegator: DelegatorSlot,
    /// Where workspace commands run.
    code: CodeTools,
}

impl Wiring<'_> {
    fn announcer(&self) -> Announcer {
        Announcer {
            bus: self.recorder.bus.clone(),
            replica: self.replica.clone(),
        }
    }

    /// The tenants' egress allowlists, under the installation's policy.
    fn egress_allowlists(&self) -> EgressAllowlists {
        EgressAllowlists {
            store: self.stores.egress_allowlists.clone(),
            policy: self.egress.clone(),
            clock: self.clock.clone(),
        }
    }

    /// The execution environments: the operator's, configured, and the tenants'.
    fn environments(&self) -> Environments {
        Environments {
            store: self.stores.environments.clone(),
            bases: self.config.environments.clone(),
            clock: self.clock.clone(),
        }
    }

    /// The run use cases, driving runs through `engine`.
    fn runs(&self, engine: &Engine) -> Runs {
        Runs {
            reader: self.stores.runs.clone(),
            recorder: self.recorder.clone(),
            replica: self.replica.clone(),
            agents: self.stores.agents.clone(),
            tools: self.stores.tools.clone(),
            driver: Arc::new(engine.clone()),
            clock: self.clock.clone(),
        }
    }

    /// The retention use cases and job, on this replica.
    fn retention(&self) -> Retention {
        Retention {
            store: self.stores.retention.clone(),
            bus: self.recorder.bus.clone(),
            clock: self.clock.clone(),
            replica: self.replica.clone(),
            options: self.config.retention.clone(),
        }
    }

    /// The schedule use cases and job, starting runs with `runs`.
    fn schedules(&self, runs: Runs) -> Schedules {
        let stores = self.stores;
        Schedules {
            store: stores.schedules.clone(),
            runs,
            reader: stores.runs.clone(),
            agents: stores.agents.clone(),
            api_keys: stores.api_keys.clone(),
            users: stores.users.clone(),
            clock: self.clock.clone(),
            options: self.config.schedules.clone(),
            changed: Arc::default(),
        }
    }

    /// The webhook use cases and deliverer, calling out through the egress client.
    fn webhooks(&self) -> Webhooks {
        Webhooks {
            store: self.stores.webhooks.clone(),
            keyring: self.keyring.clone(),
            egress: self.egress_allowlists(),
            transport: Arc::new(self.egress_client.clone()),
            clock: self.clock.clone(),
            replica: self.replica.clone(),
            options: self.config.webhooks.clone(),
        }
    }

    fn tools(&self) -> Tools {
        Tools {
            store: self.stores.tools.clone(),
            agents: self.stores.agents.clone(),
            clock: self.clock.clone(),
            egress: self.egress_allowlists(),
            environments: self.environments(),
        }
    }

    /// The MCP server use cases, listing tools through the egress client.
    fn mcp_servers(&self) -> McpServers {
        McpServers {
            store: self.stores.mcp_servers.clone(),
            tool_store: self.stores.tools.clone(),
            tools: self.tools(),
            secrets: Arc::new(self.secrets()),
            lister: Arc::new(self.egress_client.clone()),
            clock: self.clock.clone(),
            egress: self.egress_allowlists(),
        }
    }

    fn secrets(&self) -> Secrets {
        Secrets {
            store: self.stores.secrets.clone(),
            keyring: self.keyring.clone(),
            clock: self.clock.clone(),
        }
    }

    fn engine(&self) -> Engine {
        let (stores, cluster) = (self.stores, &self.config.cluster);
        Engine::new(
            EnginePorts {
                runs: stores.runs.clone(),
                recorder: self.recorder.clone(),
                leases: stores.leases.clone(),
                agents: stores.agents.clone(),
                tools: stores.tools.clone(),
                mcp_servers: stores.mcp_servers.clone(),
                secrets: Arc::new(self.secrets()),
                checkpoints: stores.checkpoints.clone(),
                keyring: self.keyring.clone(),
                clock: self.clock.clone(),
                egress: self.egress_client.clone(),
                allowlists: stores.egress_allowlists.clone(),
                audit: stores.audit.clone(),
                delegator: self.delegator.clone(),
                workspaces: stores.workspaces.clone(),
                code: self.code.clone(),
                environments: self.environments(),
                api_keys: stores.api_keys.clone(),
                users: stores.users.clone(),
            },
            EngineOptions {
                replica: self.replica.clone(),
                lease_ttl: cluster.lease_ttl,
                renew_every: cluster.renew_every,
                adopt_every: cluster.adopt_every,
                adopt_batch: cluster.adopt_batch,
            },
        )
    }

    /// The use cases, built once, and the HTTP settings.
    fn state(
        &self,
        engine: &Engine,
        local_owner: Option<TenantId>,
        revocations: &Revocations,
        shutdown: CancellationToken,
        tasks: TaskTracker,
    ) -> anyhow::Result<AppState> {
        let (config, stores, clock) = (self.config, self.stores, &self.clock);
        Ok(AppState::new(baton_api::Services {
            runs: self.runs(engine),
            agents: Agents {
                store: stores.agents.clone(),
                tools: stores.tools.clone(),
                clock: clock.clone(),
                egress: self.egress_allowlists(),
            },
            tools: self.tools(),
            mcp_servers: self.mcp_servers(),
            egress_allowlists: self.egress_allowlists(),
            environments: self.environments(),
            retention: self.retention(),
            schedules: self.schedules(self.runs(engine)),
            webhooks: self.webhooks(),
            secrets: self.secrets(),
            audit: Audit {
                store: stores.audit.clone(),
            },
            encryption_keys: EncryptionKeys::new(
                Resealer {
                    store: stores.sealed.clone(),
                    keyring: self.keyring.clone(),
                },
                stores.audit.clone(),
                clock.clone(),
            ),
            checkpoints: Checkpoints {
                store: stores.checkpoints.clone(),
                runs: stores.runs.clone(),
            },
            workspaces: Workspaces {
                runs: self.runs(engine),
                store: stores.workspaces.clone(),
                limits: self.config.workspaces,
            },
            api_keys: ApiKeys {
                store: stores.api_keys.clone(),
                clock: clock.clone(),
                announcer: self.announcer(),
            },
            members: Members {
                store: stores.users.clone(),
                invitations: stores.invitations.clone(),
                clock: clock.clone(),
                announcer: self.announcer(),
            },
            invitations: Invitations {
                store: stores.invitations.clone(),
                users: stores.users.clone(),
                clock: clock.clone(),
            },
            auth: Authenticator::new(
                stores.api_keys.clone(),
                stores.tenants.clone(),
                stores.users.clone(),
                clock.clone(),
                local_owner,
                tasks.clone(),
            ),
            stream_tickets: StreamTickets {
                store: stores.stream_tickets.clone(),
                runs: stores.runs.clone(),
                clock: clock.clone(),
                lifetime: chrono::TimeDelta::from_std(config.login.stream_ticket_lifetime)
                    .unwrap_or(chrono::TimeDelta::MAX),
            },
            accounts: baton_api::accounts::Accounts {
                users: users(config, stores, clock.clone(), self.announcer())?,
                login_limits: baton_api::accounts::LoginLimits::new(
                    config.login.account_rate_limit,
                    config.login.address_rate_limit,
                ),
            },
            http: HttpSettings {
                body_limit_bytes: config.http.body_limit_bytes,
                sse_keepalive: config.http.sse_keepalive,
                sse_resync: config.http.sse_resync,
                header_limit_bytes: config.http.header_limit_bytes,
                allowed_hosts: config.http.allowed_hosts.clone(),
                allowed_origins: config.http.allowed_origins.clone(),
                request_timeout: config.http.request_timeout,
            },
            limits: baton_api::limits::RateLimits::new(
                config.http.key_rate_limit,
                config.http.tenant_rate_limit,
            ),
            revocations: revocations.clone(),
            streams: baton_api::streams::StreamLimits::new(
                config.http.sse_streams_per_key,
                config.http.sse_streams_per_tenant,
            ),
            code_tools_unavailable: self.code.sandbox.as_ref().err().cloned(),
            replica: self.replica.clone(),
            shutdown,
            tasks,
        }))
    }
}
