//! `TestApp`: one app per test, plus a typed API client.

use baton_core::model::{ApiKey, Tenant};
use baton_core::ports::{Clock, SystemClock};
use baton_core::{Role, TenantId, keys};
use baton_server::app::{self, RunningApp};
use baton_server::config::{Bus, Config, Storage, Tier};
use baton_testkit::TestDatabase;
use secrecy::SecretString;
use serde_json::{Value, json};
use std::time::Duration;

pub const DEADLINE: Duration = Duration::from_secs(20);

pub fn nats_url() -> String {
    std::env::var("BATON_TEST_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into())
}

pub struct TestApp {
    pub base: String,
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
        let mut config = Config::embedded(dir.path());
        tweak(&mut config);
        Self::start(config, dir, None).await
    }

    /// The team tier: a fresh Postgres database, the real NATS, API keys required.
    pub async fn team() -> Self {
        Self::team_with_nats(&nats_url()).await
    }

    /// The team tier against the NATS server at `nats`.
    pub async fn team_with_nats(nats: &str) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = TestDatabase::postgres().await.expect("test database");
        let mut config = Config::embedded(dir.path());
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
        config.bus = Bus::Nats {
            url: SecretString::from(nats.to_string()),
        };
        Self::start(config, dir, Some(db)).await
    }

    async fn start(config: Config, dir: tempfile::TempDir, db: Option<TestDatabase>) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let running = app::start(&config, listener).await.expect("app starts");
        TestApp {
            base: format!("http://{}", running.addr),
            running: Some(running),
            db,
            _dir: dir,
        }
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

    /// Stores an API key and returns its token.
    pub async fn key(
        &self,
        tenant: TenantId,
        role: Role,
        expires_at: Option<chrono::DateTime<chrono::Utc>>,
        revoked_at: Option<chrono::DateTime<chrono::Utc>>,
    ) -> String {
        let stores = &self.running.as_ref().expect("running").stores;
        let issued = keys::issue_token();
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
            .tenants
            .create_api_key(&key, &issued.hash)
            .await
            .expect("key");
        issued.token
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

/// A typed client of the REST API.
#[derive(Clone)]
pub struct Api {
    pub base: String,
    pub http: reqwest::Client,
    pub token: Option<String>,
}

pub struct Reply {
    pub status: u16,
    pub body: Value,
    pub content_type: String,
}

impl Api {
    pub fn new(base: &str, token: Option<String>) -> Self {
        Api {
            base: base.to_string(),
            http: reqwest::Client::new(),
            token,
        }
    }

    pub fn req(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let r = self.http.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(t) => r.bearer_auth(t),
            None => r,
        }
    }

    pub async fn send(&self, r: reqwest::RequestBuilder) -> Reply {
        let res = r.send().await.expect("request sent");
        let status = res.status().as_u16();
        let content_type = res
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let text = res.text().await.expect("body");
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Reply {
            status,
            body,
            content_type,
        }
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.send(self.req(reqwest::Method::GET, path)).await
    }

    pub async fn post(&self, path: &str, body: Value) -> Reply {
        self.send(self.req(reqwest::Method::POST, path).json(&body))
            .await
    }

    /// A scripted agent answering with `replies` (content, delay_ms, complete_run).
    pub async fn agent(&self, replies: &[(&str, u64, bool)]) -> String {
        let replies: Vec<Value> = replies
            .iter()
            .map(|(c, d, end)| json!({"content": c, "delay_ms": d, "complete_run": end}))
            .collect();
        let r = self
            .post(
                "/v1/agents",
                json!({"name": "test agent", "provider": {"kind": "scripted", "replies": replies}}),
            )
            .await;
        assert_eq!(r.status, 201, "create agent: {}", r.body);
        r.body["id"].as_str().expect("agent id").to_string()
    }

    pub async fn run(&self, agent: &str, message: Option<&str>) -> String {
        let mut body = json!({"agent_id": agent});
        if let Some(m) = message {
            body["message"] = json!(m);
        }
        let r = self.post("/v1/runs", body).await;
        assert_eq!(r.status, 201, "create run: {}", r.body);
        r.body["run"]["id"].as_str().expect("run id").to_string()
    }

    pub async fn message(&self, run: &str, content: &str, request_id: Option<&str>) -> Reply {
        let mut body = json!({"content": content});
        if let Some(id) = request_id {
            body["request_id"] = json!(id);
        }
        self.post(&format!("/v1/runs/{run}/messages"), body).await
    }

    /// Polls the run until `done(run)` holds, or panics at the deadline.
    pub async fn wait_run(&self, run: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            let r = self.get(&format!("/v1/runs/{run}")).await;
            assert_eq!(r.status, 200, "get run: {}", r.body);
            if done(&r.body) {
                return r.body;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "run never became {what}: {}",
                r.body
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn wait_status(&self, run: &str, status: &str) -> Value {
        self.wait_run(run, status, |r| r["status"] == status).await
    }

    pub async fn messages(&self, run: &str) -> Vec<Value> {
        let r = self
            .get(&format!("/v1/runs/{run}/messages?limit=500"))
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        r.body["items"].as_array().cloned().unwrap_or_default()
    }

    pub async fn event_versions(&self, run: &str) -> Vec<i64> {
        let r = self.get(&format!("/v1/runs/{run}/events?limit=500")).await;
        assert_eq!(r.status, 200, "{}", r.body);
        r.body["events"]
            .as_array()
            .map(|a| a.iter().filter_map(|e| e["version"].as_i64()).collect())
            .unwrap_or_default()
    }
}

/// Asserts a problem+json answer with `status` and `code`; returns its detail.
pub fn assert_problem(r: &Reply, status: u16, code: &str) -> String {
    assert_eq!(r.status, status, "expected {status} {code}, got {}", r.body);
    assert_eq!(r.body["code"], code, "{}", r.body);
    assert!(
        r.content_type.starts_with("application/problem+json"),
        "content type {}",
        r.content_type
    );
    assert!(
        r.body["request_id"].is_string(),
        "problem carries the request id"
    );
    r.body["detail"].as_str().unwrap_or_default().to_string()
}
