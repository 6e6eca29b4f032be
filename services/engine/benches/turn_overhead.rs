//! Turn overhead: what the engine itself costs per turn — appends, state folding, lease
//! claim and release, fan-out — with a scripted model that answers at once, on SQLite
//! (in memory) and on Postgres (a fresh database on the test server). Three shapes:
//! a turn without tools, a turn with one read tool call to a local endpoint, a turn with
//! one `shell` call (sandbox set-up to promoted result: the command changes a file each
//! time), and, for reference, that endpoint's bare HTTP round trip (the tool time inside
//! the second).
//!
//! `cargo bench -p baton-engine --bench turn_overhead`; Postgres from
//! `BATON_TEST_DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/postgres`).

use baton_bus::InProcessBus;
use baton_core::agents::{Agents, NewAgent};
use baton_core::model::{AgentLimits, ProviderSpec, ScriptedReply, ScriptedToolCall, ToolKindSpec};
use baton_core::ports::{
    AgentStore, AuditStore, CheckpointStore, Clock, EgressAllowlistStore, EventLog, LeaseStore,
    McpServerStore, RunReader, SecretReader, SystemClock, TenantStore, ToolStore,
};
use baton_core::runs::{CreateRun, PostMessage, Recorder, Runs};
use baton_core::tools::{NewTool, Tools};
use baton_core::{AgentId, Principal, Role, RunId, StoreError, TenantId};
use baton_engine::{Engine, EngineOptions, EnginePorts};
use baton_events::ToolEffect;
use baton_testkit::{TestDatabase, ToolServer};
use criterion::{Criterion, criterion_group, criterion_main};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The tool a turn calls.
enum Tool {
    None,
    /// An `http` read of this URL.
    Read(String),
    /// A `shell` command in a sandbox, whose file change is promoted.
    Shell,
}

/// Enough replies for every turn criterion asks for.
const SCRIPT_LEN: usize = 500;

/// The built-in environments only.
fn environments<S: Store>(store: &S) -> baton_core::environments::Environments {
    baton_core::environments::Environments {
        store: Arc::new(store.clone()),
        bases: Default::default(),
        clock: Arc::new(SystemClock),
    }
}

/// The embedded tier's egress policy, with the tenant's allowlist (it keeps none here).
fn egress<S: Store>(store: &S) -> baton_core::egress_allowlists::EgressAllowlists {
    baton_core::egress_allowlists::EgressAllowlists {
        store: Arc::new(store.clone()),
        policy: Arc::new(baton_core::egress::EgressPolicy::local()),
        clock: Arc::new(SystemClock),
    }
}

trait Store:
    RunReader
    + EventLog
    + LeaseStore
    + AgentStore
    + ToolStore
    + McpServerStore
    + baton_core::ports::WorkspaceStore
    + TenantStore
    + CheckpointStore
    + AuditStore
    + EgressAllowlistStore
    + baton_core::ports::EnvironmentStore
    + baton_core::ports::ApiKeyStore
    + baton_core::ports::UserStore
    + baton_core::ports::WebhookStore
    + Clone
    + 'static
{
}
impl<T> Store for T where
    T: RunReader
        + EventLog
        + LeaseStore
        + AgentStore
        + ToolStore
        + McpServerStore
        + baton_core::ports::WorkspaceStore
        + TenantStore
        + CheckpointStore
        + AuditStore
        + EgressAllowlistStore
        + baton_core::ports::EnvironmentStore
        + baton_core::ports::ApiKeyStore
        + baton_core::ports::UserStore
        + baton_core::ports::WebhookStore
        + Clone
        + 'static
{
}

struct NoSecrets;

#[async_trait::async_trait]
impl SecretReader for NoSecrets {
    async fn reveal(&self, _: TenantId, _: &str) -> Result<Option<String>, StoreError> {
        Ok(None)
    }
}

struct Bench {
    runs: Runs,
    owner: Principal,
    _engine: Engine,
}

impl Bench {
    async fn new<S: Store>(store: S) -> Bench {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let tenant = baton_core::model::Tenant {
            id: TenantId::new(),
            name: format!("bench-{}", uuid::Uuid::new_v4()),
            created_at: clock.now(),
        };
        store.create_tenant(&tenant).await.expect("tenant");
        let recorder = Recorder {
            log: Arc::new(store.clone()),
            bus: Arc::new(InProcessBus::new(1024)),
        };
        let engine = Engine::new(
            EnginePorts {
                runs: Arc::new(store.clone()),
                recorder: recorder.clone(),
                leases: Arc::new(store.clone()),
                agents: Arc::new(store.clone()),
                tools: Arc::new(store.clone()),
                mcp_servers: Arc::new(store.clone()),
                secrets: Arc::new(NoSecrets),
                checkpoints: Arc::new(store.clone()),
                keyring: Arc::new(baton_core::crypto::Keyring::ephemeral()),
                clock: clock.clone(),
                egress: baton_egress::Egress::new(baton_core::egress::EgressPolicy::local())
                    .expect("the client"),
                allowlists: Arc::new(store.clone()),
                audit: Arc::new(store.clone()),
                delegator: Default::default(),
                workspaces: Arc::new(store.clone()),
                code: baton_engine::CodeTools::detect(
                    &std::env::temp_dir(),
                    baton_core::workspace::WorkspaceLimits::default(),
                    None,
                )
                .await,
                environments: environments(&store),
                api_keys: Arc::new(store.clone()),
                users: Arc::new(store.clone()),
            },
            EngineOptions::new("bench"),
        );
        engine.start().await.expect("engine");
        let runs = Runs {
            reader: Arc::new(store.clone()),
            recorder,
            replica: "bench".into(),
            agents: Arc::new(store.clone()),
            tools: Arc::new(store.clone()),
            driver: Arc::new(engine.clone()),
            clock,
        };
        Bench {
            runs,
            owner: Principal {
                tenant: tenant.id,
                role: Role::Owner,
                actor: "bench".into(),
                source: None,
            },
            _engine: engine,
        }
    }

    async fn agent<S: Store>(&self, store: &S, tool: Tool) -> AgentId {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let mut tools = Vec::new();
        let mut calls = Vec::new();
        let t = Tools {
            store: Arc::new(store.clone()),
            agents: Arc::new(store.clone()),
            clock: clock.clone(),
            egress: egress(store),
            environments: environments(store),
        };
        let (kind, name, arguments) = match tool {
            Tool::None => (None, "", serde_json::json!({})),
            Tool::Read(url) => (
                Some(ToolKindSpec::Http {
                    url,
                    secret_headers: vec![],
                }),
                "lookup",
                serde_json::json!({}),
            ),
            // A command that changes a file every time: each call promotes a change.
            Tool::Shell => (
                Some(ToolKindSpec::Workspace {
                    op: baton_core::model::WorkspaceOp::Shell,
                    environment: None,
                }),
                "shell",
                serde_json::json!({"command": "date +%N > out.txt"}),
            ),
        };
        if let Some(kind) = kind {
            let new = NewTool {
                name: name.into(),
                description: String::new(),
                input_schema: serde_json::json!({"type": "object"}),
                effect: ToolEffect::Read,
                idempotent: false,
                requires_approval: false,
                timeout_ms: 5_000,
                kind,
            };
            tools.push(t.create(&self.owner, new).await.expect("tool").id);
            calls.push(ScriptedToolCall {
                name: name.into(),
                arguments,
            });
        }
        let mut replies = Vec::with_capacity(SCRIPT_LEN * 2);
        for _ in 0..SCRIPT_LEN {
            if !calls.is_empty() {
                replies.push(ScriptedReply {
                    content: String::new(),
                    delay_ms: 0,
                    complete_run: false,
                    tool_calls: calls.clone(),
                });
            }
            replies.push(ScriptedReply {
                content: "ok".into(),
                delay_ms: 0,
                complete_run: false,
                tool_calls: vec![],
            });
        }
        let agents = Agents {
            store: Arc::new(store.clone()),
            tools: Arc::new(store.clone()),
            clock,
            egress: egress(store),
        };
        let new = NewAgent {
            name: "bench".into(),
            instructions: String::new(),
            provider: ProviderSpec::Scripted { replies },
            tools,
            limits: AgentLimits::default(),
        };
        agents.create(&self.owner, new).await.expect("agent").id
    }

    async fn run(&self, agent: AgentId) -> RunId {
        let cmd = CreateRun {
            agent_id: agent,
            title: None,
            metadata: Default::default(),
            message: None,
            request_id: None,
        };
        self.runs
            .create_run(&self.owner, cmd)
            .await
            .expect("run")
            .run
            .id
    }

    /// One turn, from the message to `turn.completed` reaching a live subscriber.
    async fn turn(&self, run: RunId) -> Duration {
        let mut sub = self
            .runs
            .bus()
            .subscribe(self.owner.tenant, run)
            .await
            .expect("subscribe");
        let started = Instant::now();
        let cmd = PostMessage {
            content: "go".into(),
            request_id: None,
            strategy: None,
        };
        self.runs
            .post_message(&self.owner, run, cmd)
            .await
            .expect("message");
        while let Some(e) = sub.events.recv().await {
            if e.event_type == "turn.completed" {
                return started.elapsed();
            }
        }
        panic!("the run's feed ended before the turn completed");
    }
}

fn bench_backend<S: Store>(c: &mut Criterion, rt: &tokio::runtime::Runtime, name: &str, store: S) {
    let tools = rt.block_on(ToolServer::start());
    let bench = rt.block_on(Bench::new(store.clone()));
    let mut group = c.benchmark_group(format!("turn/{name}"));
    group
        .sample_size(30)
        .measurement_time(Duration::from_secs(8));
    for (shape, tool) in [
        ("no_tools", Tool::None),
        ("one_read_tool", Tool::Read(tools.url("lookup"))),
        ("one_shell_call", Tool::Shell),
    ] {
        let agent = rt.block_on(bench.agent(&store, tool));
        group.bench_function(shape, |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    // A fresh run per sample keeps the stream short, as in production.
                    let run = bench.run(agent).await;
                    let mut total = Duration::ZERO;
                    for _ in 0..iters.min(SCRIPT_LEN as u64) {
                        total += bench.turn(run).await;
                    }
                    total * (iters as u32) / (iters.min(SCRIPT_LEN as u64) as u32)
                })
            })
        });
    }
    group.finish();
    run_end(c, rt, name, &bench, &store);
    let http = baton_testkit::http_client();
    let url = tools.url("lookup");
    c.bench_function(&format!("turn/{name}/tool_round_trip"), |b| {
        b.to_async(rt).iter(|| async {
            http.post(&url)
                .json(&serde_json::json!({}))
                .send()
                .await
                .expect("tool call")
        })
    });
}

/// An append that ends a run: the cancel of an idle run (`run.cancelled`, a webhook
/// event), timed alone; its run created untimed before it.
fn run_end<S: Store>(
    c: &mut Criterion,
    rt: &tokio::runtime::Runtime,
    name: &str,
    bench: &Bench,
    store: &S,
) {
    let agent = rt.block_on(bench.agent(store, Tool::None));
    let mut shapes = vec!["run_end"];
    shapes.push("run_end_one_subscriber");
    for shape in shapes {
        if shape == "run_end_one_subscriber" {
            // An endpoint subscribed to the event: the append records its delivery.
            let at = chrono::Utc::now();
            let hook = baton_core::model::Webhook {
                id: baton_core::WebhookId::new(),
                tenant: bench.owner.tenant,
                spec: baton_core::model::WebhookSpec {
                    url: "http://127.0.0.1:9/hook".into(),
                    description: None,
                    events: vec![baton_core::model::WebhookEvent::RunCancelled],
                },
                state: baton_core::model::WebhookState::Enabled,
                disabled_reason: None,
                consecutive_failures: 0,
                previous_secret_expires_at: None,
                secrets: Default::default(),
                version: 1,
                created_at: at,
                updated_at: at,
            };
            let audit = baton_core::model::AuditEntry::operator(
                at,
                baton_core::model::AuditAction::WebhookCreated,
                hook.id.to_string(),
                serde_json::json!({}),
            );
            rt.block_on(store.create_webhook(&hook, &audit))
                .expect("webhook");
        }
        c.bench_function(&format!("turn/{name}/{shape}"), |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let run = bench.run(agent).await;
                        let started = Instant::now();
                        bench
                            .runs
                            .cancel_run(&bench.owner, run, None)
                            .await
                            .expect("cancel");
                        total += started.elapsed();
                    }
                    total
                })
            })
        });
    }
}

fn turn_overhead(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let sqlite = rt
        .block_on(baton_store::SqliteStore::in_memory())
        .expect("sqlite");
    bench_backend(c, &rt, "sqlite", sqlite);
    let db = rt
        .block_on(TestDatabase::postgres())
        .expect("postgres test database");
    let pg = rt.block_on(async {
        baton_store::migrate::postgres(db.url())
            .await
            .expect("migrate");
        baton_store::PgStore::connect(&baton_store::PgOptions {
            url: db.url().to_string(),
            app_pool_size: 8,
            control_pool_size: 2,
            checkpoint_pool_size: 2,
            statement_timeout: Duration::from_secs(10),
            acquire_timeout: Duration::from_secs(5),
        })
        .await
        .expect("connect")
    });
    bench_backend(c, &rt, "postgres", pg);
    rt.block_on(db.drop_db()).expect("drop the database");
}

criterion_group!(benches, turn_overhead);
criterion_main!(benches);
