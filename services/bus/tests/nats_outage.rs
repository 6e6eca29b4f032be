//! A NATS outage never stops Baton's write path: publishing returns at once, events that
//! do not fit the queue are dropped and counted, `ping` tells the truth, and once the
//! server is back the bus delivers again. Each test runs its own `nats-server`.

mod common;

use baton_bus::{NatsBus, NatsOptions};
use baton_core::ports::EventBus;
use baton_events::{RunId, TenantId};
use baton_testkit::TestNats;
use common::{event, recv};
use std::time::Duration;
use tokio::time::{Instant, sleep, timeout};

/// Polls `ping` until it says `up`, failing the test after `within`.
async fn wait_for_ping(bus: &NatsBus, up: bool, within: Duration) {
    let deadline = Instant::now() + within;
    while bus.ping().await.is_ok() != up {
        assert!(
            Instant::now() < deadline,
            "ping still says {} after {within:?}",
            if up { "down" } else { "up" }
        );
        sleep(Duration::from_millis(20)).await;
    }
}

async fn small_queue_bus(nats: &TestNats) -> NatsBus {
    let options = NatsOptions {
        subscriber_buffer: 64,
        publish_queue: 16,
        ..NatsOptions::default()
    };
    NatsBus::connect_with(&nats.url(), options)
        .await
        .expect("connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishing_while_nats_is_down_returns_at_once_and_counts_dropped_events() {
    let mut nats = TestNats::start().await.expect("nats-server");
    let bus = small_queue_bus(&nats).await;
    let (tenant, run) = (TenantId::new(), RunId::new());
    let mut sub = bus.subscribe(tenant, run).await.expect("subscribe");
    bus.publish(&[event(tenant, run, 1)]).await;
    assert_eq!(recv(&mut sub).await.map(|e| e.version), Some(1));
    assert_eq!(bus.publish_dropped(), 0);

    nats.stop();
    wait_for_ping(&bus, false, Duration::from_secs(5)).await;
    let started = Instant::now();
    let publishing = async {
        for v in 2..=5001 {
            bus.publish(&[event(tenant, run, v)]).await;
        }
    };
    timeout(Duration::from_secs(5), publishing)
        .await
        .expect("publishing during an outage must never wait on NATS");
    let elapsed = started.elapsed();

    assert!(
        bus.publish_dropped() > 0,
        "a 16-event queue cannot hold 5000 events"
    );
    let err = bus.ping().await.expect_err("NATS is down");
    assert!(err.to_string().contains("NATS is"), "{err}");
    eprintln!(
        "5000 publishes in {elapsed:?}, {} dropped",
        bus.publish_dropped()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_nats_returns_subscribers_receive_newly_published_events_again() {
    let mut nats = TestNats::start().await.expect("nats-server");
    let bus = small_queue_bus(&nats).await;
    let tenant = TenantId::new();
    let (lost, fresh) = (RunId::new(), RunId::new());
    let mut sub = bus.subscribe(tenant, fresh).await.expect("subscribe");

    nats.stop();
    wait_for_ping(&bus, false, Duration::from_secs(5)).await;
    for v in 1..=3000 {
        bus.publish(&[event(tenant, lost, v)]).await;
    }
    assert!(bus.publish_dropped() > 0);

    nats.restart().await.expect("restart on the same port");
    wait_for_ping(&bus, true, Duration::from_secs(30)).await;
    // The backlog of the outage drains first; keep publishing until one gets through.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut version = 0;
    let got = loop {
        version += 1;
        bus.publish(&[event(tenant, fresh, version)]).await;
        if let Ok(Some(e)) = timeout(Duration::from_millis(200), sub.events.recv()).await {
            break e;
        }
        assert!(
            Instant::now() < deadline,
            "no event after NATS came back:\n{}",
            nats.log()
        );
    };
    assert_eq!(got.stream, fresh);
    assert!(got.version <= version);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deltas_never_wait_on_an_outage_and_flow_again_after_it() {
    let mut nats = TestNats::start().await.expect("nats-server");
    let bus = small_queue_bus(&nats).await;
    let (tenant, run) = (TenantId::new(), RunId::new());
    let delta = |i: u32| baton_events::MessageDelta {
        turn: 1,
        step: 1,
        attempt: 1,
        content: format!("token {i}"),
        reasoning: false,
        progress: None,
    };

    nats.stop();
    wait_for_ping(&bus, false, Duration::from_secs(5)).await;
    let mut sub = timeout(Duration::from_secs(1), bus.subscribe(tenant, run))
        .await
        .expect("subscribing during an outage must not wait on NATS")
        .expect("subscribe");
    let publishing = async {
        for i in 0..5000 {
            bus.publish_delta(tenant, run, delta(i));
            tokio::task::yield_now().await;
        }
    };
    timeout(Duration::from_secs(5), publishing)
        .await
        .expect("publishing deltas during an outage must never wait on NATS");
    assert!(
        bus.deltas_dropped() > 0,
        "the queue cannot hold 5000 deltas"
    );
    assert_eq!(bus.publish_dropped(), 0, "deltas are counted apart");

    nats.restart().await.expect("restart on the same port");
    wait_for_ping(&bus, true, Duration::from_secs(30)).await;
    // The run's delta subscription comes back with the connection.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut i = 5000;
    loop {
        i += 1;
        bus.publish_delta(tenant, run, delta(i));
        if let Ok(Some(_)) = timeout(Duration::from_millis(200), sub.deltas.recv()).await {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no delta after NATS came back:\n{}",
            nats.log()
        );
    }
}
