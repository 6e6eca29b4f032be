//! A private NATS stopped and restarted under a live SSE stream: both replicas keep
//! accepting and driving through the outage, the stream keeps every event (from the
//! database meanwhile), and live delivery resumes once the bus is back.

use crate::support::{
    ADOPT_INTERVAL_MS, DEADLINE, Got, assert_saw_the_stream, ms_between, next_event, start_cluster,
    until, uuid,
};
use baton_testkit::TestNats;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SSE_RESYNC_MS: &str = "BATON_HTTP__SSE_RESYNC_MS";

#[tokio::test]
async fn nats_restart_during_a_run_loses_no_sse_event() {
    const TURNS: usize = 6;
    const RESYNC: Duration = Duration::from_millis(3000);
    let mut nats = TestNats::start().await.expect("nats-server");
    let (cluster, apis) = start_cluster(
        2,
        &[
            // A drives what it accepts: B's adopter never steals a queued turn.
            (ADOPT_INTERVAL_MS, "60000"),
            // Idle streams re-read the database every 3 s: live delivery is far faster.
            (SSE_RESYNC_MS, "3000"),
        ],
        Some(&nats.url()),
    )
    .await;
    let [a, b]: [_; 2] = apis.try_into().expect("two clients");
    let replies: Vec<(String, u64, bool)> = (1..=TURNS)
        .map(|i| (format!("reply {i}"), 200, i == TURNS))
        .collect();
    let replies: Vec<(&str, u64, bool)> = replies
        .iter()
        .map(|(c, d, e)| (c.as_str(), *d, *e))
        .collect();
    let agent = a.agent(&replies).await;
    let run = a.run(&agent, Some("message 1")).await;
    let run_id = uuid(&run);

    // B streams from the start until the run ends; what it got is shared with the test.
    let seen: Arc<Mutex<Vec<Got>>> = Arc::default();
    let mut stream = b.sse(&run, None).await.expect("stream");
    let reader = {
        let seen = seen.clone();
        tokio::spawn(async move {
            let read = async {
                while let Some(ev) = next_event(&mut stream).await {
                    seen.lock().expect("lock").push(ev);
                }
            };
            tokio::time::timeout(Duration::from_secs(50), read)
                .await
                .expect("the stream ends with the run");
        })
    };

    // Turns 1 and 2 with NATS up.
    a.wait_status(&run, "waiting").await;
    a.message_when_idle(&run, "message 2").await;
    a.wait_status(&run, "waiting").await;
    let before_outage = a.summary(&run).await["version"].as_i64().expect("version");
    wait_seen(&seen, "events before the outage", before_outage).await;

    // NATS goes away; both replicas notice, keep accepting and driving.
    nats.stop();
    let outage = Instant::now();
    let (a_ref, b_ref) = (&a, &b);
    until(
        "both replicas to see the bus down",
        DEADLINE,
        || async move {
            (a_ref.bus().await == "unavailable" && b_ref.bus().await == "unavailable").then_some(())
        },
    )
    .await;
    for i in 3..=4 {
        a.message_when_idle(&run, &format!("message {i}")).await;
        a.wait_status(&run, "waiting").await;
    }
    // The turn's checkpoint is appended just after it settles: wait for it, so that
    // every event committed during the outage is counted as such.
    let a_ref = &a;
    let run_ref = &run;
    let during_outage = until("turn 4's checkpoint", DEADLINE, || async move {
        let events = a_ref.events(run_ref).await;
        let last = events.last()?;
        (last["type"] == "checkpoint.saved")
            .then(|| last["version"].as_i64())
            .flatten()
    })
    .await;
    wait_seen(
        &seen,
        "events written during the outage, from the database",
        during_outage,
    )
    .await;
    eprintln!(
        "NATS restart: B's client had v{during_outage} (from the database) {:?} into the outage",
        outage.elapsed()
    );
    assert!(!nats.is_running(), "NATS stayed down meanwhile");

    nats.restart().await.expect("nats restarts");
    let restarted = Instant::now();
    until("both replicas to reconnect", DEADLINE, || async move {
        (a_ref.bus().await == "ok" && b_ref.bus().await == "ok").then_some(())
    })
    .await;
    eprintln!(
        "NATS restart: both replicas reconnected {:?} after the restart (outage {:?})",
        restarted.elapsed(),
        restarted - outage
    );
    // Turns 5 and 6 with NATS back; each waits until B's client has the previous turn so
    // the latencies below are per turn.
    a.message_when_idle(&run, "message 5").await;
    a.wait_status(&run, "waiting").await;
    let v5 = a.summary(&run).await["version"].as_i64().expect("version");
    wait_seen(&seen, "turn 5 at B", v5).await;
    a.message_when_idle(&run, "message 6").await;
    a.wait_status(&run, "completed").await;
    tokio::time::timeout(DEADLINE, reader)
        .await
        .expect("the stream ended")
        .expect("reader");

    let seen = seen.lock().expect("lock").clone();
    assert_eq!(
        seen.last().map(|g| g.event_type.as_str()),
        Some("run.completed")
    );
    assert_saw_the_stream(&cluster, run_id, &seen, "B's SSE client").await;
    // A wrote every engine event; B only served the stream.
    let rows = cluster.event_rows(run_id).await.expect("rows");
    for r in rows.iter().filter(|r| r.replica.is_some()) {
        assert_eq!(r.replica_name(), Some("replica-0"), "{r:?}");
    }

    let latency = |g: &Got| ms_between(g.recorded_at, g.received_at);
    let outage_lat: Vec<i64> = seen
        .iter()
        .filter(|g| g.version > before_outage && g.version <= during_outage)
        .map(latency)
        .collect();
    let after_lat: Vec<(i64, String, i64)> = seen
        .iter()
        .filter(|g| g.version > during_outage)
        .map(|g| (g.version, g.event_type.clone(), latency(g)))
        .collect();
    eprintln!(
        "NATS restart: commit -> B's client latency during the outage (from the database) \
         {outage_lat:?} ms; after the restart {after_lat:?}"
    );
    // Through the database only, an event waits for the 3 s resync of an idle stream, and
    // of two turns posted one after the other at least one event would wait that long.
    let worst = after_lat
        .iter()
        .map(|(_, _, l)| *l)
        .max()
        .unwrap_or_default();
    assert!(
        worst < (RESYNC / 3).as_millis() as i64,
        "live delivery did not resume after the restart: worst {worst} ms"
    );
    cluster.stop().await.expect("stop");
}

/// Waits until an SSE reader collecting into `seen` has version `v`.
async fn wait_seen(seen: &Mutex<Vec<Got>>, what: &str, v: i64) {
    until(what, DEADLINE, || async move {
        let up_to = seen.lock().expect("lock").last().map_or(0, |g| g.version);
        (up_to >= v).then_some(())
    })
    .await;
}
