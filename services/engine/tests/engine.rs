//! The turn loop against a real (SQLite) store and the in-process bus.

use baton_bus::InProcessBus;
use baton_core::agents::{Agents, NewAgent};
use baton_core::model::{ProviderSpec, RunStatus, RunSummary, ScriptedReply};
use baton_core::ports::{AgentStore, Clock, RunDriver, RunStore, SystemClock};
use baton_core::runs::{CreateRun, EventLog, PostMessage, Runs};
use baton_core::{AgentId, Principal, Role, RunId, TenantId};
use baton_engine::{Engine, EngineOptions};
use baton_store::SqliteStore;
use std::sync::Arc;
use std::time::Duration;

struct World {
    store: SqliteStore,
    runs: Runs,
    engine: Engine,
    owner: Principal,
}

/// A wake-up sink for use cases whose runs no engine should see yet.
struct Nobody;
impl RunDriver for Nobody {
    fn wake(&self, _: TenantId, _: RunId) {}
}

async fn world() -> World {
    world_with(EngineOptions {
        // Adoption only when a test calls run_once, so tests decide when it happens.
        adopt_every: Duration::from_secs(3600),
        ..EngineOptions::new("test")
    })
    .await
}

async fn world_with(opts: EngineOptions) -> World {
    let store = SqliteStore::in_memory().await.expect("store");
    let tenant = baton_core::model::Tenant {
        id: TenantId::new(),
        name: "t".into(),
        created_at: SystemClock.now(),
    };
    baton_core::ports::TenantStore::create_tenant(&store, &tenant)
        .await
        .expect("tenant");
    let log = EventLog {
        store: Arc::new(store.clone()),
        bus: Arc::new(InProcessBus::new(64)),
    };
    let agents: Arc<dyn AgentStore> = Arc::new(store.clone());
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let engine = Engine::new(
        log.clone(),
        Arc::new(store.clone()),
        agents.clone(),
        clock.clone(),
        opts,
    );
    engine.start().await.expect("engine starts");
    let runs = Runs {
        log,
        replica: "test".into(),
        agents,
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
            actor: "test".into(),
        },
    }
}

impl World {
    async fn agent(&self, replies: &[(&str, u64, bool)]) -> AgentId {
        let agents = Agents {
            store: Arc::new(self.store.clone()),
            clock: Arc::new(SystemClock),
        };
        let replies = replies
            .iter()
            .map(|(c, d, end)| ScriptedReply {
                content: (*c).into(),
                delay_ms: *d,
                complete_run: *end,
            })
            .collect();
        let new = NewAgent {
            name: "a".into(),
            instructions: String::new(),
            provider: ProviderSpec::Scripted { replies },
        };
        agents.create(&self.owner, new).await.expect("agent").id
    }

    /// Runs use cases whose wake-ups go nowhere, as if the process died after commit.
    fn unwoken(&self) -> Runs {
        Runs {
            driver: Arc::new(Nobody),
            ..self.runs.clone()
        }
    }

    async fn start(&self, runs: &Runs, agent: AgentId, message: &str) -> RunId {
        let cmd = CreateRun {
            agent_id: agent,
            title: None,
            message: Some(message.into()),
            request_id: None,
        };
        runs.create_run(&self.owner, cmd).await.expect("run").run.id
    }

    async fn get(&self, run: RunId) -> RunSummary {
        self.runs.get_run(&self.owner, run).await.expect("get run")
    }

    async fn wait_for(
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
    async fn other_replica(&self, name: &str) -> (Engine, Runs) {
        let other = Engine::new(
            self.runs.log.clone(),
            Arc::new(self.store.clone()),
            Arc::new(self.store.clone()),
            Arc::new(SystemClock),
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
    async fn parked_run(&self) -> RunId {
        let agent = self.agent(&[("never", 0, false)]).await;
        let run = self.start(&self.unwoken(), agent, "hi").await;
        sqlx::query("UPDATE agents SET provider = ? WHERE id = ?")
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

    /// Every event of the run, in order.
    async fn events(&self, run: RunId) -> Vec<baton_events::Envelope> {
        self.store
            .read_stream(self.owner.tenant, run, 0, 500)
            .await
            .expect("read")
    }

    async fn types(&self, run: RunId) -> Vec<String> {
        self.events(run)
            .await
            .into_iter()
            .map(|e| e.event_type)
            .collect()
    }
}

#[tokio::test]
async fn a_turn_records_the_answer_and_settles_the_run_in_one_append() {
    let w = world().await;
    let agent = w.agent(&[("hello", 0, false)]).await;
    let run = w.start(&w.runs, agent, "hi").await;
    let done = w
        .wait_for(run, "waiting", |r| r.status == RunStatus::Waiting)
        .await;
    assert_eq!(done.message_count, 2);
    let events = w.events(run).await;
    let types: Vec<_> = events.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(
        types,
        [
            "run.created",
            "message.appended",
            "turn.requested",
            "lease.acquired",
            "turn.started",
            "message.appended",
            "turn.completed"
        ]
    );
    assert_eq!(events[3].data["owner"], "test");
    assert_eq!(events[3].data["reason"], "new");
    assert_eq!(
        events[3].recorded_at, events[4].recorded_at,
        "announced with the first step"
    );
    let (answer, settled) = (&events[5], &events[6]);
    assert_eq!(answer.data["role"], "assistant");
    assert_eq!(answer.data["content"], "hello");
    assert_eq!(answer.recorded_at, settled.recorded_at, "one append");
    assert_eq!(answer.meta.actor.as_deref(), Some("engine"));
    assert_eq!(answer.meta.replica.as_deref(), Some("test"));
}

#[tokio::test]
async fn a_turn_past_the_end_of_the_script_fails_and_frees_the_run() {
    let w = world().await;
    let agent = w.agent(&[("only", 0, false)]).await;
    let run = w.start(&w.runs, agent, "one").await;
    w.wait_for(run, "waiting", |r| r.status == RunStatus::Waiting)
        .await;
    let cmd = PostMessage {
        content: "two".into(),
        request_id: None,
    };
    w.runs.post_message(&w.owner, run, cmd).await.expect("post");
    let r = w
        .wait_for(run, "failed its turn", |r| r.last_error.is_some())
        .await;
    assert_eq!(r.status, RunStatus::Waiting);
    assert_eq!(
        r.last_error.map(|e| e.code).as_deref(),
        Some("script_exhausted")
    );
    assert_eq!(
        w.types(run).await.last().map(String::as_str),
        Some("turn.failed")
    );
}

#[tokio::test]
async fn a_cancel_during_the_models_wait_ends_the_run_without_an_answer() {
    let w = world().await;
    let agent = w.agent(&[("too late", 30_000, false)]).await;
    let run = w.start(&w.runs, agent, "go").await;
    w.wait_for(run, "running", |r| r.status == RunStatus::Running)
        .await;
    let started = tokio::time::Instant::now();
    w.runs
        .cancel_run(&w.owner, run, Some("stop".into()))
        .await
        .expect("cancel");
    let r = w
        .wait_for(run, "cancelled", |r| r.status == RunStatus::Cancelled)
        .await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the wait was interrupted"
    );
    assert_eq!(r.message_count, 1, "no assistant message");
    let types = w.types(run).await;
    assert_eq!(
        types[types.len() - 2..],
        ["run.cancel_requested", "run.cancelled"]
    );
}

#[tokio::test]
async fn a_run_whose_wake_up_was_lost_is_driven_by_the_next_sweep() {
    let w = world().await;
    let agent = w.agent(&[("found you", 0, false)]).await;
    let run = w.start(&w.unwoken(), agent, "anyone?").await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        w.get(run).await.status,
        RunStatus::Queued,
        "nobody drove it"
    );
    assert_eq!(w.engine.run_once().await.expect("sweep"), 1);
    let r = w
        .wait_for(run, "answered", |r| r.status == RunStatus::Waiting)
        .await;
    assert_eq!(r.message_count, 2);
    assert_eq!(w.engine.run_once().await.expect("sweep"), 0, "nothing left");
}

#[tokio::test]
async fn a_turn_interrupted_by_shutdown_writes_nothing_and_is_taken_again_after_restart() {
    let w = world().await;
    let agent = w.agent(&[("after restart", 300, false)]).await;
    let run = w.start(&w.runs, agent, "go").await;
    w.wait_for(run, "running", |r| r.status == RunStatus::Running)
        .await;
    w.engine.shutdown().await;
    assert_eq!(
        w.engine.active_runs(),
        0,
        "shutdown leaves no driver behind"
    );
    let stopped = w.get(run).await;
    assert_eq!(
        stopped.status,
        RunStatus::Running,
        "left for the next engine"
    );
    assert_eq!(stopped.message_count, 1);

    // A new engine on the same database, as after a restart.
    let restarted = Engine::new(
        w.runs.log.clone(),
        Arc::new(w.store.clone()),
        Arc::new(w.store.clone()),
        Arc::new(SystemClock),
        EngineOptions::new("test-2"),
    );
    assert_eq!(restarted.run_once().await.expect("sweep"), 1);
    let r = w
        .wait_for(run, "answered", |r| r.status == RunStatus::Waiting)
        .await;
    assert_eq!(r.message_count, 2);
    let types = w.types(run).await;
    assert_eq!(
        types.iter().filter(|t| *t == "turn.started").count(),
        1,
        "the turn is resumed, not started twice: {types:?}"
    );
    let leases: Vec<_> = w
        .events(run)
        .await
        .into_iter()
        .filter(|e| e.event_type.starts_with("lease."))
        .map(|e| {
            (
                e.event_type,
                e.data["owner"].clone(),
                e.data["reason"].clone(),
            )
        })
        .collect();
    assert_eq!(
        leases,
        [
            ("lease.acquired".to_string(), "test".into(), "new".into()),
            (
                "lease.released".to_string(),
                "test".into(),
                "drained".into()
            ),
            (
                "lease.acquired".to_string(),
                "test-2".into(),
                "handoff".into()
            ),
        ],
        "handed off at shutdown, taken at once by the next engine"
    );
    restarted.shutdown().await;
}

#[tokio::test]
async fn a_run_whose_agent_this_build_cannot_read_is_parked_until_a_client_acts() {
    let w = world().await;
    let run = w.parked_run().await;
    assert_eq!(
        w.engine.run_once().await.expect("sweep"),
        0,
        "the sweep leaves it parked"
    );
    // A client command wakes it again; a cancel needs no agent.
    w.runs
        .cancel_run(&w.owner, run, None)
        .await
        .expect("cancel");
    w.wait_for(run, "cancelled", |r| r.status == RunStatus::Cancelled)
        .await;
}

#[tokio::test]
async fn a_command_taken_by_another_replica_reaches_the_owner_at_once() {
    let w = world().await;
    let agent = w.agent(&[("too late", 30_000, false)]).await;
    let run = w.start(&w.runs, agent, "go").await;
    w.wait_for(run, "running", |r| r.status == RunStatus::Running)
        .await;
    // A second replica on the same database and bus takes the cancel.
    let (other, via_other) = w.other_replica("other").await;
    let started = tokio::time::Instant::now();
    via_other
        .cancel_run(&w.owner, run, None)
        .await
        .expect("cancel");
    w.wait_for(run, "cancelled", |r| r.status == RunStatus::Cancelled)
        .await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the owner was woken over the bus, not after its 30 s wait"
    );
    let writers: Vec<_> = w
        .events(run)
        .await
        .into_iter()
        .filter(|e| e.meta.actor.as_deref() == Some("engine"))
        .map(|e| e.meta.replica.unwrap_or_default())
        .collect();
    assert!(
        writers.iter().all(|r| r == "test"),
        "only the owner wrote: {writers:?}"
    );
    other.shutdown().await;
}

#[tokio::test]
async fn a_lease_this_replica_holds_without_a_driver_is_released_and_driven() {
    let w = world_with(EngineOptions {
        lease_ttl: Duration::from_secs(30),
        renew_every: Duration::from_millis(100),
        adopt_every: Duration::from_secs(3600),
        ..EngineOptions::new("test")
    })
    .await;
    let agent = w.agent(&[("found", 0, false)]).await;
    let run = w.start(&w.unwoken(), agent, "hi").await;
    // The replica's lease on the run with no driver behind it: what a driver that
    // stopped on a fenced append used to leave behind, renewed forever.
    let claimed = baton_core::ports::LeaseStore::claim_runs(
        &w.store,
        "test",
        Duration::from_secs(30),
        SystemClock.now(),
        10,
        Some((w.owner.tenant, run)),
    )
    .await
    .expect("claim");
    assert_eq!(claimed.len(), 1);
    let r = w
        .wait_for(run, "answered by a fresh driver", |r| {
            r.status == RunStatus::Waiting
        })
        .await;
    assert_eq!(r.message_count, 2);
}

#[tokio::test]
async fn a_run_parked_here_is_freed_by_a_command_taken_on_another_replica() {
    let w = world().await;
    let run = w.parked_run().await;
    let (other, via_other) = w.other_replica("other").await;
    via_other
        .cancel_run(&w.owner, run, None)
        .await
        .expect("cancel");
    w.wait_for(run, "cancelled", |r| r.status == RunStatus::Cancelled)
        .await;
    other.shutdown().await;
}
