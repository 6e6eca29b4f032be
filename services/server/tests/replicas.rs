//! Several `baton serve` processes on one Postgres database and one NATS (the team tier),
//! driven through `baton_testkit::Cluster`: any replica serves any request and streams
//! every run, and killing or stopping one leaves the others serving.
//! Needs Postgres (`BATON_TEST_DATABASE_URL`) and NATS (`BATON_TEST_NATS_URL`).

use baton_testkit::api::{DEADLINE, sse};
use baton_testkit::{Api, Cluster};
use futures::StreamExt;
use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

const BATON: &str = env!("CARGO_BIN_EXE_baton");

/// A client of replica `i`'s API holding `key`; each request is bounded by [`DEADLINE`].
fn api(cluster: &Cluster, i: usize, key: &str) -> Api {
    Api::new(cluster.base_url(i), Some(key.to_string())).with_timeout(DEADLINE)
}

/// Every remaining event of the stream as (version, type), until the server ends it
/// (within the deadline).
async fn read_until_end(stream: &mut sse::Stream) -> Vec<(i64, String)> {
    sse::pairs(&sse::read_frames(stream, None, DEADLINE).await)
}

fn uuid(id: &str) -> uuid::Uuid {
    id.parse().expect("a UUID")
}

#[tokio::test]
async fn a_run_created_on_one_replica_is_driven_and_streamed_on_the_others() {
    let cluster = Cluster::start(BATON, 3).await.expect("three replicas");
    let (_, key) = cluster.create_tenant("acme").await.expect("tenant");
    let [a, b, c] = [0, 1, 2].map(|i| api(&cluster, i, &key));

    let agent = a
        .agent(&[
            ("one", 20, false),
            ("two", 20, false),
            ("three", 20, false),
            ("four", 20, false),
            ("five", 20, true),
        ])
        .await;
    let run = a.run(&agent, Some("message 1")).await;
    // C streams from the start: subscribed before B sends anything, so what follows
    // reaches it live, from whichever replica writes it.
    let mut stream = c.sse(&run, None).await.expect("a 200 stream");
    let watcher = tokio::spawn(async move { read_until_end(&mut stream).await });
    for i in 2..=5 {
        b.message_when_idle(&run, &format!("message {i}")).await;
    }
    let seen = watcher.await.expect("watcher");

    let versions: Vec<i64> = seen.iter().map(|(v, _)| *v).collect();
    let n = versions.len() as i64;
    assert_eq!(
        versions,
        (1..=n).collect::<Vec<_>>(),
        "C saw every version once, in order"
    );
    assert_eq!(seen.last().map(|(_, t)| t.as_str()), Some("run.completed"));
    let run_id = uuid(&run);
    assert_eq!(
        cluster
            .check_run_invariants(run_id)
            .await
            .expect("invariants"),
        n
    );
    let rows = cluster.event_rows(run_id).await.expect("events");
    let stored: Vec<(i64, String)> = rows
        .iter()
        .map(|r| (r.version, r.event_type.clone()))
        .collect();
    assert_eq!(seen, stored, "the stream is the database's");
    let mut writers: Vec<&str> = rows.iter().filter_map(|r| r.replica_name()).collect();
    writers.sort_unstable();
    writers.dedup();
    eprintln!("engine events written by {writers:?}");
    assert!(
        writers.contains(&"replica-0") && writers.contains(&"replica-1"),
        "A drove the first turn and B the ones it took messages for: {rows:?}"
    );
    a.wait_status(&run, "completed").await;
    cluster.stop().await.expect("stop");
}

#[tokio::test]
async fn sigkill_of_a_replica_leaves_the_others_serving() {
    let mut cluster = Cluster::start(BATON, 2).await.expect("two replicas");
    let (_, key) = cluster.create_tenant("acme").await.expect("tenant");
    let survivor = api(&cluster, 1, &key);

    cluster.sigkill(0).expect("sigkill");
    let status = cluster
        .wait_exit(0, Duration::from_secs(5))
        .await
        .expect("killed replica exits");
    assert_eq!(status.signal(), Some(9), "{status}");
    assert!(
        cluster.sigterm(0).is_err(),
        "an exited replica is not signalled"
    );

    let r = survivor.get("/readyz").await;
    assert_eq!(r.status, 200, "{}", r.body);
    let agent = survivor
        .agent(&[("hello", 10, false), ("bye", 10, true)])
        .await;
    let run = survivor.run(&agent, Some("hi")).await;
    survivor.message_when_idle(&run, "and goodbye").await;
    survivor.wait_status(&run, "completed").await;
    cluster
        .check_run_invariants(uuid(&run))
        .await
        .expect("invariants");
    cluster.stop().await.expect("stop");
}

#[tokio::test]
async fn sigterm_stops_a_replica_cleanly_within_its_grace_period() {
    let mut cluster = Cluster::start(BATON, 1).await.expect("one replica");
    let (_, key) = cluster.create_tenant("acme").await.expect("tenant");
    let api = api(&cluster, 0, &key);
    // Something to drain: a turn in progress and an open SSE stream.
    let agent = api.agent(&[("slow", 3_000, false)]).await;
    let run = api.run(&agent, Some("take your time")).await;
    api.wait_status(&run, "running").await;
    let mut stream = api.sse(&run, None).await.expect("a 200 stream");
    let first = tokio::time::timeout(DEADLINE, sse::next_frame(&mut stream))
        .await
        .expect("first event in time");
    assert_eq!(
        first.as_ref().map(sse::Frame::pair),
        Some((1, "run.created".to_string()))
    );

    let asked = std::time::Instant::now();
    cluster.sigterm(0).expect("sigterm");
    let status = cluster
        .wait_exit(0, Duration::from_secs(10))
        .await
        .expect("exits within 10 s");
    eprintln!("exited {status} {:?} after SIGTERM", asked.elapsed());
    assert!(status.success(), "clean exit: {status}");
    // The stream ends (cleanly or not) with the process; whatever it still delivered
    // continues the replay in order.
    let mut rest = Vec::new();
    let drained = tokio::time::timeout(DEADLINE, async {
        while let Some(Ok(ev)) = stream.next().await {
            if let Ok(version) = ev.id.parse::<i64>() {
                rest.push(version);
            }
        }
    });
    drained.await.expect("the SSE stream ends with the process");
    let expected: Vec<i64> = (2..2 + rest.len() as i64).collect();
    assert_eq!(rest, expected, "no gap or duplicate before the close");
    cluster
        .check_run_invariants(uuid(&run))
        .await
        .expect("invariants");
    cluster.stop().await.expect("stop");
}
