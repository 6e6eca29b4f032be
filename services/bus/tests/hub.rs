//! The local hub forgets subscribers as soon as their subscription is dropped, and hands
//! every subscriber of a run the same copy of an event.

mod common;

use baton_bus::Hub;
use baton_events::{RunId, TenantId};
use common::{event, recv};
use std::sync::Arc;

#[tokio::test]
async fn a_thousand_dropped_subscriptions_leave_no_entry_behind() {
    let hub = Arc::new(Hub::new(4));
    let tenant = TenantId::new();
    let finished = RunId::new();
    for i in 0..1000 {
        // Half on one finished run, half on runs nobody ever publishes to again.
        let run = if i % 2 == 0 { finished } else { RunId::new() };
        let sub = hub.subscribe(tenant, run);
        assert_eq!(hub.subscriber_count(), 1);
        drop(sub);
    }
    assert_eq!(hub.subscriber_count(), 0);
    assert_eq!(hub.runs_tracked(), 0);
}

#[tokio::test]
async fn a_dropped_subscriber_leaves_the_others_on_its_run_receiving() {
    let hub = Arc::new(Hub::new(4));
    let (tenant, run) = (TenantId::new(), RunId::new());
    let mut first = hub.subscribe(tenant, run);
    let gone = hub.subscribe(tenant, run);
    let mut last = hub.subscribe(tenant, run);
    drop(gone);
    assert_eq!((hub.subscriber_count(), hub.runs_tracked()), (2, 1));
    hub.dispatch(&event(tenant, run, 1));
    assert_eq!(recv(&mut first).await.map(|e| e.version), Some(1));
    assert_eq!(recv(&mut last).await.map(|e| e.version), Some(1));
    drop(first);
    hub.dispatch(&event(tenant, run, 2));
    assert_eq!(recv(&mut last).await.map(|e| e.version), Some(2));
    drop(last);
    assert_eq!((hub.subscriber_count(), hub.runs_tracked()), (0, 0));
}

#[tokio::test]
async fn the_subscribers_of_a_run_share_one_copy_of_an_event_and_its_json() {
    let hub = Arc::new(Hub::new(4));
    let (tenant, run) = (TenantId::new(), RunId::new());
    let mut subs: Vec<_> = (0..3).map(|_| hub.subscribe(tenant, run)).collect();
    let sent = event(tenant, run, 1);
    hub.dispatch(&sent);
    let mut got = Vec::new();
    for sub in &mut subs {
        got.push(sub.events.recv().await.expect("the event"));
    }
    let json = got[0].json().expect("encodable");
    assert_eq!(json, serde_json::to_string(&sent).expect("json"));
    for other in &got[1..] {
        assert_eq!(**other, sent);
        // The same bytes, encoded once: not an equal copy.
        assert!(std::ptr::eq(other.json().expect("encodable"), json));
    }
}

#[tokio::test]
async fn a_subscription_may_outlive_its_hub() {
    let hub = Arc::new(Hub::new(4));
    let mut sub = hub.subscribe(TenantId::new(), RunId::new());
    drop(hub);
    assert!(recv(&mut sub).await.is_none(), "the feed ends with the hub");
    drop(sub);
}

#[tokio::test]
async fn a_slow_subscriber_closed_by_dispatch_releases_cleanly() {
    let hub = Arc::new(Hub::new(1));
    let (tenant, run) = (TenantId::new(), RunId::new());
    let slow = hub.subscribe(tenant, run);
    let mut other = hub.subscribe(tenant, run);
    hub.dispatch(&event(tenant, run, 1));
    assert_eq!(recv(&mut other).await.map(|e| e.version), Some(1));
    hub.dispatch(&event(tenant, run, 2));
    assert_eq!(hub.closed_slow(), 1);
    assert_eq!((hub.subscriber_count(), hub.runs_tracked()), (1, 1));
    drop(slow);
    drop(other);
    assert_eq!((hub.subscriber_count(), hub.runs_tracked()), (0, 0));
}

fn delta(content: &str) -> baton_events::MessageDelta {
    baton_events::MessageDelta {
        turn: 1,
        step: 1,
        attempt: 1,
        content: content.into(),
        reasoning: false,
        progress: None,
    }
}

#[tokio::test]
async fn a_full_delta_buffer_loses_deltas_not_the_subscription() {
    let hub = Arc::new(Hub::new(1));
    let (tenant, run) = (TenantId::new(), RunId::new());
    let mut sub = hub.subscribe(tenant, run);
    let mut other = hub.subscribe(tenant, RunId::new());
    for i in 0..5000 {
        hub.dispatch_delta(tenant, run, &delta(&i.to_string()));
    }
    assert!(hub.deltas_dropped() > 0);
    assert_eq!((hub.closed_slow(), hub.subscriber_count()), (0, 2));
    assert!(other.deltas.try_recv().is_err(), "another run's deltas");
    hub.dispatch(&event(tenant, run, 1));
    assert_eq!(recv(&mut sub).await.map(|e| e.version), Some(1));
    assert_eq!(sub.deltas.try_recv().map(|d| d.content), Ok("0".into()));
}

#[tokio::test]
async fn deltas_end_with_the_hub_and_go_nowhere_without_subscribers() {
    let hub = Arc::new(Hub::new(4));
    let (tenant, run) = (TenantId::new(), RunId::new());
    hub.dispatch_delta(tenant, run, &delta("nobody listens"));
    assert_eq!((hub.runs_tracked(), hub.deltas_dropped()), (0, 0));
    let mut sub = hub.subscribe(tenant, run);
    hub.dispatch_delta(tenant, run, &delta("kept"));
    drop(hub);
    assert_eq!(
        sub.deltas.recv().await.map(|d| d.content),
        Some("kept".into())
    );
    assert!(
        sub.deltas.recv().await.is_none(),
        "the feed ends with the hub"
    );
}
