//! `runs::follow` (the SSE algorithm) against a real store and the in-process bus.

use baton_bus::InProcessBus;
use baton_core::agents::{Agents, NewAgent};
use baton_core::model::{ProviderSpec, ScriptedReply, Tenant};
use baton_core::ports::{
    AppendRequest, Clock, EventBus, EventLog, RunDriver, RunReader, SystemClock, TenantStore,
};
use baton_core::runs::{CreateRun, Recorder, Runs, follow};
use baton_core::{Principal, Role, RunId, TenantId};
use baton_events::{EventMeta, NewEvent, RunEvent, TurnStarted};
use baton_store::SqliteStore;
use futures::StreamExt;
use std::sync::Arc;
use std::time::Duration;

struct Nobody;
impl RunDriver for Nobody {
    fn wake(&self, _: TenantId, _: RunId) {}
}

struct World {
    runs: Runs,
    store: SqliteStore,
    owner: Principal,
}

async fn world(buffer: usize, bus_publishes: bool) -> (World, RunId) {
    let store = SqliteStore::in_memory().await.expect("store");
    let tenant = Tenant {
        id: TenantId::new(),
        name: "t".into(),
        created_at: SystemClock.now(),
    };
    store.create_tenant(&tenant).await.expect("tenant");
    let bus: Arc<dyn EventBus> = Arc::new(InProcessBus::new(buffer));
    let recorder = Recorder {
        log: Arc::new(store.clone()),
        bus: if bus_publishes {
            bus.clone()
        } else {
            Arc::new(Silent(bus.clone()))
        },
    };
    let owner = Principal {
        tenant: tenant.id,
        role: Role::Owner,
        actor: "t".into(),
        source: None,
    };
    let agents = Agents {
        store: Arc::new(store.clone()),
        tools: Arc::new(store.clone()),
        clock: Arc::new(SystemClock),
        egress: baton_core::egress_allowlists::EgressAllowlists {
            store: Arc::new(store.clone()),
            policy: Arc::new(baton_core::egress::EgressPolicy::local()),
            clock: Arc::new(SystemClock),
        },
    };
    let agent = agents
        .create(
            &owner,
            NewAgent {
                name: "a".into(),
                instructions: String::new(),
                provider: ProviderSpec::Scripted {
                    replies: vec![ScriptedReply {
                        content: "x".into(),
                        delay_ms: 0,
                        complete_run: false,
                        tool_calls: vec![],
                    }],
                },
                tools: vec![],
                limits: Default::default(),
            },
        )
        .await
        .expect("agent");
    let runs = Runs {
        reader: Arc::new(store.clone()),
        recorder,
        replica: "test".into(),
        agents: Arc::new(store.clone()),
        tools: Arc::new(store.clone()),
        driver: Arc::new(Nobody),
        clock: Arc::new(SystemClock),
    };
    let cmd = CreateRun {
        agent_id: agent.id,
        title: None,
        metadata: Default::default(),
        message: None,
        request_id: None,
    };
    let run = runs.create_run(&owner, cmd).await.expect("run").run.id;
    (World { runs, store, owner }, run)
}

/// A bus that loses every publish (subscriptions still work): the database must cover.
struct Silent(Arc<dyn EventBus>);

#[async_trait::async_trait]
impl EventBus for Silent {
    async fn publish(&self, _: &[baton_events::Envelope]) {}
    async fn subscribe(
        &self,
        tenant: TenantId,
        run: RunId,
    ) -> Result<baton_core::ports::Subscription, baton_core::StoreError> {
        self.0.subscribe(tenant, run).await
    }
    async fn ping(&self) -> Result<(), baton_core::StoreError> {
        Ok(())
    }
    async fn publish_control(&self, msg: &baton_core::ports::ControlMessage) {
        self.0.publish_control(msg).await;
    }
    fn publish_delta(&self, tenant: TenantId, run: RunId, delta: baton_events::MessageDelta) {
        self.0.publish_delta(tenant, run, delta)
    }

    async fn subscribe_control(
        &self,
    ) -> Result<
        tokio::sync::mpsc::Receiver<baton_core::ports::ControlMessage>,
        baton_core::StoreError,
    > {
        self.0.subscribe_control().await
    }
}

impl World {
    /// Appends `n` engine-like events to the run through the event log (store + bus).
    async fn append(&self, run: RunId, n: usize) {
        for _ in 0..n {
            let v = self
                .store
                .get_run(self.owner.tenant, run)
                .await
                .expect("get")
                .expect("run")
                .version;
            let req = AppendRequest {
                run,
                expected_version: v,
                events: vec![NewEvent::new(
                    RunEvent::TurnStarted(TurnStarted { turn: v }),
                    EventMeta::new(self.owner.tenant),
                )],
                at: SystemClock.now(),
                idempotency: None,
                fence: None,
                release: None,
                blobs: Vec::new(),
                base: None,
            };
            self.runs
                .recorder
                .append(self.owner.tenant, req)
                .await
                .expect("append");
        }
    }
}

#[tokio::test]
async fn a_subscriber_that_falls_behind_its_buffer_is_closed_and_resumes_from_its_cursor() {
    let (w, run) = world(4, true).await;
    let mut stream = Box::pin(
        follow(&w.runs, &w.owner, run, 0, Duration::from_secs(60))
            .await
            .expect("follow")
            .expect("a live run"),
    );
    let first = stream.next().await.expect("replayed").expect("ok");
    assert_eq!(first.version, 1, "replay from the database comes first");
    // Caught up and live; nobody reads while 10 events go into a 4-event buffer.
    w.append(run, 10).await;
    let mut got = vec![1];
    got.extend(
        stream
            .map(|e| e.expect("event").version)
            .collect::<Vec<_>>()
            .await,
    );
    let last = *got.last().expect("some events");
    assert!(last < 11, "the stream was closed early: {got:?}");
    assert_eq!(
        got,
        (1..=last).collect::<Vec<_>>(),
        "in order, no gap before the close"
    );
    // Resuming from the cursor delivers the rest without a gap or a duplicate.
    let mut rest = Box::pin(
        follow(&w.runs, &w.owner, run, last, Duration::from_millis(50))
            .await
            .expect("resume")
            .expect("a live run"),
    );
    for v in last + 1..=11 {
        let e = tokio::time::timeout(Duration::from_secs(5), rest.next())
            .await
            .expect("in time")
            .expect("more")
            .expect("ok");
        assert_eq!(e.version, v);
    }
}

#[tokio::test]
async fn events_whose_publish_was_lost_still_arrive_from_the_database() {
    let (w, run) = world(64, false).await;
    let mut stream = Box::pin(
        follow(&w.runs, &w.owner, run, 0, Duration::from_millis(50))
            .await
            .expect("follow")
            .expect("a live run"),
    );
    let first = stream.next().await.expect("replayed").expect("ok");
    assert_eq!(first.version, 1);
    w.append(run, 3).await;
    for v in 2..=4 {
        let e = tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await
            .expect("the resync finds it")
            .expect("more")
            .expect("ok");
        assert_eq!(e.version, v);
    }
}

#[tokio::test]
async fn a_long_backlog_is_replayed_in_order_a_page_at_a_time() {
    let (w, run) = world(8, true).await;
    w.append(run, 450).await;
    let stream = follow(&w.runs, &w.owner, run, 0, Duration::from_millis(50))
        .await
        .expect("follow")
        .expect("a live run");
    let got: Vec<i64> = stream
        .take(451)
        .map(|e| e.expect("event").version)
        .collect()
        .await;
    assert_eq!(got, (1..=451).collect::<Vec<_>>());
}

#[tokio::test]
async fn following_an_ended_run_from_its_last_event_yields_nothing_to_wait_for() {
    let (w, run) = world(8, true).await;
    w.runs
        .cancel_run(&w.owner, run, None)
        .await
        .expect("cancel");
    let end = w.runs.get_run(&w.owner, run).await.expect("run").version;
    let ended = follow(&w.runs, &w.owner, run, end, Duration::from_millis(50))
        .await
        .expect("follow");
    assert!(ended.is_none(), "no stream for an ended run at its end");
    let tail = follow(&w.runs, &w.owner, run, end - 1, Duration::from_millis(50))
        .await
        .expect("follow")
        .expect("one event left");
    let got: Vec<String> = tail
        .map(|e| e.expect("event").event_type.clone())
        .collect()
        .await;
    assert_eq!(got, ["run.cancelled"], "the last event, then the end");
}

/// The first page of a replay is read with the run when the stream opens; a later page
/// that finds the run deleted (its `run.deleted` lost) ends the stream with one
/// `run.deleted` right after what was sent, even though the run had ended earlier.
#[tokio::test]
async fn a_replay_that_finds_its_ended_run_deleted_ends_with_one_run_deleted() {
    let (w, run) = world(8, false).await;
    w.append(run, 250).await;
    w.runs
        .cancel_run(&w.owner, run, None)
        .await
        .expect("cancel");
    let end = w.runs.get_run(&w.owner, run).await.expect("run").version;
    let mut stream = Box::pin(
        follow(&w.runs, &w.owner, run, 0, Duration::from_millis(50))
            .await
            .expect("follow")
            .expect("an ended run with events after the cursor"),
    );
    let mut got = Vec::new();
    for _ in 0..200 {
        got.push(
            stream
                .next()
                .await
                .expect("an event")
                .expect("event")
                .version,
        );
    }
    assert_eq!(got, (1..=200).collect::<Vec<_>>(), "the first page");
    let audit = baton_core::model::AuditEntry::operator(
        SystemClock.now(),
        baton_core::model::AuditAction::RunDeleted,
        run.to_string(),
        serde_json::json!({}),
    );
    w.store
        .delete_run(w.owner.tenant, run, end, &audit)
        .await
        .expect("delete");
    let rest: Vec<(i64, String)> = tokio::time::timeout(
        Duration::from_secs(10),
        stream
            .map(|e| {
                let e = e.expect("event");
                (e.version, e.event_type.clone())
            })
            .collect(),
    )
    .await
    .expect("the stream ends");
    assert_eq!(rest, [(201, "run.deleted".to_string())]);
}
