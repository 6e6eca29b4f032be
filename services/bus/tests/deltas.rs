//! Ephemeral deltas, run against the in-process bus and a real NATS server (two
//! connections, as two replicas): they reach the live subscribers of their run and no
//! one else, and however many of them pile up they never close a durable feed.

mod common;

use baton_bus::{Hub, InProcessBus, NatsBus, NatsOptions};
use baton_core::ports::{EventBus, Subscription};
use baton_events::{MessageDelta, RunId, TenantId};
use common::{event, recv};
use std::time::Duration;

fn nats_url() -> String {
    std::env::var("BATON_TEST_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into())
}

fn delta(content: &str) -> MessageDelta {
    MessageDelta {
        turn: 1,
        step: 1,
        attempt: 1,
        content: content.into(),
        reasoning: false,
        progress: None,
    }
}

/// The next delta, or `None` when the feed ends or nothing comes within 15 s.
async fn recv_delta(sub: &mut Subscription) -> Option<MessageDelta> {
    tokio::time::timeout(Duration::from_secs(15), sub.deltas.recv())
        .await
        .ok()
        .flatten()
}

async fn deltas_reach_only_their_runs_subscribers(writer: &dyn EventBus, reader: &dyn EventBus) {
    let tenant = TenantId::new();
    let (run, other) = (RunId::new(), RunId::new());
    let foreign_tenant = TenantId::new();
    let mut subs = Vec::new();
    for _ in 0..2 {
        subs.push(reader.subscribe(tenant, run).await.expect("subscribe"));
    }
    let mut other_sub = reader.subscribe(tenant, other).await.expect("subscribe");
    let mut foreign = reader
        .subscribe(foreign_tenant, run)
        .await
        .expect("subscribe");

    for i in 1..=5 {
        writer.publish_delta(tenant, run, delta(&format!("piece {i}")));
    }
    for sub in &mut subs {
        for i in 1..=5 {
            let got = recv_delta(sub).await.expect("delta delivered");
            assert_eq!(got, delta(&format!("piece {i}")), "in order");
        }
    }
    // What reaches the other run's and the other tenant's subscribers first is their
    // own delta, published after ours: nothing of `run` got there.
    writer.publish_delta(tenant, other, delta("other run"));
    writer.publish_delta(foreign_tenant, run, delta("other tenant"));
    assert_eq!(
        recv_delta(&mut other_sub).await.map(|d| d.content),
        Some("other run".into())
    );
    assert_eq!(
        recv_delta(&mut foreign).await.map(|d| d.content),
        Some("other tenant".into())
    );
    for sub in subs.iter_mut().chain([&mut other_sub, &mut foreign]) {
        assert!(sub.deltas.try_recv().is_err(), "nothing else arrived");
        assert!(sub.events.try_recv().is_err(), "deltas are not events");
    }
}

async fn a_flood_of_deltas_never_closes_a_durable_feed(
    writer: &dyn EventBus,
    reader: &dyn EventBus,
    hub: &Hub,
) {
    let (tenant, run) = (TenantId::new(), RunId::new());
    let mut sub = reader.subscribe(tenant, run).await.expect("subscribe");
    let dropped_before = hub.deltas_dropped();
    // Far more than a subscriber's delta buffer, and nobody reads them.
    for i in 0..5000 {
        writer.publish_delta(tenant, run, delta(&format!("token {i}")));
        if i % 500 == 0 {
            // Let a NATS writer's publisher drain its queue now and then.
            tokio::task::yield_now().await;
        }
    }
    // Some deltas got to the hub and found the buffer full.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while hub.deltas_dropped() == dropped_before {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the flood never filled the subscriber's delta buffer"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let events: Vec<_> = (1..=3).map(|v| event(tenant, run, v)).collect();
    writer.publish(&events).await;
    for v in 1..=3 {
        assert_eq!(
            recv(&mut sub).await.map(|e| e.version),
            Some(v),
            "the durable feed is still open after the flood"
        );
    }
    assert_eq!(hub.closed_slow(), 0, "no subscriber was closed as slow");
    // The buffered deltas are the first ones, in order; the rest were dropped.
    assert_eq!(
        sub.deltas.try_recv().map(|d| d.content),
        Ok("token 0".into())
    );
    // Drain the buffer and whatever of the flood is still on its way.
    while let Ok(Some(_)) =
        tokio::time::timeout(Duration::from_millis(300), sub.deltas.recv()).await
    {}
    // Once the subscriber has caught up, deltas flow again.
    writer.publish_delta(tenant, run, delta("after the flood"));
    assert_eq!(
        recv_delta(&mut sub).await.map(|d| d.content),
        Some("after the flood".into()),
        "deltas flow again"
    );
}

async fn two_nats_buses() -> (NatsBus, NatsBus) {
    let writer = NatsBus::connect(&nats_url(), 64).await.expect("nats");
    let reader = NatsBus::connect(&nats_url(), 64).await.expect("nats");
    (writer, reader)
}

#[tokio::test]
async fn in_process_deltas_reach_only_their_runs_subscribers() {
    let bus = InProcessBus::new(64);
    deltas_reach_only_their_runs_subscribers(&bus, &bus).await;
}

#[tokio::test]
async fn nats_deltas_reach_only_their_runs_subscribers_on_another_replica() {
    let (writer, reader) = two_nats_buses().await;
    deltas_reach_only_their_runs_subscribers(&writer, &reader).await;
}

#[tokio::test]
async fn nats_deltas_reach_subscribers_on_the_publishing_replica_too() {
    let bus = NatsBus::connect(&nats_url(), 64).await.expect("nats");
    deltas_reach_only_their_runs_subscribers(&bus, &bus).await;
}

#[tokio::test]
async fn in_process_a_flood_of_deltas_never_closes_a_durable_feed() {
    let bus = InProcessBus::new(8);
    a_flood_of_deltas_never_closes_a_durable_feed(&bus, &bus, bus.hub()).await;
    assert!(bus.hub().deltas_dropped() > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_a_flood_of_deltas_never_closes_a_durable_feed_on_another_replica() {
    let (writer, reader) = two_nats_buses().await;
    a_flood_of_deltas_never_closes_a_durable_feed(&writer, &reader, reader.hub()).await;
}

#[tokio::test]
async fn nats_takes_a_runs_deltas_only_while_it_has_subscribers_of_that_run() {
    let (writer, reader) = two_nats_buses().await;
    let tenant = TenantId::new();
    let (run, other) = (RunId::new(), RunId::new());
    assert_eq!(reader.delta_subscriptions(), 0);
    let first = reader.subscribe(tenant, run).await.expect("subscribe");
    let mut second = reader.subscribe(tenant, run).await.expect("subscribe");
    let elsewhere = reader.subscribe(tenant, other).await.expect("subscribe");
    assert_eq!(reader.delta_subscriptions(), 2, "one per run");
    drop(first);
    assert_eq!(
        reader.delta_subscriptions(),
        2,
        "the run still has a subscriber"
    );
    writer.publish_delta(tenant, run, delta("still here"));
    assert_eq!(
        recv_delta(&mut second).await.map(|d| d.content),
        Some("still here".into())
    );
    drop(elsewhere);
    assert_eq!(reader.delta_subscriptions(), 1);
    drop(second);
    assert_eq!(reader.delta_subscriptions(), 0);
    assert_eq!(reader.hub().runs_tracked(), 0);
    // A new subscriber of the run subscribes again.
    let mut again = reader.subscribe(tenant, run).await.expect("subscribe");
    writer.publish_delta(tenant, run, delta("again"));
    assert_eq!(
        recv_delta(&mut again).await.map(|d| d.content),
        Some("again".into())
    );
}

#[tokio::test]
async fn nats_deltas_may_fill_only_half_the_publish_queue() {
    let options = NatsOptions {
        publish_queue: 8,
        ..NatsOptions::default()
    };
    let bus = NatsBus::connect_with(&nats_url(), options)
        .await
        .expect("nats");
    let (tenant, run) = (TenantId::new(), RunId::new());
    // This runtime has one thread: the publisher does not run until the test awaits.
    for i in 0..10 {
        bus.publish_delta(tenant, run, delta(&format!("d{i}")));
    }
    assert_eq!(bus.deltas_dropped(), 6, "4 of 8 slots for deltas");
    for v in 1..=4 {
        bus.publish(&[event(tenant, run, v)]).await;
    }
    assert_eq!(bus.publish_dropped(), 0, "durable events got the rest");
    bus.publish(&[event(tenant, run, 5)]).await;
    assert_eq!(bus.publish_dropped(), 1, "the queue is full now");
}
