//! The turn loop: answers, failures, cancels, shutdown, adoption and parking.

use crate::world::{ports, world, world_with};
use baton_core::model::RunStatus;
use baton_core::ports::{Clock, SystemClock};
use baton_core::runs::PostMessage;
use baton_engine::{Engine, EngineOptions};
use std::time::Duration;

#[tokio::test]
async fn a_turn_records_the_answer_and_settles_the_run_in_one_append() {
    let w = world().await;
    let agent = w.agent(&[("hello", 0, false)]).await;
    let run = w.start(&w.runs, agent, "hi").await;
    let done = w.wait_status(run, RunStatus::Waiting).await;
    assert_eq!(done.message_count, 2);
    w.settled_types(run).await;
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
            "model.completed",
            "turn.completed",
            "checkpoint.saved"
        ]
    );
    assert_eq!(
        events[7].data["through_version"], 7,
        "snapshots the settled turn"
    );
    assert_eq!(events[3].data["owner"], "test");
    assert_eq!(events[3].data["reason"], "new");
    assert_eq!(
        events[3].recorded_at, events[4].recorded_at,
        "announced with the first step"
    );
    let (answer, settled) = (&events[5], &events[6]);
    assert_eq!(answer.data["content"], "hello");
    assert_eq!(answer.data["step"], 1);
    assert_eq!(answer.data["finish_reason"], "stop");
    assert_eq!(answer.recorded_at, settled.recorded_at, "one append");
    assert_eq!(answer.meta.actor.as_deref(), Some("engine"));
    assert_eq!(answer.meta.replica.as_deref(), Some("test"));
}

#[tokio::test]
async fn a_turn_past_the_end_of_the_script_fails_and_frees_the_run() {
    let w = world().await;
    let agent = w.agent(&[("only", 0, false)]).await;
    let run = w.start(&w.runs, agent, "one").await;
    w.wait_status(run, RunStatus::Waiting).await;
    let cmd = PostMessage {
        content: "two".into(),
        request_id: None,
        strategy: None,
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
    let types = w.settled_types(run).await;
    assert_eq!(
        types.iter().rev().nth(1).map(String::as_str),
        Some("turn.failed")
    );
}

#[tokio::test]
async fn a_cancel_during_the_models_wait_ends_the_run_without_an_answer() {
    let w = world().await;
    let agent = w.agent(&[("too late", 30_000, false)]).await;
    let run = w.start(&w.runs, agent, "go").await;
    w.wait_status(run, RunStatus::Running).await;
    let started = tokio::time::Instant::now();
    w.runs
        .cancel_run(&w.owner, run, Some("stop".into()))
        .await
        .expect("cancel");
    let r = w.wait_status(run, RunStatus::Cancelled).await;
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
    let r = w.wait_status(run, RunStatus::Waiting).await;
    assert_eq!(r.message_count, 2);
    assert_eq!(w.engine.run_once().await.expect("sweep"), 0, "nothing left");
}

#[tokio::test]
async fn a_turn_interrupted_by_shutdown_writes_nothing_and_is_taken_again_after_restart() {
    let w = world().await;
    // Slow enough that the shutdown comes within the turn on a loaded machine.
    let agent = w.agent(&[("after restart", 3_000, false)]).await;
    let run = w.start(&w.runs, agent, "go").await;
    w.wait_status(run, RunStatus::Running).await;
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
        ports(&w.store, &w.runs.recorder),
        EngineOptions::new("test-2"),
    );
    assert_eq!(restarted.run_once().await.expect("sweep"), 1);
    let r = w.wait_status(run, RunStatus::Waiting).await;
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
    w.wait_status(run, RunStatus::Cancelled).await;
}

#[tokio::test]
async fn a_command_taken_by_another_replica_reaches_the_owner_at_once() {
    let w = world().await;
    let agent = w.agent(&[("too late", 30_000, false)]).await;
    let run = w.start(&w.runs, agent, "go").await;
    w.wait_status(run, RunStatus::Running).await;
    // A second replica on the same database and bus takes the cancel.
    let (other, via_other) = w.other_replica("other").await;
    let started = tokio::time::Instant::now();
    via_other
        .cancel_run(&w.owner, run, None)
        .await
        .expect("cancel");
    w.wait_status(run, RunStatus::Cancelled).await;
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
    w.wait_status(run, RunStatus::Cancelled).await;
    other.shutdown().await;
}
