//! The app under test and typed requests to it: `baton_api::router` over the real
//! embedded-tier parts (an in-memory SQLite store, the in-process bus, an engine whose
//! scripted agents complete runs), driven with `oneshot`, without a socket. Knows the
//! API by its paths and JSON, as a client does; the store only to make what the command
//! line makes (tenants, their first keys, users).

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::http::{HeaderMap, Method, Request, StatusCode, header, request};
use baton_api::accounts::{Accounts, LoginLimits};
use baton_api::limits::RateLimits;
use baton_api::{AppState, HttpSettings};
use baton_bus::InProcessBus;
use baton_core::agents::Agents;
use baton_core::api_keys::ApiKeys;
use baton_core::audit::Audit;
use baton_core::auth::Authenticator;
use baton_core::crypto::{Keyring, PasswordParams, Passwords, tokens};
use baton_core::encryption_keys::{EncryptionKeys, Resealer};
use baton_core::members::Members;
use baton_core::model::{ApiKey, AuditAction, AuditEntry, Tenant as TenantRecord};
use baton_core::ports::{ApiKeyStore, Clock, SystemClock, TenantStore};
use baton_core::runs::{Checkpoints, Recorder, Runs};
use baton_core::secrets::Secrets;
use baton_core::tools::Tools;
use baton_core::users::Users;
use baton_core::{Role, TenantId};
use baton_engine::{Engine, EngineOptions, EnginePorts};
use baton_store::SqliteStore;
use chrono::{DateTime, TimeDelta, Utc};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

/// Bound on every wait: a response body (an SSE stream included), a run reaching a status.
pub const DEADLINE: Duration = Duration::from_secs(10);

/// How often [`TestApp::wait_run`] looks at the run.
const POLL: Duration = Duration::from_millis(5);

/// The cheapest argon2id parameters: the tests log in, they do not measure hashing.
const CHEAP_PASSWORDS: PasswordParams = PasswordParams {
    memory_kib: 8,
    iterations: 1,
    parallelism: 1,
};

/// The whole HTTP app over its own in-memory database.
pub struct TestApp {
    router: Router,
    store: SqliteStore,
    users: Users,
}

/// A tenant made for one test, and its owner's API key.
pub struct Tenant {
    pub id: TenantId,
    pub owner: String,
}

/// What a request sends as `Authorization: Bearer …`: a token, or nothing.
pub trait Auth {
    fn bearer(&self) -> Option<&str>;
}

impl Auth for str {
    fn bearer(&self) -> Option<&str> {
        Some(self)
    }
}

impl Auth for String {
    fn bearer(&self) -> Option<&str> {
        Some(self)
    }
}

/// No `Authorization` header.
pub struct Anonymous;

impl Auth for Anonymous {
    fn bearer(&self) -> Option<&str> {
        None
    }
}

/// An answer, its body read to the end.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    /// The body as JSON; `Null` when it is not JSON.
    pub body: Value,
    pub text: String,
}

impl Reply {
    /// The string at `pointer` (`/run/id`) of the body; panics with the body if absent.
    pub fn str(&self, pointer: &str) -> String {
        self.body
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no string at {pointer}: {} {}", self.status, self.text))
            .to_string()
    }

    /// The `items` of a page.
    pub fn items(&self) -> &Vec<Value> {
        self.body["items"]
            .as_array()
            .unwrap_or_else(|| panic!("not a page: {} {}", self.status, self.text))
    }

    /// `field` of every item of a page.
    pub fn item_fields(&self, field: &str) -> Vec<Value> {
        self.items().iter().map(|i| i[field].clone()).collect()
    }
}

/// Checks that `reply` is a problem+json answer with `status` and `code`, whose body
/// repeats the status and the request id of the `x-request-id` header; returns its detail.
pub fn assert_problem(reply: &Reply, status: u16, code: &str) -> String {
    assert_eq!(
        (reply.status.as_u16(), reply.body["code"].as_str()),
        (status, Some(code)),
        "{}",
        reply.text
    );
    assert_eq!(
        reply.headers[header::CONTENT_TYPE],
        baton_api::error::PROBLEM_JSON
    );
    assert_eq!(reply.body["status"], status);
    let request_id = reply.headers["x-request-id"].to_str().expect("ASCII");
    assert_eq!(reply.body["request_id"], request_id);
    reply.body["detail"]
        .as_str()
        .expect("a problem has a detail")
        .to_string()
}

impl TestApp {
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
        let recorder = Recorder {
            log: db.clone(),
            bus: Arc::new(InProcessBus::new(64)),
        };
        let secrets = Secrets {
            store: db.clone(),
            keyring: keyring.clone(),
            clock: clock.clone(),
        };
        let engine = Engine::new(
            EnginePorts {
                runs: db.clone(),
                recorder: recorder.clone(),
                leases: db.clone(),
                agents: db.clone(),
                tools: db.clone(),
                secrets: Arc::new(secrets.clone()),
                checkpoints: db.clone(),
                keyring: keyring.clone(),
                clock: clock.clone(),
            },
            EngineOptions::new("api-tests"),
        );
        engine.start().await.expect("the engine starts");
        let users = Users {
            store: db.clone(),
            passwords: Passwords::new(CHEAP_PASSWORDS).expect("argon2 parameters"),
            clock: clock.clone(),
            session_lifetime: TimeDelta::hours(1),
        };
        let tasks = TaskTracker::new();
        let state = AppState {
            runs: Runs {
                reader: db.clone(),
                recorder,
                replica: "api-tests".into(),
                agents: db.clone(),
                driver: Arc::new(engine),
                clock: clock.clone(),
            },
            agents: Agents {
                store: db.clone(),
                tools: db.clone(),
                clock: clock.clone(),
            },
            tools: Tools {
                store: db.clone(),
                clock: clock.clone(),
            },
            checkpoints: Checkpoints {
                store: db.clone(),
                runs: db.clone(),
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
            },
            members: Members {
                store: db.clone(),
                clock: clock.clone(),
            },
            auth: Authenticator::new(
                db.clone(),
                db.clone(),
                db.clone(),
                clock,
                local,
                tasks.clone(),
            ),
            accounts: Accounts {
                users: users.clone(),
                login_limits: LoginLimits::default(),
            },
            http: HttpSettings::default(),
            limits: RateLimits::default(),
            replica: "api-tests".into(),
            shutdown: CancellationToken::new(),
            tasks,
        };
        let app = TestApp {
            router: baton_api::router(state, Router::new()),
            store,
            users,
        };
        (app, local)
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

    /// `method path` with a loopback `Host` and the bearer token of `auth`, to finish with
    /// headers and a body.
    pub fn request(
        &self,
        method: Method,
        path: &str,
        auth: &(impl Auth + ?Sized),
    ) -> request::Builder {
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, "localhost");
        match auth.bearer() {
            Some(token) => req.header(header::AUTHORIZATION, format!("Bearer {token}")),
            None => req,
        }
    }

    /// Sends `req` through the router and reads the whole answer (within [`DEADLINE`]).
    pub async fn send(&self, req: Request<Body>) -> Reply {
        let res = self
            .router
            .clone()
            .oneshot(req)
            .await
            .expect("the router never fails");
        let (status, headers) = (res.status(), res.headers().clone());
        let bytes = tokio::time::timeout(DEADLINE, to_bytes(res.into_body(), usize::MAX))
            .await
            .expect("the body ends in time")
            .expect("the body is readable");
        let text = String::from_utf8(bytes.to_vec()).expect("the body is UTF-8");
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Reply {
            status,
            headers,
            body,
            text,
        }
    }

    pub async fn get(&self, path: &str, auth: &(impl Auth + ?Sized)) -> Reply {
        let req = self.request(Method::GET, path, auth);
        self.send(req.body(Body::empty()).expect("a request")).await
    }

    pub async fn delete(&self, path: &str, auth: &(impl Auth + ?Sized)) -> Reply {
        let req = self.request(Method::DELETE, path, auth);
        self.send(req.body(Body::empty()).expect("a request")).await
    }

    pub async fn post(&self, path: &str, auth: &(impl Auth + ?Sized), body: Value) -> Reply {
        self.send_json(Method::POST, path, auth, body).await
    }

    pub async fn put(&self, path: &str, auth: &(impl Auth + ?Sized), body: Value) -> Reply {
        self.send_json(Method::PUT, path, auth, body).await
    }

    /// `method path` with `body` as JSON.
    pub async fn send_json(
        &self,
        method: Method,
        path: &str,
        auth: &(impl Auth + ?Sized),
        body: Value,
    ) -> Reply {
        let req = self
            .request(method, path, auth)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_string()))
            .expect("a request");
        self.send(req).await
    }

    /// A scripted agent answering model call N with `replies[N]` (`{"content",
    /// "delay_ms", "complete_run"}`); returns its id.
    pub async fn agent(&self, auth: &(impl Auth + ?Sized), replies: Value) -> String {
        let r = self.post("/v1/agents", auth, scripted_agent(replies)).await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
        r.str("/id")
    }

    /// A run of `agent`, with a first message when given; returns its id.
    pub async fn run(
        &self,
        auth: &(impl Auth + ?Sized),
        agent: &str,
        message: Option<&str>,
    ) -> String {
        let mut body = json!({"agent_id": agent});
        if let Some(m) = message {
            body["message"] = json!(m);
        }
        let r = self.post("/v1/runs", auth, body).await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
        r.str("/run/id")
    }

    /// Polls the run until its status is `status`, within [`DEADLINE`]; returns it.
    pub async fn wait_run(&self, auth: &(impl Auth + ?Sized), run: &str, status: &str) -> Value {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let r = self.get(&format!("/v1/runs/{run}"), auth).await;
            assert_eq!(r.status, StatusCode::OK, "{}", r.text);
            if r.body["status"] == status {
                return r.body;
            }
            assert!(
                Instant::now() < deadline,
                "the run never became {status}: {}",
                r.text
            );
            tokio::time::sleep(POLL).await;
        }
    }
}

/// The body of a new agent whose scripted model answers call N with `replies[N]`.
pub fn scripted_agent(replies: Value) -> Value {
    json!({"name": "scripted", "provider": {"kind": "scripted", "replies": replies}})
}

/// The body of a new client tool (the API client carries out its calls) named `name`.
pub fn client_tool(name: &str) -> Value {
    json!({"name": name, "effect": "read", "input_schema": {"type": "object"},
        "kind": {"kind": "client"}})
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
