//! The test world: an engine on an in-memory SQLite store and the in-process bus, a
//! tenant and its owner, and helpers to make agents and runs and to watch them.

use baton_bus::InProcessBus;
use baton_core::agents::{Agents, NewAgent};
use baton_core::egress::EgressPolicy;
use baton_core::egress_allowlists::EgressAllowlists;
use baton_core::model::{
    AgentLimits, OpenAiSpec, ProviderSpec, RunStatus, RunSummary, ScriptedReply,
};
use baton_core::ports::{AgentStore, Clock, RunDriver, RunReader, SystemClock};
use baton_core::runs::{CreateRun, Recorder, Runs};
use baton_core::tools::{NewTool, Tools};
use baton_core::{AgentId, Principal, Role, RunId, TenantId, ToolId};
use baton_engine::{Engine, EngineOptions, EnginePorts};
use baton_store::SqliteStore;
use baton_testkit::chat::ChatServer;
use std::sync::Arc;
use std::time::Duration;

/// The engine's ports on one store and bus; no tenant has secrets.
/// One keyring for every engine of the tests, as replicas of one deployment share theirs.
pub static KEYRING: std::sync::LazyLock<Arc<baton_core::crypto::Keyring>> =
    std::sync::LazyLock::new(|| Arc::new(baton_core::crypto::Keyring::ephemeral()));

pub fn ports(store: &SqliteStore, recorder: &Recorder) -> EnginePorts {
    EnginePorts {
        runs: Arc::new(store.clone()),
        recorder: recorder.clone(),
        leases: Arc::new(store.clone()),
        agents: Arc::new(store.clone()),
        tools: Arc::new(store.clone()),
        mcp_servers: Arc::new(store.clone()),
        secrets: Arc::new(TestSecrets),
        checkpoints: Arc::new(store.clone()),
        keyring: KEYRING.clone(),
        clock: Arc::new(SystemClock),
        // The embedded tier's policy: the tests' tool servers listen on loopback.
        egress: baton_egress::Egress::new(EgressPolicy::local()).expect("the client"),
        allowlists: Arc::new(store.clone()),
        audit: Arc::new(store.clone()),
        delegator: Default::default(),
        workspaces: Arc::new(store.clone()),
        // Tests that run commands find the sandbox themselves (`workspace.rs`).
        code: baton_engine::CodeTools::unavailable(
            "not in this test",
            baton_core::workspace::WorkspaceLimits::default(),
        ),
        environments: baton_core::environments::Environments {
            store: Arc::new(store.clone()),
            bases: Default::default(),
            clock: Arc::new(SystemClock),
        },
        api_keys: Arc::new(store.clone()),
        users: Arc::new(store.clone()),
    }
}

/// The one secret every tenant of the tests has: [`TEST_SECRET`] under
/// [`TEST_SECRET_NAME`]; any other name is missing.
struct TestSecrets;

pub const TEST_SECRET_NAME: &str = "tool_token";
pub const TEST_SECRET: &str = "tok-9Vq3Lx7Rm2Wn8Kp4Zs6Tj1Yc5Hb0";

#[async_trait::async_trait]
impl baton_core::ports::SecretReader for TestSecrets {
    async fn reveal(
        &self,
        _: TenantId,
        name: &str,
    ) -> Result<Option<String>, baton_core::StoreError> {
        Ok((name == TEST_SECRET_NAME).then(|| TEST_SECRET.to_string()))
    }
}

pub struct World {
    pub store: SqliteStore,
    pub runs: Runs,
    pub engine: Engine,
    pub owner: Principal,
}

/// A wake-up sink for use cases whose runs no engine should see yet.
struct Nobody;
impl RunDriver for Nobody {
    fn wake(&self, _: TenantId, _: RunId) {}
}

pub async fn world() -> World {
    world_with(EngineOptions {
        // Adoption only when a test calls run_once, so tests decide when it happens.
        adopt_every: Duration::from_secs(3600),
        ..EngineOptions::new("test")
    })
    .await
}

pub async fn world_with(opts: EngineOptions) -> World {
    world_from(opts, |_, _| {}).await
}

/// A world whose engine runs commands with `code`.
pub async fn world_with_code(code: baton_engine::CodeTools) -> World {
    world_with_ports(|ports, _| ports.code = code).await
}

/// A world whose engine's ports `adjust` changes (given the world's store).
pub async fn world_with_ports(adjust: impl FnOnce(&mut EnginePorts, &SqliteStore)) -> World {
    let opts = EngineOptions {
        adopt_every: Duration::from_secs(3600),
        ..EngineOptions::new("test")
    };
    world_from(opts, adjust).await
}

async fn world_from(
    opts: EngineOptions,
    adjust: impl FnOnce(&mut EnginePorts, &SqliteStore),
) -> World {
    let store = SqliteStore::in_memory().await.expect("store");
    let tenant = baton_core::model::Tenant {
        id: TenantId::new(),
        name: "t".into(),
        created_at: SystemClock.now(),
    };
    baton_core::ports::TenantStore::create_tenant(&store, &tenant)
        .await
        .expect("tenant");
    let recorder = Recorder {
        log: Arc::new(store.clone()),
        bus: Arc::new(InProcessBus::new(64)),
    };
    let agents: Arc<dyn AgentStore> = Arc::new(store.clone());
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let mut ports = ports(&store, &recorder);
    adjust(&mut ports, &store);
    let engine = Engine::new(ports, opts);
    engine.start().await.expect("engine starts");
    let runs = Runs {
        reader: Arc::new(store.clone()),
        recorder,
        replica: "test".into(),
        agents,
        tools: Arc::new(store.clone()),
        driver: Arc::new(engine.clone()),
        clock,
    };
    World {
        store,
        runs,
        engine,
        owner: Principal {
            tenant: tenant.id,
            role: Role::Owner,
            // The embedded tier's local owner: its turns may execute in every environment.
            actor: "local".into(),
            source: None,
        },
    }
}

impl World {
    pub fn agents(&self) -> Agents {
        Agents {
            store: Arc::new(self.store.clone()),
            tools: Arc::new(self.store.clone()),
            clock: Arc::new(SystemClock),
            egress: self.egress(),
        }
    }

    /// The embedded tier's egress policy, narrowed by the tenant's allowlist if it sets one.
    pub fn egress(&self) -> EgressAllowlists {
        EgressAllowlists {
            store: Arc::new(self.store.clone()),
            policy: Arc::new(EgressPolicy::local()),
            clock: Arc::new(SystemClock),
        }
    }

    /// Defines a tool of the world's tenant.
    pub async fn tool(&self, new: NewTool) -> ToolId {
        let tools = Tools {
            store: Arc::new(self.store.clone()),
            agents: Arc::new(self.store.clone()),
            clock: Arc::new(SystemClock),
            egress: self.egress(),
            environments: baton_core::environments::Environments {
                store: Arc::new(self.store.clone()),
                bases: Default::default(),
                clock: Arc::new(SystemClock),
            },
        };
        tools.create(&self.owner, new).await.expect("tool").id
    }

    /// An agent with a script of replies (which may call tools), its tools and limits.
    pub async fn scripted_agent(
        &self,
        replies: Vec<ScriptedReply>,
        tools: Vec<ToolId>,
        limits: AgentLimits,
    ) -> AgentId {
        let new = NewAgent {
            name: "a".into(),
            instructions: "Be brief.".into(),
            provider: ProviderSpec::Scripted { replies },
            tools,
            limits,
        };
        self.agents()
            .create(&self.owner, new)
            .await
            .expect("agent")
            .id
    }

    pub async fn agent(&self, replies: &[(&str, u64, bool)]) -> AgentId {
        let agents = self.agents();
        let replies = replies
            .iter()
            .map(|(c, d, end)| ScriptedReply {
                content: (*c).into(),
                delay_ms: *d,
                complete_run: *end,
                tool_calls: Vec::new(),
            })
            .collect();
        let new = NewAgent {
            name: "a".into(),
            instructions: String::new(),
            provider: ProviderSpec::Scripted { replies },
            tools: Vec::new(),
            limits: Default::default(),
        };
        agents.create(&self.owner, new).await.expect("agent").id
    }

    /// An agent of the OpenAI-compatible server `chat` (no retries), streaming or not.
    pub async fn openai_agent(&self, chat: &ChatServer, stream: bool) -> AgentId {
        self.openai_agent_with(chat, stream, vec![]).await
    }

    /// [`Self::openai_agent`] with `tools`.
    pub async fn openai_agent_with(
        &self,
        chat: &ChatServer,
        stream: bool,
        tools: Vec<ToolId>,
    ) -> AgentId {
        let new = NewAgent {
            name: "a".into(),
            instructions: String::new(),
            provider: ProviderSpec::Openai(OpenAiSpec {
                base_url: chat.base_url(),
                model: "m".into(),
                api_key_secret: None,
                request_timeout_ms: 5_000,
                max_retries: 0,
                retry_budget_ms: 5_000,
                stream,
                temperature: None,
            }),
            tools,
            limits: AgentLimits::default(),
        };
        self.agents()
            .create(&self.owner, new)
            .await
            .expect("agent")
            .id
    }

    /// Runs use cases whose wake-ups go nowhere, as if the process died after commit.
    pub fn unwoken(&self) -> Runs {
        Runs {
            driver: Arc::new(Nobody),
            ..self.runs.clone()
        }
    }

    pub async fn start(&self, runs: &Runs, agent: AgentId, message: &str) -> RunId {
        let cmd = CreateRun {
            agent_id: agent,
            title: None,
            metadata: Default::default(),
            message: Some(message.into()),
            request_id: None,
        };
        runs.create_run(&self.owner, cmd).await.expect("run").run.id
    }

    pub async fn get(&self, run: RunId) -> RunSummary {
        self.runs.get_run(&self.owner, run).await.expect("get run")
    }

    /// Waits until the run is in `status`.
    pub async fn wait_status(&self, run: RunId, status: RunStatus) -> RunSummary {
        self.wait_for(run, status.as_str(), |r| r.status == status)
            .await
    }

    pub async fn wait_for(
        &self,
        run: RunId,
        what: &str,
        done: impl Fn(&RunSummary) -> bool,
    ) -> RunSummary {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let r = self.get(run).await;
            if done(&r) {
                return r;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "run never {what}: {r:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// A second replica on the same database and bus, started, and the run use cases of
    /// a replica that takes commands there.
    pub async fn other_replica(&self, name: &str) -> (Engine, Runs) {
        let other = Engine::new(
            ports(&self.store, &self.runs.recorder),
            EngineOptions::new(name),
        );
        other.start().await.expect("start");
        let via_other = Runs {
            driver: Arc::new(other.clone()),
            ..self.runs.clone()
        };
        (other, via_other)
    }

    /// A run this engine parked: its agent's provider is one this build cannot read,
    /// as if a newer replica had saved it.
    pub async fn parked_run(&self) -> RunId {
        let agent = self.agent(&[("never", 0, false)]).await;
        let run = self.start(&self.unwoken(), agent, "hi").await;
        sqlx::query("UPDATE agent_versions SET provider = ? WHERE agent_id = ?")
            .bind(r#"{"kind":"from_the_future"}"#)
            .bind(agent.as_uuid())
            .execute(self.store.pool())
            .await
            .expect("corrupt the agent");
        assert_eq!(self.engine.run_once().await.expect("sweep"), 1);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while self.engine.active_runs() > 0 || self.get(run).await.status != RunStatus::Running {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the driver never gave up"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        run
    }

    /// The run's event types once the checkpoint of its last settled turn is in (it is
    /// appended just after the turn settles).
    pub async fn settled_types(&self, run: RunId) -> Vec<String> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let types = self.types(run).await;
            if types.last().map(String::as_str) == Some("checkpoint.saved") {
                return types;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no checkpoint after the turn: {types:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Every event of the run, in order.
    pub async fn events(&self, run: RunId) -> Vec<baton_events::Envelope> {
        self.store
            .read_stream(self.owner.tenant, run, 0, 500)
            .await
            .expect("read")
    }

    pub async fn types(&self, run: RunId) -> Vec<String> {
        self.events(run)
            .await
            .into_iter()
            .map(|e| e.event_type)
            .collect()
    }
}
