//! What the cluster tests share: timing knobs and bounds, starting a cluster and its
//! clients, SSE events with their arrival times, polling, and readings of the events and
//! lease columns. Holds no test and asserts nothing a test did not ask for.

use baton_testkit::api::sse::{self, Frame};
use baton_testkit::replicas::LeaseRow;
use baton_testkit::{Api, Cluster};
use chrono::{DateTime, Utc};
use serde_json::Value;
use std::time::{Duration, Instant};

pub use baton_testkit::api::DEADLINE;

const BATON: &str = env!("CARGO_BIN_EXE_baton");

/// How often conditions are polled.
pub const POLL: Duration = Duration::from_millis(10);

/// What the test host may add to a timing bound for process scheduling: several `baton`
/// processes, Postgres and the test itself share a couple of cores, and nextest runs
/// tests side by side.
pub const SCHEDULING_MARGIN: Duration = Duration::from_millis(1000);

pub const LEASE_TTL_MS: &str = "BATON_CLUSTER__LEASE_TTL_MS";
pub const RENEW_INTERVAL_MS: &str = "BATON_CLUSTER__RENEW_INTERVAL_MS";
pub const ADOPT_INTERVAL_MS: &str = "BATON_CLUSTER__ADOPT_INTERVAL_MS";

/// Leases that expire 2 s after their last renewal, renewed every 500 ms, and orphans
/// looked for every 250 ms: a killed owner's runs are adopted within about 2.5 s.
pub const FAST_LEASES: [(&str, &str); 3] = [
    (LEASE_TTL_MS, "2000"),
    (RENEW_INTERVAL_MS, "500"),
    (ADOPT_INTERVAL_MS, "250"),
];

/// A client of replica `i`'s API holding `key`: each request bounded by [`DEADLINE`],
/// runs polled every [`POLL`].
pub fn client(cluster: &Cluster, i: usize, key: &str) -> Api {
    Api::new(cluster.base_url(i), Some(key.to_string()))
        .with_timeout(DEADLINE)
        .with_polling(POLL, POLL)
}

/// One event as an SSE client got it.
#[derive(Debug, Clone)]
pub struct Got {
    pub version: i64,
    pub event_type: String,
    pub recorded_at: DateTime<Utc>,
    pub received_at: DateTime<Utc>,
}

impl From<Frame> for Got {
    fn from(f: Frame) -> Self {
        Got {
            version: f.version,
            recorded_at: recorded_at(&f.envelope),
            received_at: f.received_at.into(),
            event_type: f.event_type,
        }
    }
}

/// The next event of a stream that must stay well-formed; `None` when it ends.
pub async fn next_event(stream: &mut sse::Stream) -> Option<Got> {
    sse::next_frame(stream).await.map(Got::from)
}

/// The next event of a stream that may be cut (its replica is going away): a transport
/// error ends it like a clean close.
pub async fn next_event_or_cut(stream: &mut sse::Stream) -> Option<Got> {
    sse::next_frame_or_cut(stream).await.map(Got::from)
}

/// Every remaining event of the stream, until the server ends it (within the deadline).
pub async fn read_until_end(stream: &mut sse::Stream) -> Vec<Got> {
    let frames = sse::read_frames(stream, None, DEADLINE).await;
    frames.into_iter().map(Got::from).collect()
}

/// Polls `probe` every [`POLL`] until it yields a value; panics after `timeout`.
pub async fn until<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// `n` replicas with the extra environment `env` on the shared NATS or `nats`, a tenant
/// in them, and a [`client`] of each replica holding the tenant's owner key.
pub async fn start_cluster(
    n: usize,
    env: &[(&str, &str)],
    nats: Option<&str>,
) -> (Cluster, Vec<Api>) {
    let mut builder = Cluster::builder(BATON).replicas(n);
    for (k, v) in env {
        builder = builder.env(*k, *v);
    }
    if let Some(url) = nats {
        builder = builder.nats_url(url);
    }
    let cluster = builder.start().await.expect("replicas start");
    let (_, key) = cluster.create_tenant("acme").await.expect("tenant");
    let apis = (0..n).map(|i| client(&cluster, i, &key)).collect();
    (cluster, apis)
}

pub fn uuid(id: &str) -> uuid::Uuid {
    id.parse().expect("a UUID")
}

/// The replica index of an identity `replica-<i>/<boot>`.
pub fn index_of(replica: &str) -> usize {
    replica
        .split_once('/')
        .map_or(replica, |(name, _)| name)
        .strip_prefix("replica-")
        .and_then(|i| i.parse().ok())
        .unwrap_or_else(|| panic!("not a harness replica identity: {replica:?}"))
}

pub fn event_type(e: &Value) -> &str {
    e["type"].as_str().unwrap_or_default()
}

pub fn version(e: &Value) -> i64 {
    e["version"].as_i64().expect("version")
}

/// `meta.replica` of an event (engine events only).
pub fn writer(e: &Value) -> Option<&str> {
    e["meta"]["replica"].as_str()
}

pub fn recorded_at(e: &Value) -> DateTime<Utc> {
    e["recorded_at"]
        .as_str()
        .and_then(|t| t.parse().ok())
        .expect("recorded_at")
}

/// The run's lease row.
pub async fn lease(cluster: &Cluster, run: uuid::Uuid) -> LeaseRow {
    cluster
        .leases(&[run])
        .await
        .expect("leases")
        .pop()
        .expect("the run's row")
}

/// The identity of the replica that wrote the run's `turn.started` (it owns the run: its
/// `lease.acquired` went with it), once there is one.
pub async fn turn_owner(cluster: &Cluster, run: uuid::Uuid) -> String {
    until("turn.started", DEADLINE, || async move {
        let rows = cluster.event_rows(run).await.expect("rows");
        rows.into_iter()
            .find(|r| r.event_type == "turn.started")
            .map(|r| r.replica.expect("turn.started names its writer"))
    })
    .await
}

/// The run's lease once a replica other than `owner` claimed it at an epoch above
/// `old_epoch`, with the claimant's identity; `what` names the wait.
pub async fn claimed_from(
    cluster: &Cluster,
    run: uuid::Uuid,
    owner: &str,
    old_epoch: i64,
    what: &str,
) -> (String, LeaseRow) {
    until(what, DEADLINE, || async move {
        let l = lease(cluster, run).await;
        match l.owner.clone() {
            Some(o) if o != owner && l.epoch > old_epoch => Some((o, l)),
            _ => None,
        }
    })
    .await
}

/// The run's first receipt once `api` shows it held `uncertain`.
pub async fn held_uncertain(api: &Api, run: &str) -> Value {
    let path = format!("/v1/runs/{run}/receipts");
    let path = &path;
    until("the adopter to hold the call", DEADLINE, || async move {
        let r = api.get(path).await;
        let items = r.body["items"].as_array().cloned().unwrap_or_default();
        items.first().filter(|r| r["state"] == "uncertain").cloned()
    })
    .await
}

/// Milliseconds from `from` to `to` (negative when `to` is earlier).
pub fn ms_between(from: DateTime<Utc>, to: DateTime<Utc>) -> i64 {
    (to - from).num_milliseconds()
}

/// Lines of the replica's log containing `needle`.
pub fn log_count(cluster: &Cluster, i: usize, needle: &str) -> usize {
    std::fs::read_to_string(cluster.replica(i).log_path())
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(needle))
        .count()
}

/// Asserts the SSE client saw every stored event of the run exactly once, in order.
pub async fn assert_saw_the_stream(cluster: &Cluster, run: uuid::Uuid, seen: &[Got], who: &str) {
    let versions: Vec<i64> = seen.iter().map(|g| g.version).collect();
    let n = cluster.check_run_invariants(run).await.expect("invariants");
    assert_eq!(
        versions,
        (1..=n).collect::<Vec<_>>(),
        "{who} saw every version once, in order"
    );
    let stored: Vec<(i64, String)> = cluster
        .event_rows(run)
        .await
        .expect("rows")
        .into_iter()
        .map(|r| (r.version, r.event_type))
        .collect();
    let streamed: Vec<(i64, String)> = seen
        .iter()
        .map(|g| (g.version, g.event_type.clone()))
        .collect();
    assert_eq!(streamed, stored, "{who}: the stream is the database's");
}
