//! The app under test: `baton_api::router` over the real embedded-tier parts (an
//! in-memory SQLite store, the in-process bus, an engine whose scripted agents complete
//! runs), driven with `oneshot` ([`client`]), without a socket. Tests know the API by its
//! paths and JSON, as a client does; the store is used only to make what the command line
//! makes (tenants, their first keys, users).

mod client;

pub use client::{Anonymous, Reply, assert_problem, client_tool, scripted_agent};

use axum::Router;
use baton_api::accounts::{Accounts, LoginLimits};
use baton_api::limits::RateLimits;
use baton_api::revocations::Revocations;
use baton_api::streams::StreamLimits;
use baton_api::{AppState, HttpSettings};
use baton_bus::InProcessBus;
use baton_core::agents::Agents;
use baton_core::api_keys::ApiKeys;
use baton_core::audit::Audit;
use baton_core::auth::{Announcer, Authenticator};
use baton_core::crypto::{Keyring, PasswordParams, Passwords, tokens};
use baton_core::egress::EgressPolicy;
use baton_core::egress_allowlists::EgressAllowlists;
use baton_core::encryption_keys::{EncryptionKeys, Resealer};
use baton_core::invitations::Invitations;
use baton_core::mcp_servers::McpServers;
use baton_core::members::Members;
use baton_core::model::{ApiKey, AuditAction, AuditEntry, Tenant as TenantRecord};
use baton_core::ports::{ApiKeyStore, Clock, SystemClock, TenantStore};
use baton_core::retention::{Retention, RetentionOptions};
use baton_core::runs::{Checkpoints, Recorder, Runs};
use baton_core::schedules::{ScheduleOptions, Schedules};
use baton_core::secrets::Secrets;
use baton_core::tools::Tools;
use baton_core::users::Users;
use baton_core::webhooks::{WebhookOptions, Webhooks};
use baton_core::{Role, TenantId};
use baton_engine::{Engine, EngineOptions, EnginePorts};
use baton_store::SqliteStore;
use chrono::{DateTime, TimeDelta, Utc};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Bound on every wait: a response body (an SSE stream included), a run reaching a status.
pub const DEADLINE: Duration = Duration::from_secs(10);

/// The cheapest argon2id parameters: the tests log in, they do not measure hashing.
const CHEAP_PASSWORDS: PasswordParams = PasswordParams {
    memory_kib: 8,
    iterations: 1,
    parallelism: 1,
};

/// The whole HTTP app over its own in-memory database.
/// Event streams one key may hold open: small, so a test can reach the limit.
pub const STREAMS_PER_KEY: u32 = 3;

/// How long a stream ticket of the test app may wait for its stream: short, so a test
/// can see one expire.
pub const TICKET_LIFETIME: TimeDelta = TimeDelta::seconds(3);

pub struct TestApp {
    router: Router,
    store: SqliteStore,
    users: Users,
    retention: Retention,
    schedules: Schedules,
    webhooks: Webhooks,
}

/// A tenant made for one test, and its owner's API key.
pub struct Tenant {
    pub id: TenantId,
    pub owner: String,
}

impl TestApp {
    /// The app's store, for what no route does (rows changed behind the API's back).
    pub fn store(&self) -> &SqliteStore {
        &self.store
    }

    /// The retention job of the app's replica, whose rounds a test runs when it wants.
    pub fn retention(&self) -> &Retention {
        &self.retention
    }

    /// The schedules job of the app's replica (not running: a test looks for due
    /// schedules when it wants, with this clock or one of its own).
    pub fn schedules(&self) -> &Schedules {
        &self.schedules
    }

    /// The webhook deliverer of the app's replica (not running: a test runs its rounds).
    pub fn webhooks(&self) -> &Webhooks {
        &self.webhooks
    }

    /// Authentication required: every request needs an API key or a session token.
    pub async fn new() -> Self {
        Self::build(false).await.0
    }

    /// Authentication off: requests without credentials act as the owner of the tenant
    /// returned (the embedded tier on loopback).
    pub async fn local_owner() -> (Self, TenantId) {
        let (app, tenant) = Self::build(true).await;
        (app, tenant.expect("the local owner's tenant"))
    }

    async fn build(local_owner: bool) -> (Self, Option<TenantId>) {
        let store = SqliteStore::in_memory().await.expect("an in-memory store");
        let local = match local_owner {
            true => Some(create_tenant(&store).await),
            false => None,
        };
        let db = Arc::new(store.clone());
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let keyring = Arc::new(Keyring::ephemeral());
        // The embedded tier's policy: loopback may be called, the rest of the built-in
        // rules hold.
        let egress = Arc::new(EgressPolicy::local());
        let allowlists = EgressAllowlists {
            store: db.clone(),
            policy: egress.clone(),
            clock: clock.clone(),
        };
        let recorder = Recorder {
            log: db.clone(),
            bus: Arc::new(InProcessBus::new(64)),
        };
        let environments = baton_core::environments::Environments {
            store: db.clone(),
            bases: Arc::new(test_bases()),
            clock: clock.clone(),
        };
        let secrets = Secrets {
            store: db.clone(),
            keyring: keyring.clone(),
            clock: clock.clone(),
        };
        let announcer = Announcer {
            bus: recorder.bus.clone(),
            replica: "api-tests".into(),
        };
        let delegator = baton_core::ports::DelegatorSlot::default();
        let engine = Engine::new(
            EnginePorts {
                runs: db.clone(),
                recorder: recorder.clone(),
                leases: db.clone(),
                agents: db.clone(),
                tools: db.clone(),
                mcp_servers: db.clone(),
                secrets: Arc::new(secrets.clone()),
                checkpoints: db.clone(),
                keyring: keyring.clone(),
                clock: clock.clone(),
                egress: baton_egress::Egress::new(egress.clone()).expect("the client"),
                allowlists: db.clone(),
                audit: db.clone(),
                delegator: delegator.clone(),
                workspaces: db.clone(),
                code: baton_engine::CodeTools::unavailable(
                    "not in the API tests",
                    workspace_limits(),
                ),
                environments: environments.clone(),
                api_keys: db.clone(),
                users: db.clone(),
            },
            EngineOptions::new("api-tests"),
        );
        engine.start().await.expect("the engine starts");
        let users = Users {
            store: db.clone(),
            passwords: Passwords::new(CHEAP_PASSWORDS).expect("argon2 parameters"),
            clock: clock.clone(),
            session_lifetime: TimeDelta::hours(1),
            announcer: announcer.clone(),
        };
        let tasks = TaskTracker::new();
        let revocations = Revocations::default();
        revocations
            .listen(recorder.bus.as_ref(), &tasks, CancellationToken::new())
            .await
            .expect("listening for ended credentials");
        let retention = Retention {
            store: db.clone(),
            bus: recorder.bus.clone(),
            clock: clock.clone(),
            replica: "api-tests".into(),
            options: RetentionOptions::default(),
        };
        let runs = Runs {
            reader: db.clone(),
            recorder,
            replica: "api-tests".into(),
            agents: db.clone(),
            tools: db.clone(),
            driver: Arc::new(engine),
            clock: clock.clone(),
        };
        let state = AppState::new(baton_api::Services {
            runs: runs.clone(),
            agents: Agents {
                store: db.clone(),
                tools: db.clone(),
                clock: clock.clone(),
                egress: allowlists.clone(),
            },
            tools: Tools {
                store: db.clone(),
                agents: db.clone(),
                clock: clock.clone(),
                egress: allowlists.clone(),
                environments: environments.clone(),
            },
            egress_allowlists: allowlists.clone(),
            environments: environments.clone(),
            retention: retention.clone(),
            schedules: Schedules {
                store: db.clone(),
                runs: runs.clone(),
                reader: db.clone(),
                agents: db.clone(),
                api_keys: db.clone(),
                users: db.clone(),
                clock: clock.clone(),
                options: ScheduleOptions::default(),
                changed: Arc::default(),
            },
            webhooks: Webhooks {
                store: db.clone(),
                keyring: keyring.clone(),
                egress: allowlists.clone(),
                transport: Arc::new(baton_egress::Egress::new(egress.clone()).expect("the client")),
                clock: clock.clone(),
                replica: "api-tests".into(),
                options: WebhookOptions::default(),
            },
            mcp_servers: McpServers {
                store: db.clone(),
                tool_store: db.clone(),
                tools: Tools {
                    store: db.clone(),
                    agents: db.clone(),
                    clock: clock.clone(),
                    egress: allowlists.clone(),
                    environments: environments.clone(),
                },
                secrets: Arc::new(secrets.clone()),
                lister: Arc::new(baton_egress::Egress::new(egress.clone()).expect("the client")),
                clock: clock.clone(),
                egress: allowlists.clone(),
            },
            checkpoints: Checkpoints {
                store: db.clone(),
                runs: db.clone(),
            },
            workspaces: baton_core::workspace::Workspaces {
                runs: runs.clone(),
                store: db.clone(),
                limits: workspace_limits(),
            },
            secrets,
            audit: Audit { store: db.clone() },
            encryption_keys: EncryptionKeys::new(
                Resealer {
                    store: db.clone(),
                    keyring,
                },
                db.clone(),
                clock.clone(),
            ),
            api_keys: ApiKeys {
                store: db.clone(),
                clock: clock.clone(),
                announcer: announcer.clone(),
            },
            members: Members {
                store: db.clone(),
                invitations: db.clone(),
                clock: clock.clone(),
                announcer,
            },
            invitations: Invitations {
                store: db.clone(),
                users: db.clone(),
                clock: clock.clone(),
            },
            auth: Authenticator::new(
                db.clone(),
                db.clone(),
                db.clone(),
                clock.clone(),
                local,
                tasks.clone(),
            ),
            stream_tickets: baton_core::stream_tickets::StreamTickets {
                store: db.clone(),
                runs: db.clone(),
                clock: clock.clone(),
                lifetime: TICKET_LIFETIME,
            },
            accounts: Accounts {
                users: users.clone(),
                login_limits: LoginLimits::default(),
            },
            http: HttpSettings::default(),
            limits: RateLimits::default(),
            streams: StreamLimits::new(STREAMS_PER_KEY, 0),
            revocations: revocations.clone(),
            replica: "api-tests".into(),
            shutdown: CancellationToken::new(),
            code_tools_unavailable: Some("not in the API tests".into()),
            tasks,
        });
        delegator.set(Arc::new(state.runs.clone()));
        let schedules = state.schedules.clone();
        let webhooks = state.webhooks.clone();
        let app = TestApp {
            router: baton_api::router(state, Router::new()),
            store,
            users,
            retention,
            schedules,
            webhooks,
        };
        (app, local)
    }

    /// An app with authentication required and a tenant of it.
    pub async fn with_tenant() -> (Self, Tenant) {
        let app = Self::new().await;
        let tenant = app.tenant().await;
        (app, tenant)
    }

    /// A new tenant and an owner API key of it.
    pub async fn tenant(&self) -> Tenant {
        let id = create_tenant(&self.store).await;
        let owner = self.key(id, Role::Owner).await;
        Tenant { id, owner }
    }

    /// A new API key of `role` in `tenant`; returns its token.
    pub async fn key(&self, tenant: TenantId, role: Role) -> String {
        self.key_with(tenant, role, None, None).await
    }

    /// Stores an API key as `baton admin create-tenant` does, expiring and revoked at the
    /// times given; returns its token.
    pub async fn key_with(
        &self,
        tenant: TenantId,
        role: Role,
        expires_at: Option<DateTime<Utc>>,
        revoked_at: Option<DateTime<Utc>>,
    ) -> String {
        let issued = tokens::issue_token();
        let key = ApiKey {
            id: uuid::Uuid::now_v7(),
            tenant,
            name: "test".into(),
            prefix: issued.prefix.clone(),
            role,
            created_at: SystemClock.now(),
            expires_at,
            revoked_at,
        };
        let audit = AuditEntry::operator(
            SystemClock.now(),
            AuditAction::ApiKeyCreated,
            key.id.to_string(),
            json!({}),
        );
        self.store
            .create_api_key(&key, &issued.hash, &audit)
            .await
            .expect("the key is stored");
        issued.token
    }

    /// A new user (of no tenant yet), as `baton admin create-user` makes one.
    pub async fn user(&self, email: &str, password: &str) {
        self.users
            .create_user(email, password)
            .await
            .expect("the user is created");
    }
}

/// Stores a tenant with a unique name, as `baton admin create-tenant` does.
async fn create_tenant(store: &SqliteStore) -> TenantId {
    let tenant = TenantRecord {
        id: TenantId::new(),
        name: format!("t-{}", uuid::Uuid::new_v4()),
        created_at: SystemClock.now(),
    };
    store
        .create_tenant(&tenant)
        .await
        .expect("the tenant is stored");
    tenant.id
}

/// Quotas small enough for the tests to reach.
pub fn workspace_limits() -> baton_core::workspace::WorkspaceLimits {
    baton_core::workspace::WorkspaceLimits {
        max_file_bytes: 1024,
        max_run_files: 5,
        max_run_bytes: 2048,
        max_tenant_bytes: 4096,
    }
}

/// The operator's environments of the API tests: the built-in `default`, and `wide`,
/// which allows network and caps commands at 60 s and 32 processes.
pub fn test_bases() -> baton_core::environments::Bases {
    use baton_core::model::{BaseEnvironment, EnvironmentLimits};
    let wide = BaseEnvironment {
        name: "wide".into(),
        network: true,
        limits: EnvironmentLimits {
            wall_ms: Some(60_000),
            processes: Some(32),
            ..Default::default()
        },
        ..BaseEnvironment::builtin()
    };
    baton_core::environments::Bases::new([wide])
}
