//! `runs::follow_live`: the SSE algorithm with the run's ephemeral deltas interleaved,
//! against a real store and the in-process bus.

use baton_bus::InProcessBus;
use baton_core::model::Tenant;
use baton_core::ports::{
    AppendRequest, Clock, ControlMessage, EventBus, RunDriver, Subscription, SystemClock,
    TenantStore,
};
use baton_core::runs::{Live, Recorder, Runs, follow, follow_live};
use baton_core::{Principal, Role, RunId, StoreError, TenantId};
use baton_events::{
    AgentId, Envelope, EventId, EventMeta, MessageDelta, MessageId, NewEvent, RunCreated, RunEvent,
    TurnStarted,
};
use baton_store::SqliteStore;
use futures::{Stream, StreamExt};
use std::sync::Arc;
use std::time::Duration;

struct Nobody;
impl RunDriver for Nobody {
    fn wake(&self, _: TenantId, _: RunId) {}
}

/// A bus that loses every published event but delivers deltas.
struct LosesEvents(Arc<InProcessBus>);

#[async_trait::async_trait]
impl EventBus for LosesEvents {
    async fn publish(&self, _: &[Envelope]) {}
    async fn subscribe(&self, tenant: TenantId, run: RunId) -> Result<Subscription, StoreError> {
        self.0.subscribe(tenant, run).await
    }
    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }
    fn publish_delta(&self, tenant: TenantId, run: RunId, delta: MessageDelta) {
        self.0.publish_delta(tenant, run, delta);
    }
    async fn publish_control(&self, msg: &ControlMessage) {
        self.0.publish_control(msg).await;
    }
    async fn subscribe_control(
        &self,
    ) -> Result<tokio::sync::mpsc::Receiver<ControlMessage>, StoreError> {
        self.0.subscribe_control().await
    }
}

struct World {
    runs: Runs,
    bus: Arc<InProcessBus>,
    owner: Principal,
    run: RunId,
}

/// A run (at version 1) whose log publishes on the in-process bus, or loses every
/// event publish when `lossy`.
async fn world(lossy: bool) -> World {
    let store = SqliteStore::in_memory().await.expect("store");
    let tenant = Tenant {
        id: TenantId::new(),
        name: "t".into(),
        created_at: SystemClock.now(),
    };
    store.create_tenant(&tenant).await.expect("tenant");
    let bus = Arc::new(InProcessBus::new(64));
    let owner = Principal {
        tenant: tenant.id,
        role: Role::Owner,
        actor: "t".into(),
        source: None,
    };
    let runs = Runs {
        reader: Arc::new(store.clone()),
        recorder: Recorder {
            log: Arc::new(store.clone()),
            bus: if lossy {
                Arc::new(LosesEvents(bus.clone()))
            } else {
                bus.clone()
            },
        },
        replica: "test".into(),
        agents: Arc::new(store.clone()),
        tools: Arc::new(store),
        driver: Arc::new(Nobody),
        clock: Arc::new(SystemClock),
    };
    let run = RunId::new();
    let created = RunEvent::RunCreated(RunCreated {
        agent_id: AgentId::new(),
        agent_version: 1,
        title: None,
        metadata: Default::default(),
        tool_versions: Default::default(),
        parent: None,
    });
    let w = World {
        runs,
        bus,
        owner,
        run,
    };
    w.append(0, created).await;
    w
}

impl World {
    async fn append(&self, expected_version: i64, event: RunEvent) {
        let req = AppendRequest::new(
            self.run,
            expected_version,
            vec![NewEvent::new(event, EventMeta::new(self.owner.tenant))],
            SystemClock.now(),
        );
        self.runs
            .recorder
            .append(self.owner.tenant, req)
            .await
            .expect("append");
    }

    fn delta(&self, turn: i64, step: u32, content: &str) {
        self.bus.publish_delta(
            self.owner.tenant,
            self.run,
            MessageDelta {
                turn,
                step,
                attempt: 1,
                content: content.into(),
                reasoning: false,
                progress: None,
            },
        );
    }

    async fn live(&self, after: i64, resync: Duration) -> impl Stream<Item = Live> {
        follow_live(&self.runs, &self.owner, self.run, after, resync)
            .await
            .expect("follow")
            .expect("a live run")
            .map(|item| item.expect("no error"))
    }
}

/// The next item within 5 s.
async fn next<S: Stream<Item = Live> + Unpin>(s: &mut S) -> Live {
    tokio::time::timeout(Duration::from_secs(5), s.next())
        .await
        .expect("in time")
        .expect("the stream goes on")
}

fn version(item: &Live) -> Option<i64> {
    match item {
        Live::Event(e) => Some(e.version),
        Live::Delta(_) => None,
    }
}

fn content(item: &Live) -> Option<&str> {
    match item {
        Live::Delta(d) => Some(&d.content),
        Live::Event(_) => None,
    }
}

#[tokio::test]
async fn live_deltas_come_between_events_and_are_never_replayed() {
    let w = world(false).await;
    w.delta(1, 1, "before anyone listened");
    let mut s = Box::pin(w.live(0, Duration::from_secs(60)).await);
    assert_eq!(version(&next(&mut s).await), Some(1), "the replay first");
    w.delta(1, 1, "Hel");
    w.delta(1, 1, "lo");
    assert_eq!(content(&next(&mut s).await), Some("Hel"));
    assert_eq!(content(&next(&mut s).await), Some("lo"));
    w.append(1, RunEvent::TurnStarted(TurnStarted { turn: 1 }))
        .await;
    assert_eq!(version(&next(&mut s).await), Some(2));
    drop(s);
    // A new stream replays the durable events only.
    let mut again = Box::pin(w.live(0, Duration::from_secs(60)).await);
    assert_eq!(version(&next(&mut again).await), Some(1));
    assert_eq!(version(&next(&mut again).await), Some(2));
    w.delta(1, 1, "new");
    assert_eq!(content(&next(&mut again).await), Some("new"));
}

#[tokio::test]
async fn a_delta_of_a_step_whose_reply_is_out_is_dropped() {
    let w = world(false).await;
    let mut s = Box::pin(w.live(0, Duration::from_secs(60)).await);
    assert_eq!(version(&next(&mut s).await), Some(1));
    // Live only (never stored): the follower takes the next version from the bus.
    let completed = Envelope {
        id: EventId::new(),
        stream: w.run,
        version: 2,
        position: 2,
        event_type: "model.completed".into(),
        schema: 1,
        data: serde_json::json!({"turn": 1, "step": 1, "message_id": MessageId::new(),
            "content": "Hello", "finish_reason": "stop"}),
        meta: EventMeta::new(w.owner.tenant),
        recorded_at: SystemClock.now(),
    };
    w.bus.publish(&[completed]).await;
    assert_eq!(version(&next(&mut s).await), Some(2));
    w.delta(1, 1, "late piece of step 1");
    w.delta(1, 2, "step 2");
    assert_eq!(content(&next(&mut s).await), Some("step 2"));
    w.delta(2, 1, "turn 2");
    assert_eq!(content(&next(&mut s).await), Some("turn 2"));
}

#[tokio::test]
async fn a_steady_flow_of_deltas_does_not_postpone_a_resync() {
    let w = world(true).await;
    let mut s = Box::pin(w.live(0, Duration::from_millis(100)).await);
    assert_eq!(version(&next(&mut s).await), Some(1));
    // Stored, but its publish is lost: only a re-read after silence finds it.
    w.append(1, RunEvent::TurnStarted(TurnStarted { turn: 1 }))
        .await;
    let found = async {
        let mut i = 0;
        loop {
            i += 1;
            w.delta(1, 1, &format!("token {i}"));
            let item = next(&mut s).await;
            if let Some(v) = version(&item) {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let v = tokio::time::timeout(Duration::from_secs(5), found)
        .await
        .expect("the resync happened while deltas kept coming");
    assert_eq!(v, 2);
}

#[tokio::test]
async fn follow_hands_out_events_only() {
    let w = world(false).await;
    let mut s = Box::pin(
        follow(&w.runs, &w.owner, w.run, 0, Duration::from_secs(60))
            .await
            .expect("follow")
            .expect("a live run"),
    );
    assert_eq!(s.next().await.expect("replay").expect("ok").version, 1);
    w.delta(1, 1, "ignored");
    w.append(1, RunEvent::TurnStarted(TurnStarted { turn: 1 }))
        .await;
    let e = tokio::time::timeout(Duration::from_secs(5), s.next())
        .await
        .expect("in time")
        .expect("more")
        .expect("ok");
    assert_eq!(e.version, 2);
    assert_eq!(
        w.bus.hub().deltas_dropped(),
        0,
        "a closed delta feed loses nothing"
    );
}
