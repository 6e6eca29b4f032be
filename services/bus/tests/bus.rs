//! The bus contract, run against the in-process bus and a real NATS server.

mod common;

use baton_bus::{Hub, InProcessBus, NatsBus};
use baton_core::ports::EventBus;
use baton_events::{RunId, TenantId};
use common::{event, recv};

fn nats_url() -> String {
    std::env::var("BATON_TEST_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into())
}

async fn delivers_a_runs_events_in_order_and_only_to_its_subscribers(bus: &dyn EventBus) {
    let tenant = TenantId::new();
    let (run, other) = (RunId::new(), RunId::new());
    let mut sub = bus.subscribe(tenant, run).await.expect("subscribe");
    let mut other_sub = bus.subscribe(tenant, other).await.expect("subscribe");
    let mut foreign = bus
        .subscribe(TenantId::new(), run)
        .await
        .expect("subscribe");
    let events: Vec<_> = (1..=20).map(|v| event(tenant, run, v)).collect();
    bus.publish(&events).await;
    for v in 1..=20 {
        let got = recv(&mut sub).await.expect("event delivered");
        assert_eq!(got.version, v);
    }
    bus.publish(&[event(tenant, other, 1)]).await;
    assert_eq!(recv(&mut other_sub).await.map(|e| e.stream), Some(other));
    assert!(
        foreign.events.try_recv().is_err(),
        "another tenant's subscriber must see nothing"
    );
}

async fn closes_a_subscriber_that_falls_behind(bus: &dyn EventBus, buffer: usize) {
    let tenant = TenantId::new();
    let run = RunId::new();
    let mut slow = bus.subscribe(tenant, run).await.expect("subscribe");
    let mut fast = bus.subscribe(tenant, run).await.expect("subscribe");
    let total = buffer as i64 + 5;
    for v in 1..=total {
        bus.publish(&[event(tenant, run, v)]).await;
        assert_eq!(recv(&mut fast).await.map(|e| e.version), Some(v));
    }
    let mut seen = 0;
    while let Some(e) = recv(&mut slow).await {
        seen += 1;
        assert_eq!(e.version, seen);
    }
    assert_eq!(seen as usize, buffer, "the slow feed ends after its buffer");
}

async fn forgets_dropped_subscribers(bus: &dyn EventBus, hub: &Hub) {
    let tenant = TenantId::new();
    let (before, runs) = (hub.subscriber_count(), hub.runs_tracked());
    let run = RunId::new();
    let mut kept = bus.subscribe(tenant, run).await.expect("subscribe");
    for _ in 0..100 {
        drop(bus.subscribe(tenant, run).await.expect("subscribe"));
        drop(
            bus.subscribe(tenant, RunId::new())
                .await
                .expect("subscribe"),
        );
    }
    assert_eq!(hub.subscriber_count(), before + 1);
    assert_eq!(hub.runs_tracked(), runs + 1);
    bus.publish(&[event(tenant, run, 1)]).await;
    assert_eq!(recv(&mut kept).await.map(|e| e.version), Some(1));
    drop(kept);
    assert_eq!((hub.subscriber_count(), hub.runs_tracked()), (before, runs));
}

#[tokio::test]
async fn in_process_forgets_dropped_subscribers() {
    let bus = InProcessBus::new(8);
    forgets_dropped_subscribers(&bus, bus.hub()).await;
}

#[tokio::test]
async fn nats_forgets_dropped_subscribers() {
    let bus = NatsBus::connect(&nats_url(), 8).await.expect("nats");
    forgets_dropped_subscribers(&bus, bus.hub()).await;
}

#[tokio::test]
async fn in_process_delivers_in_order_and_isolates_runs_and_tenants() {
    delivers_a_runs_events_in_order_and_only_to_its_subscribers(&InProcessBus::new(64)).await;
}

#[tokio::test]
async fn in_process_closes_slow_subscribers() {
    let bus = InProcessBus::new(8);
    closes_a_subscriber_that_falls_behind(&bus, 8).await;
    assert_eq!(bus.hub().closed_slow(), 1);
}

#[tokio::test]
async fn nats_delivers_in_order_and_isolates_runs_and_tenants() {
    let bus = NatsBus::connect(&nats_url(), 64).await.expect("nats");
    delivers_a_runs_events_in_order_and_only_to_its_subscribers(&bus).await;
    bus.ping().await.expect("connected");
}

#[tokio::test]
async fn nats_closes_slow_subscribers() {
    let bus = NatsBus::connect(&nats_url(), 8).await.expect("nats");
    closes_a_subscriber_that_falls_behind(&bus, 8).await;
}

#[tokio::test]
async fn nats_events_reach_subscribers_of_another_connection() {
    let writer = NatsBus::connect(&nats_url(), 64).await.expect("nats");
    let reader = NatsBus::connect(&nats_url(), 64).await.expect("nats");
    let (tenant, run) = (TenantId::new(), RunId::new());
    let mut sub = reader.subscribe(tenant, run).await.expect("subscribe");
    writer.publish(&[event(tenant, run, 1)]).await;
    assert_eq!(recv(&mut sub).await.map(|e| e.version), Some(1));
}

async fn control_messages_reach_every_subscriber(bus_a: &dyn EventBus, bus_b: &dyn EventBus) {
    use baton_core::ports::{Control, ControlMessage};
    let mut on_a = bus_a.subscribe_control().await.expect("subscribe");
    let mut on_b = bus_b.subscribe_control().await.expect("subscribe");
    // The NATS server is shared with every other test, whose replicas talk
    // on the same control subject: a sender name of our own tells ours apart.
    let from = format!("replica-a/{}", uuid::Uuid::new_v4().simple());
    let (tenant, run) = (TenantId::new(), RunId::new());
    let msg = ControlMessage {
        from: from.clone(),
        control: Control::Wake { tenant, run },
    };
    bus_a.publish_control(&msg).await;
    bus_a
        .publish_control(&ControlMessage {
            from: from.clone(),
            control: Control::Adopt,
        })
        .await;
    for rx in [&mut on_a, &mut on_b] {
        let first = next_control_from(rx, &from).await;
        assert_eq!(first.as_ref(), Some(&msg));
        let second = next_control_from(rx, &from).await;
        assert_eq!(second.map(|m| m.control), Some(Control::Adopt));
    }
}

/// The next control message sent by `from`, skipping other senders'.
async fn next_control_from(
    rx: &mut tokio::sync::mpsc::Receiver<baton_core::ports::ControlMessage>,
    from: &str,
) -> Option<baton_core::ports::ControlMessage> {
    let wait = std::time::Duration::from_secs(15);
    tokio::time::timeout(wait, async {
        loop {
            match rx.recv().await {
                Some(m) if m.from != from => continue,
                other => return other,
            }
        }
    })
    .await
    .expect("in time")
}

#[tokio::test]
async fn in_process_control_messages_reach_every_subscriber() {
    let bus = InProcessBus::new(8);
    control_messages_reach_every_subscriber(&bus, &bus).await;
}

#[tokio::test]
async fn nats_control_messages_reach_every_replica() {
    let a = NatsBus::connect(&nats_url(), 8).await.expect("nats");
    let b = NatsBus::connect(&nats_url(), 8).await.expect("nats");
    control_messages_reach_every_subscriber(&a, &b).await;
    a.close(std::time::Duration::from_secs(2)).await;
}

#[tokio::test]
async fn nats_messages_carry_the_events_trace_context_in_their_headers() {
    use futures::StreamExt;
    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let (tenant, run) = (TenantId::new(), RunId::new());
    let raw = async_nats::connect(nats_url()).await.expect("nats");
    let mut sub = raw
        .subscribe(baton_bus::Subjects::default().event(tenant, run))
        .await
        .expect("subscribe");
    raw.flush().await.expect("flush");
    // The server must know the subscription before anything is published.
    let probe = format!("_probe.{}", uuid::Uuid::new_v4().simple());
    let mut echo = raw.subscribe(probe.clone()).await.expect("probe");
    raw.publish(probe, "x".into()).await.expect("publish probe");
    tokio::time::timeout(std::time::Duration::from_secs(5), echo.next())
        .await
        .expect("the server answers");
    let bus = NatsBus::connect(&nats_url(), 8).await.expect("nats");
    let mut e = event(tenant, run, 1);
    e.meta.traceparent = Some(TP.into());
    bus.publish(&[e]).await;
    let msg = tokio::time::timeout(std::time::Duration::from_secs(10), sub.next())
        .await
        .expect("in time")
        .expect("a message");
    let header = msg
        .headers
        .as_ref()
        .and_then(|h| h.get("traceparent"))
        .map(|v| v.to_string());
    assert_eq!(header.as_deref(), Some(TP));
}
