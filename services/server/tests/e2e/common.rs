//! `TestApp`: one app per test, handing out clients of the shared typed API client
//! (`baton_testkit::api`), re-exported here for the test modules.

use baton_core::crypto::tokens;
use baton_core::egress::HostRule;
use baton_core::model::{ApiKey, Tenant};
use baton_core::model::{AuditAction, AuditEntry};
use baton_core::ports::{Clock, SystemClock};
use baton_core::{Role, TenantId};
use baton_server::app::{self, RunningApp};
use baton_server::config::{Bus, Config, Crypto, SqliteLocation, Storage, Tier};
use baton_testkit::TestDatabase;
use baton_testkit::replicas::{TEST_KEY, nats_url};
use secrecy::{ExposeSecret, SecretString};
use std::time::Duration;

pub use baton_testkit::api::{Api, DEADLINE, assert_problem};

pub struct TestApp {
    pub base: String,
    config: Config,
    running: Option<RunningApp>,
    db: Option<TestDatabase>,
    _dir: tempfile::TempDir,
}

impl TestApp {
    /// The embedded tier: SQLite in a temp dir, in-process bus, auth off (local owner).
    pub async fn embedded() -> Self {
        Self::embedded_with(|_| {}).await
    }

    pub async fn embedded_with(tweak: impl FnOnce(&mut Config)) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut config = unlimited(Config::embedded(dir.path()));
        tweak(&mut config);
        Self::start(config, dir, None).await
    }

    /// The team tier: a fresh Postgres database, the real NATS, API keys required.
    pub async fn team() -> Self {
        Self::team_with_nats(&nats_url()).await
    }

    /// The team tier against the NATS server at `nats`.
    pub async fn team_with_nats(nats: &str) -> Self {
        Self::team_with(nats, |_| {}).await
    }

    /// The team tier against the NATS server at `nats`, its configuration changed by
    /// `tweak` last.
    pub async fn team_with(nats: &str, tweak: impl FnOnce(&mut Config)) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = TestDatabase::postgres().await.expect("test database");
        let mut config = unlimited(Config::embedded(dir.path()));
        let pools = config.storage.pools();
        config.tier = Tier::Team;
        config.auth_required = true;
        config.storage = Storage::Postgres {
            url: SecretString::from(db.url().to_string()),
            pools,
            statement_timeout: Duration::from_secs(10),
            acquire_timeout: Duration::from_secs(5),
            migrate_on_start: true,
        };
        config.bus = Bus::nats(SecretString::from(nats.to_string()));
        // The tests' tool and model servers listen on loopback: an operator's allowlist, as
        // an installation with an internal tool service would have.
        config.egress.allow_loopback = false;
        config.egress.allow = vec![HostRule::parse("127.0.0.1").expect("a rule")];
        config.crypto = Crypto::Keys {
            keys: vec![("test".into(), SecretString::from(TEST_KEY))],
            dir: None,
            active: "test".into(),
        };
        tweak(&mut config);
        Self::start(config, dir, Some(db)).await
    }

    async fn start(config: Config, dir: tempfile::TempDir, db: Option<TestDatabase>) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let running = app::start(&config, listener).await.expect("app starts");
        TestApp {
            base: format!("http://{}", running.addr),
            config,
            running: Some(running),
            db,
            _dir: dir,
        }
    }

    /// The address the app listens on.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.running.as_ref().expect("running").addr
    }

    /// The running app's stores.
    pub fn stores(&self) -> &app::Stores {
        &self.running.as_ref().expect("running").stores
    }

    /// A client without credentials (the local owner in the embedded tier).
    pub fn anonymous(&self) -> Api {
        Api::new(&self.base, None)
    }

    /// A new tenant and a client holding an API key of `role` in it.
    pub async fn tenant(&self, role: Role) -> (TenantId, Api) {
        let stores = &self.running.as_ref().expect("running").stores;
        let tenant = Tenant {
            id: TenantId::new(),
            name: format!("t-{}", uuid::Uuid::new_v4()),
            created_at: SystemClock.now(),
        };
        stores.tenants.create_tenant(&tenant).await.expect("tenant");
        let token = self.key(tenant.id, role, None, None).await;
        (tenant.id, Api::new(&self.base, Some(token)))
    }

    /// A new user with `password`, a member of `tenant` with `role`; its email.
    pub async fn member(&self, tenant: TenantId, role: Role, password: &str) -> String {
        let email = format!("member-{}@example.com", uuid::Uuid::new_v4().simple());
        let user = create_user(&self.config, self.stores(), &email, password).await;
        add_member(self.stores(), tenant, &user, role).await;
        email
    }

    /// Stores an API key and returns its token.
    pub async fn key(
        &self,
        tenant: TenantId,
        role: Role,
        expires_at: Option<chrono::DateTime<chrono::Utc>>,
        revoked_at: Option<chrono::DateTime<chrono::Utc>>,
    ) -> String {
        store_key(self.stores(), tenant, role, expires_at, revoked_at).await
    }

    /// Stops the app and starts it again on the same database and data directory (and a
    /// new port: clients need the new `base`).
    pub async fn restart(self) -> Self {
        let TestApp {
            config,
            running,
            db,
            _dir: dir,
            ..
        } = self;
        if let Some(r) = running {
            r.shutdown().await.expect("clean shutdown");
        }
        Self::start(config, dir, db).await
    }

    /// Every stored secret's `ciphertext` column, read from the database directly.
    pub async fn stored_ciphertexts(&self) -> Vec<Vec<u8>> {
        const QUERY: &str = "SELECT ciphertext FROM secrets";
        match &self.config.storage {
            Storage::Postgres { url, .. } => {
                let pool = sqlx::PgPool::connect(url.expose_secret())
                    .await
                    .expect("connect");
                let rows = sqlx::query_scalar(QUERY)
                    .fetch_all(&pool)
                    .await
                    .expect("read");
                pool.close().await;
                rows
            }
            Storage::Sqlite {
                location: SqliteLocation::File(path),
                ..
            } => {
                let options = sqlx::sqlite::SqliteConnectOptions::new().filename(path);
                let pool = sqlx::SqlitePool::connect_with(options).await.expect("open");
                let rows = sqlx::query_scalar(QUERY)
                    .fetch_all(&pool)
                    .await
                    .expect("read");
                pool.close().await;
                rows
            }
            other => panic!("no direct access to {other:?}"),
        }
    }

    /// Runs one SQL statement on the database directly, as an operator (or an attacker with
    /// database access) could.
    pub async fn execute_sql(&self, statement: &'static str) {
        match &self.config.storage {
            Storage::Postgres { url, .. } => {
                let pool = sqlx::PgPool::connect(url.expose_secret())
                    .await
                    .expect("connect");
                sqlx::query(statement)
                    .execute(&pool)
                    .await
                    .expect("execute");
                pool.close().await;
            }
            Storage::Sqlite {
                location: SqliteLocation::File(path),
                ..
            } => {
                let options = sqlx::sqlite::SqliteConnectOptions::new().filename(path);
                let pool = sqlx::SqlitePool::connect_with(options).await.expect("open");
                sqlx::query(statement)
                    .execute(&pool)
                    .await
                    .expect("execute");
                pool.close().await;
            }
            other => panic!("no direct access to {other:?}"),
        }
    }

    pub async fn stop(mut self) {
        if let Some(r) = self.running.take() {
            r.shutdown().await.expect("clean shutdown");
        }
        if let Some(db) = self.db.take() {
            db.drop_db().await.expect("drop test database");
        }
    }
}

/// `config` without request rate limits: tests poll as fast as they like; a test of the
/// limits sets its own in its tweak.
fn unlimited(mut config: Config) -> Config {
    config.http.key_rate_limit = 0;
    config.http.tenant_rate_limit = 0;
    config
}

/// Stores an API key of `role` in `tenant` directly, as `baton admin create-tenant` does
/// for its owner key, and returns its token.
/// Creates the user `email` with `password`, as `baton admin create-user` would.
pub async fn create_user(
    config: &Config,
    stores: &app::Stores,
    email: &str,
    password: &str,
) -> baton_core::model::User {
    let announcer = baton_core::auth::Announcer {
        bus: std::sync::Arc::new(baton_bus::InProcessBus::new(1)),
        replica: "test".into(),
    };
    let users =
        app::users(config, stores, std::sync::Arc::new(SystemClock), announcer).expect("users");
    users.create_user(email, password).await.expect("user")
}

/// Makes `user` a member of `tenant` with `role`, recorded as the operator's doing.
pub async fn add_member(
    stores: &app::Stores,
    tenant: TenantId,
    user: &baton_core::model::User,
    role: Role,
) {
    let member = baton_core::model::Member {
        user_id: user.id,
        email: user.email.clone(),
        role,
        created_at: SystemClock.now(),
    };
    stores
        .users
        .add_member(
            tenant,
            &member,
            &operator(AuditAction::MemberAdded, user.id),
        )
        .await
        .expect("member");
}

pub async fn store_key(
    stores: &app::Stores,
    tenant: TenantId,
    role: Role,
    expires_at: Option<chrono::DateTime<chrono::Utc>>,
    revoked_at: Option<chrono::DateTime<chrono::Utc>>,
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
    stores
        .api_keys
        .create_api_key(
            &key,
            &issued.hash,
            &operator(AuditAction::ApiKeyCreated, key.id),
        )
        .await
        .expect("key");
    issued.token
}

/// The audit entry of a change a test makes directly in the store, as the command line
/// would.
pub fn operator(action: AuditAction, target: impl ToString) -> AuditEntry {
    AuditEntry::operator(
        SystemClock.now(),
        action,
        target.to_string(),
        serde_json::json!({}),
    )
}
