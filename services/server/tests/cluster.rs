//! Fenced leases, orphan adoption, drain and fan-out across real `baton` processes sharing
//! one Postgres database and one NATS (issue 4, "Done when"): SIGKILL of an owner mid-turn,
//! SIGTERM of an owner with 50 active runs, SIGSTOP past the lease TTL then SIGCONT, and a
//! NATS restart under a live SSE stream. Each is checked from the API, from the events
//! table and from the lease columns of the runs table, and prints what it measured.
//! Needs Postgres (`BATON_TEST_DATABASE_URL`), NATS (`BATON_TEST_NATS_URL`) and, for the
//! private NATS, `nats-server`.

use baton_testkit::replicas::LeaseRow;
use baton_testkit::{Cluster, TestNats};
use chrono::{DateTime, Utc};
use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::os::unix::process::ExitStatusExt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const BATON: &str = env!("CARGO_BIN_EXE_baton");

/// Bound on every wait in this file unless a test says otherwise.
const DEADLINE: Duration = Duration::from_secs(20);

/// How often conditions are polled.
const POLL: Duration = Duration::from_millis(10);

/// What the test host may add to a timing bound for process scheduling: several `baton`
/// processes, Postgres and the test itself share a couple of cores, and nextest runs
/// tests side by side.
const SCHEDULING_MARGIN: Duration = Duration::from_millis(1000);

const LEASE_TTL_MS: &str = "BATON_CLUSTER__LEASE_TTL_MS";
const RENEW_INTERVAL_MS: &str = "BATON_CLUSTER__RENEW_INTERVAL_MS";
const ADOPT_INTERVAL_MS: &str = "BATON_CLUSTER__ADOPT_INTERVAL_MS";
const SHUTDOWN_GRACE_SECS: &str = "BATON_HTTP__SHUTDOWN_GRACE_SECS";
const SSE_RESYNC_MS: &str = "BATON_HTTP__SSE_RESYNC_MS";

/// What the engine logs when an append of a stale driver is fenced.
const FENCED_LOG: &str = "fenced: another replica owns this run now; stopping";
/// What the keeper logs when a renewal shows leases it no longer holds.
const KEEPER_LOST_LOG: &str = "leases were taken over; stopping their drivers";
/// What a driver logs when it stops because the keeper found its lease gone.
const DRIVER_LOST_LOG: &str = "the run's lease was taken over; stopping";

// ---------------------------------------------------------------------------------------
// A client of one replica's API.

/// A client of one replica's API holding an owner key.
#[derive(Clone)]
struct Api {
    base: String,
    key: String,
    http: reqwest::Client,
}

impl Api {
    fn new(base: &str, key: &str) -> Self {
        Api {
            base: base.to_string(),
            key: key.to_string(),
            http: reqwest::Client::new(),
        }
    }

    fn req(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.key)
            .timeout(DEADLINE)
    }

    async fn send(&self, r: reqwest::RequestBuilder) -> (u16, Value) {
        let res = r.send().await.expect("request sent");
        let status = res.status().as_u16();
        let text = res.text().await.expect("body");
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        self.send(self.req(reqwest::Method::GET, path)).await
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.send(self.req(reqwest::Method::POST, path).json(&body))
            .await
    }

    /// A scripted agent answering turn `i` with `replies[i]` (content, delay_ms,
    /// complete_run).
    async fn agent(&self, replies: &[(&str, u64, bool)]) -> String {
        let replies: Vec<Value> = replies
            .iter()
            .map(|(c, d, end)| json!({"content": c, "delay_ms": d, "complete_run": end}))
            .collect();
        let provider = json!({"kind": "scripted", "replies": replies});
        let (status, body) = self
            .post(
                "/v1/agents",
                json!({"name": "cluster test", "provider": provider}),
            )
            .await;
        assert_eq!(status, 201, "create agent: {body}");
        body["id"].as_str().expect("agent id").to_string()
    }

    /// Creates a run with a first message (so a turn starts at once); returns its id.
    async fn run(&self, agent: &str, message: &str) -> String {
        let (status, body) = self
            .post("/v1/runs", json!({"agent_id": agent, "message": message}))
            .await;
        assert_eq!(status, 201, "create run: {body}");
        body["run"]["id"].as_str().expect("run id").to_string()
    }

    /// The run's projection.
    async fn summary(&self, run: &str) -> Value {
        let (code, body) = self.get(&format!("/v1/runs/{run}")).await;
        assert_eq!(code, 200, "get run: {body}");
        body
    }

    /// Posts a message, retrying while the run is busy with a turn; it must be accepted.
    async fn message_when_idle(&self, run: &str, content: &str) {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let body = json!({"content": content, "request_id": format!("{run}-{content}")});
            let (status, answer) = self.post(&format!("/v1/runs/{run}/messages"), body).await;
            match status {
                201 => return,
                409 if answer["code"] == "run_busy" => {}
                _ => panic!("posting {content:?}: {status} {answer}"),
            }
            assert!(Instant::now() < deadline, "run never idle");
            tokio::time::sleep(POLL).await;
        }
    }

    /// Polls the run until its status is `status`.
    async fn wait_status(&self, run: &str, status: &str) {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let body = self.summary(run).await;
            if body["status"] == status {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "run never became {status}: {body}"
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// Every event of the run as JSON envelopes, in version order (the JSON form of the
    /// events endpoint, page after page).
    async fn events(&self, run: &str) -> Vec<Value> {
        let mut all = Vec::new();
        let mut after = 0;
        loop {
            let (code, page) = self
                .get(&format!("/v1/runs/{run}/events?after={after}&limit=500"))
                .await;
            assert_eq!(code, 200, "events page: {page}");
            let events = page["events"].as_array().expect("events array").clone();
            if events.is_empty() {
                return all;
            }
            after = page["next_after"].as_i64().expect("next_after");
            all.extend(events);
        }
    }

    /// `/readyz`'s view of the bus (`ok` or `unavailable`).
    async fn bus(&self) -> String {
        let (code, body) = self.get("/readyz").await;
        assert_eq!(code, 200, "readyz: {body}");
        body["bus"].as_str().expect("bus state").to_string()
    }

    /// Opens the run's SSE stream after version `after` (sent as `Last-Event-ID`);
    /// `None` when the server answers 204 (the run ended and nothing follows `after`).
    async fn sse(&self, run: &str, after: i64) -> Option<Sse> {
        let mut req = self
            .http
            .get(format!("{}/v1/runs/{run}/events", self.base))
            .bearer_auth(&self.key)
            .header("accept", "text/event-stream");
        if after > 0 {
            req = req.header("last-event-id", after.to_string());
        }
        let res = req.send().await.expect("sse request");
        match res.status().as_u16() {
            200 => Some(res.bytes_stream().eventsource().boxed()),
            204 => None,
            other => panic!("sse for {run} after {after}: {other}"),
        }
    }
}

type Sse = futures::stream::BoxStream<
    'static,
    Result<eventsource_stream::Event, eventsource_stream::EventStreamError<reqwest::Error>>,
>;

/// One event as an SSE client got it.
#[derive(Debug, Clone)]
struct Got {
    version: i64,
    event_type: String,
    recorded_at: DateTime<Utc>,
    received_at: DateTime<Utc>,
}

/// Decodes one SSE frame; `None` for frames without data (comments, retry hints).
fn decode(ev: &eventsource_stream::Event) -> Option<Got> {
    if ev.data.is_empty() {
        return None;
    }
    let env: Value = serde_json::from_str(&ev.data).expect("envelope JSON");
    let version: i64 = ev.id.parse().expect("numeric id");
    assert_eq!(env["version"], version, "id matches the envelope");
    assert_eq!(env["type"], ev.event.as_str());
    Some(Got {
        version,
        event_type: ev.event.clone(),
        recorded_at: recorded_at(&env),
        received_at: Utc::now(),
    })
}

/// The next event of a stream that must stay well-formed; `None` when it ends.
async fn next_event(stream: &mut Sse) -> Option<Got> {
    while let Some(ev) = stream.next().await {
        let ev = ev.expect("well-formed SSE");
        if let Some(got) = decode(&ev) {
            return Some(got);
        }
    }
    None
}

/// The next event of a stream that may be cut (its replica is going away): a transport
/// error ends it like a clean close.
async fn next_event_or_cut(stream: &mut Sse) -> Option<Got> {
    while let Some(Ok(ev)) = stream.next().await {
        if let Some(got) = decode(&ev) {
            return Some(got);
        }
    }
    None
}

/// Every remaining event of the stream, until the server ends it (within the deadline).
async fn read_until_end(stream: &mut Sse) -> Vec<Got> {
    let mut got = Vec::new();
    let read = async {
        while let Some(ev) = next_event(stream).await {
            got.push(ev);
        }
    };
    if tokio::time::timeout(DEADLINE, read).await.is_err() {
        panic!("stream did not end in time; got {got:?}");
    }
    got
}

// ---------------------------------------------------------------------------------------
// Small helpers.

/// Polls `probe` every [`POLL`] until it yields a value; panics after `timeout`.
async fn until<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> T
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

async fn start_cluster(n: usize, env: &[(&str, &str)], nats: Option<&str>) -> Cluster {
    let mut builder = Cluster::builder(BATON).replicas(n);
    for (k, v) in env {
        builder = builder.env(*k, *v);
    }
    if let Some(url) = nats {
        builder = builder.nats_url(url);
    }
    builder.start().await.expect("replicas start")
}

fn uuid(id: &str) -> uuid::Uuid {
    id.parse().expect("a UUID")
}

/// The replica index of an identity `replica-<i>/<boot>`.
fn index_of(replica: &str) -> usize {
    replica
        .split_once('/')
        .map_or(replica, |(name, _)| name)
        .strip_prefix("replica-")
        .and_then(|i| i.parse().ok())
        .unwrap_or_else(|| panic!("not a harness replica identity: {replica:?}"))
}

fn event_type(e: &Value) -> &str {
    e["type"].as_str().unwrap_or_default()
}

fn version(e: &Value) -> i64 {
    e["version"].as_i64().expect("version")
}

/// `meta.replica` of an event (engine events only).
fn writer(e: &Value) -> Option<&str> {
    e["meta"]["replica"].as_str()
}

fn recorded_at(e: &Value) -> DateTime<Utc> {
    e["recorded_at"]
        .as_str()
        .and_then(|t| t.parse().ok())
        .expect("recorded_at")
}

/// The run's lease row.
async fn lease(cluster: &Cluster, run: uuid::Uuid) -> LeaseRow {
    cluster
        .leases(&[run])
        .await
        .expect("leases")
        .pop()
        .expect("the run's row")
}

/// Milliseconds from `from` to `to` (negative when `to` is earlier).
fn ms_between(from: DateTime<Utc>, to: DateTime<Utc>) -> i64 {
    (to - from).num_milliseconds()
}

/// The `q` quantile (nearest rank) of sorted values.
fn quantile(sorted: &[u128], q: f64) -> u128 {
    assert!(!sorted.is_empty());
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// Waits until an SSE reader collecting into `seen` has version `v`.
async fn wait_seen(seen: &Mutex<Vec<Got>>, what: &str, v: i64) {
    until(what, DEADLINE, || async move {
        let up_to = seen.lock().expect("lock").last().map_or(0, |g| g.version);
        (up_to >= v).then_some(())
    })
    .await;
}

/// Lines of the replica's log containing `needle`.
fn log_count(cluster: &Cluster, i: usize, needle: &str) -> usize {
    std::fs::read_to_string(cluster.replica(i).log_path())
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(needle))
        .count()
}

/// Asserts the SSE client saw every stored event of the run exactly once, in order.
async fn assert_saw_the_stream(cluster: &Cluster, run: uuid::Uuid, seen: &[Got], who: &str) {
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

// ---------------------------------------------------------------------------------------
// The tests.

#[tokio::test]
async fn sigkill_of_the_owner_mid_turn_is_adopted_within_ttl_plus_an_adoption_interval() {
    const TTL_MS: u64 = 2000;
    const ADOPT_MS: u64 = 250;
    const REPLY_MS: u64 = 3000;
    let mut cluster = start_cluster(
        3,
        &[
            (LEASE_TTL_MS, "2000"),
            (RENEW_INTERVAL_MS, "500"),
            (ADOPT_INTERVAL_MS, "250"),
        ],
        None,
    )
    .await;
    let (_, key) = cluster.create_tenant("acme").await.expect("tenant");
    let apis: Vec<Api> = (0..3)
        .map(|i| Api::new(cluster.base_url(i), &key))
        .collect();
    let agent = apis[0].agent(&[("slow answer", REPLY_MS, false)]).await;
    let run = apis[0].run(&agent, "take your time").await;
    let run_id = uuid(&run);

    // Whoever wrote `turn.started` owns the run (its `lease.acquired` went with it).
    let c = &cluster;
    let owner = until("turn.started", DEADLINE, || async move {
        let rows = c.event_rows(run_id).await.expect("rows");
        rows.into_iter()
            .find(|r| r.event_type == "turn.started")
            .map(|r| r.replica.expect("turn.started names its writer"))
    })
    .await;
    let victim = index_of(&owner);
    cluster.sigkill(victim).expect("sigkill");
    let killed = Instant::now();
    let killed_wall = Utc::now();
    let status = cluster
        .wait_exit(victim, Duration::from_secs(5))
        .await
        .expect("killed replica exits");
    assert_eq!(status.signal(), Some(9), "{status}");
    let old = lease(&cluster, run_id).await;
    assert_eq!(old.owner.as_deref(), Some(owner.as_str()), "{old:?}");
    let old_expiry = old.expires_ms.expect("a held lease expires");
    let old_epoch = old.epoch;

    // Adoption is the claim in the run row; `lease.acquired` is written with the
    // adopter's first step (below).
    let c = &cluster;
    let (adopter, new) = until("another replica claims the lease", DEADLINE, || {
        let owner = owner.clone();
        async move {
            let l = lease(c, run_id).await;
            match l.owner.clone() {
                Some(o) if o != owner && l.epoch > old_epoch => Some((o, l)),
                _ => None,
            }
        }
    })
    .await;
    let adoption = killed.elapsed();
    let bound = Duration::from_millis(TTL_MS + ADOPT_MS) + SCHEDULING_MARGIN;
    // The claim's own clock reading: a fresh lease expires TTL after it was taken.
    let claimed_ms = new.expires_ms.expect("a held lease expires") - TTL_MS as i64;
    eprintln!(
        "SIGKILL adoption: replica-{victim} killed; {adopter} claimed epoch {} (was {}) \
         {adoption:?} after the kill, {} ms after the old lease expired (bound {bound:?})",
        new.epoch,
        old.epoch,
        claimed_ms - old_expiry
    );
    assert!(
        claimed_ms > old_expiry,
        "the lease was taken before it expired: claimed at {claimed_ms}, expiry {old_expiry}"
    );
    assert!(
        adoption <= bound,
        "adoption took {adoption:?}, over TTL + adoption interval + margin = {bound:?}"
    );
    let adopter_index = index_of(&adopter);
    assert_ne!(adopter_index, victim);

    let survivor = &apis[adopter_index];
    survivor.wait_status(&run, "waiting").await;
    eprintln!(
        "SIGKILL adoption: the turn completed {:?} after the kill",
        killed.elapsed()
    );
    let events = survivor.events(&run).await;
    let n = cluster
        .check_run_invariants(run_id)
        .await
        .expect("invariants");
    assert_eq!(events.len() as i64, n, "the API serves every stored event");

    let acquired: Vec<&Value> = events
        .iter()
        .filter(|e| event_type(e) == "lease.acquired")
        .collect();
    let first = acquired.first().expect("the first owner's lease.acquired");
    assert_eq!(first["data"]["owner"], owner.as_str(), "{first}");
    assert_eq!(first["data"]["epoch"], old.epoch, "{first}");
    assert_eq!(first["data"]["reason"], "new", "{first}");
    let adopted = acquired
        .iter()
        .find(|e| e["data"]["owner"] == adopter.as_str())
        .unwrap_or_else(|| panic!("no lease.acquired by {adopter}: {events:#?}"));
    assert_eq!(adopted["data"]["reason"], "adopted", "{adopted}");
    assert_eq!(adopted["data"]["epoch"], new.epoch, "{adopted}");
    assert_eq!(writer(adopted), Some(adopter.as_str()), "{adopted}");
    let adopted_at = version(adopted);
    let event_lag = ms_between(killed_wall, recorded_at(adopted));
    eprintln!(
        "SIGKILL adoption: the adopter's lease.acquired (v{adopted_at}) was recorded \
         {event_lag} ms after the kill"
    );
    // A run taken over mid-turn is announced at once, not when its turn is answered.
    let event_bound = bound;
    assert!(
        event_lag <= event_bound.as_millis() as i64,
        "lease.acquired recorded {event_lag} ms after the kill, over {event_bound:?}"
    );

    // Nothing from the killed replica after the adopter's lease.acquired.
    for e in events.iter().filter(|e| version(e) > adopted_at) {
        assert_ne!(writer(e), Some(owner.as_str()), "a killed writer: {e}");
    }
    // At most one turn.started per lease holder (one turn: exactly one in all).
    let mut started: HashMap<&str, usize> = HashMap::new();
    for e in events.iter().filter(|e| event_type(e) == "turn.started") {
        *started.entry(writer(e).unwrap_or("?")).or_default() += 1;
    }
    assert!(started.values().all(|&c| c <= 1), "{started:?}");
    assert_eq!(started.values().sum::<usize>(), 1, "{started:?}");
    // The adopter completed the turn.
    let completed: Vec<&Value> = events
        .iter()
        .filter(|e| event_type(e) == "turn.completed")
        .collect();
    assert_eq!(completed.len(), 1, "{events:#?}");
    assert_eq!(writer(completed[0]), Some(adopter.as_str()));
    assert!(version(completed[0]) >= adopted_at);
    assert_eq!(survivor.summary(&run).await["status"], "waiting");
    cluster.stop().await.expect("stop");
}

#[tokio::test]
async fn sigterm_hands_fifty_runs_off_without_waiting_for_lease_expiry() {
    const RUNS: usize = 50;
    const REPLY_MS: u64 = 4000;
    const GRACE: Duration = Duration::from_secs(15);
    const WATCHED: usize = 3;
    let mut cluster = start_cluster(
        3,
        &[
            (LEASE_TTL_MS, "30000"),
            (RENEW_INTERVAL_MS, "5000"),
            // Neither expiry nor a periodic round can explain a fast hand-off.
            (ADOPT_INTERVAL_MS, "60000"),
            (SHUTDOWN_GRACE_SECS, "15"),
        ],
        None,
    )
    .await;
    let (_, key) = cluster.create_tenant("acme").await.expect("tenant");
    let apis: Vec<Api> = (0..3)
        .map(|i| Api::new(cluster.base_url(i), &key))
        .collect();
    let agent = apis[0].agent(&[("done", REPLY_MS, true)]).await;

    let creating = Instant::now();
    let runs: Vec<String> = futures::future::join_all(
        (0..RUNS).map(|i| apis[i % apis.len()].run(&agent, "work on this")),
    )
    .await;
    let run_ids: Vec<uuid::Uuid> = runs.iter().map(|r| uuid(r)).collect();
    let api0 = &apis[0];
    let runs_ref = &runs;
    until("every run running", DEADLINE, || async move {
        for r in runs_ref {
            if api0.summary(r).await["status"] != "running" {
                return None;
            }
        }
        Some(())
    })
    .await;
    eprintln!(
        "SIGTERM hand-off: {RUNS} runs created and running after {:?}",
        creating.elapsed()
    );

    // Who owns what, from the lease rows, cross-checked with the lease.acquired events.
    let leases = cluster.leases(&run_ids).await.expect("leases");
    let mut per_owner: BTreeMap<String, Vec<(uuid::Uuid, i64)>> = BTreeMap::new();
    for l in &leases {
        let owner = l.owner.clone().expect("a running run is leased");
        per_owner.entry(owner).or_default().push((l.run, l.epoch));
    }
    let (victim_id, victim_runs) = per_owner
        .iter()
        .max_by_key(|(_, runs)| runs.len())
        .map(|(o, r)| (o.clone(), r.clone()))
        .expect("owners");
    let counts: Vec<(&String, usize)> = per_owner.iter().map(|(o, r)| (o, r.len())).collect();
    eprintln!("SIGTERM hand-off: ownership {counts:?}; terminating {victim_id}");
    let victim = index_of(&victim_id);
    for (run, _) in &victim_runs {
        let rows = cluster.event_rows(*run).await.expect("rows");
        assert!(
            rows.iter().any(|r| r.event_type == "lease.acquired"
                && r.replica.as_deref() == Some(victim_id.as_str())),
            "{run}: no lease.acquired by its owner {victim_id}: {rows:?}"
        );
    }

    // SSE clients on the victim for a few of its runs: each reads there until the stream
    // ends, then resumes on another replica from its cursor.
    let mut watchers = Vec::new();
    let mut ready = Vec::new();
    for (k, (run, _)) in victim_runs.iter().take(WATCHED).enumerate() {
        let on = apis[victim].clone();
        let elsewhere = apis[(victim + 1 + k % 2) % apis.len()].clone();
        let run = run.to_string();
        let (tx, rx) = tokio::sync::oneshot::channel();
        ready.push(rx);
        watchers.push(tokio::spawn(async move {
            let mut tx = Some(tx);
            let mut got = Vec::new();
            let mut stream = on.sse(&run, 0).await.expect("a running run streams");
            while let Some(ev) = next_event_or_cut(&mut stream).await {
                let started = ev.event_type == "turn.started";
                got.push(ev);
                if started && let Some(tx) = tx.take() {
                    let _ = tx.send(());
                }
            }
            let on_victim = got.len();
            let cursor = got.last().map_or(0, |g| g.version);
            if let Some(mut resumed) = elsewhere.sse(&run, cursor).await {
                got.extend(read_until_end(&mut resumed).await);
            }
            (run, on_victim, got)
        }));
    }
    for rx in ready {
        tokio::time::timeout(DEADLINE, rx)
            .await
            .expect("the watchers see turn.started in time")
            .expect("a watcher's stream ended before turn.started");
    }

    cluster.sigterm(victim).expect("sigterm");
    let termed = Instant::now();
    let termed_wall = Utc::now();
    // Polls the victim's runs' lease rows until every one is claimed by another replica,
    // noting when each claim was first seen and when the victim exited.
    let mut claimed: HashMap<uuid::Uuid, (Duration, LeaseRow)> = HashMap::new();
    let mut exited_after = None;
    let ids: Vec<uuid::Uuid> = victim_runs.iter().map(|(r, _)| *r).collect();
    let epochs: HashMap<uuid::Uuid, i64> = victim_runs.iter().copied().collect();
    while claimed.len() < ids.len() || exited_after.is_none() {
        assert!(
            termed.elapsed() < DEADLINE,
            "after {DEADLINE:?}: {} of {} runs claimed, exited: {exited_after:?}",
            claimed.len(),
            ids.len()
        );
        for l in cluster.leases(&ids).await.expect("leases") {
            let taken = l
                .owner
                .as_deref()
                .is_some_and(|o| o != victim_id && l.epoch > epochs[&l.run]);
            if taken && !claimed.contains_key(&l.run) {
                claimed.insert(l.run, (termed.elapsed(), l));
            }
        }
        if exited_after.is_none() && !cluster.is_running(victim).expect("state") {
            exited_after = Some(termed.elapsed());
        }
        tokio::time::sleep(POLL).await;
    }
    let status = cluster
        .wait_exit(victim, GRACE)
        .await
        .expect("exited already");
    let exited_after = exited_after.expect("exit seen");
    eprintln!("SIGTERM hand-off: {victim_id} exited {status} {exited_after:?} after SIGTERM");
    assert!(status.success(), "clean exit: {status}");
    assert!(exited_after < GRACE, "exit took {exited_after:?}");
    // Its log says it handed every run off and asked the others to adopt at once.
    assert_eq!(
        log_count(&cluster, victim, "handed the run off"),
        victim_runs.len()
    );
    assert_eq!(
        log_count(
            &cluster,
            victim,
            "asking the other replicas to adopt at once"
        ),
        1
    );

    // Every run finishes its turn, wherever it went.
    let survivor = &apis[(victim + 1) % apis.len()];
    for r in &runs {
        survivor.wait_status(r, "completed").await;
    }

    let mut claim_ms = Vec::new();
    let mut event_ms = Vec::new();
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    let mut new_owners: BTreeMap<String, usize> = BTreeMap::new();
    for (run, old_epoch) in &victim_runs {
        let run_s = run.to_string();
        let events = survivor.events(&run_s).await;
        let released: Vec<&Value> = events
            .iter()
            .filter(|e| event_type(e) == "lease.released")
            .collect();
        assert_eq!(released.len(), 1, "{run}: {events:#?}");
        let rel = released[0];
        assert_eq!(rel["data"]["reason"], "drained", "{rel}");
        assert_eq!(rel["data"]["owner"], victim_id.as_str(), "{rel}");
        assert_eq!(rel["data"]["epoch"], *old_epoch, "{rel}");
        assert_eq!(writer(rel), Some(victim_id.as_str()), "{rel}");
        let rel_v = version(rel);
        let next = events
            .iter()
            .find(|e| version(e) > rel_v && event_type(e) == "lease.acquired")
            .unwrap_or_else(|| panic!("{run}: nobody took the run over: {events:#?}"));
        let new_owner = next["data"]["owner"].as_str().expect("owner");
        assert_ne!(new_owner, victim_id, "{next}");
        assert!(next["data"]["epoch"].as_i64() > Some(*old_epoch), "{next}");
        let (claim_after, row) = &claimed[run];
        assert_eq!(row.epoch, next["data"]["epoch"].as_i64().expect("epoch"));
        for e in events.iter().filter(|e| version(e) > rel_v) {
            assert_ne!(writer(e), Some(victim_id.as_str()), "{run}: {e}");
        }
        let turns: Vec<&Value> = events
            .iter()
            .filter(|e| event_type(e) == "turn.completed")
            .collect();
        assert_eq!(turns.len(), 1, "{run}: {events:#?}");
        assert_eq!(writer(turns[0]), Some(new_owner));
        assert_eq!(
            events.last().map(event_type),
            Some("run.completed"),
            "{run}"
        );
        assert_eq!(
            next["data"]["reason"], "handoff",
            "a drained run is a hand-off: {next}"
        );
        *reasons
            .entry(next["data"]["reason"].as_str().unwrap_or("?").to_string())
            .or_default() += 1;
        *new_owners.entry(new_owner.to_string()).or_default() += 1;
        claim_ms.push(claim_after.as_millis());
        event_ms.push(ms_between(termed_wall, recorded_at(next)).max(0) as u128);
    }
    for r in &run_ids {
        cluster.check_run_invariants(*r).await.expect("invariants");
    }
    claim_ms.sort_unstable();
    event_ms.sort_unstable();
    eprintln!(
        "SIGTERM hand-off of {} runs: SIGTERM -> claimed by another replica: \
         p50 {} ms, p99 {} ms, max {} ms; SIGTERM -> its lease.acquired recorded: \
         p50 {} ms, p99 {} ms; \
         new owners {new_owners:?}; lease.acquired reasons {reasons:?}",
        victim_runs.len(),
        quantile(&claim_ms, 0.5),
        quantile(&claim_ms, 0.99),
        claim_ms.last().copied().unwrap_or_default(),
        quantile(&event_ms, 0.5),
        quantile(&event_ms, 0.99),
    );
    // Only the drain and its control message can explain a claim well before the 30 s
    // TTL (and the 60 s adoption interval).
    let claim_p99 = Duration::from_millis(quantile(&claim_ms, 0.99) as u64);
    assert!(
        claim_p99 < Duration::from_secs(5),
        "claim p99 {claim_p99:?}"
    );
    // Announced as soon as it is claimed, far inside the 30 s TTL.
    let event_p99 = Duration::from_millis(quantile(&event_ms, 0.99) as u64);
    assert!(
        event_p99 < Duration::from_secs(5),
        "hand-off p99 {event_p99:?} (lease.acquired)"
    );

    for w in watchers {
        let (run, on_victim, got) = w.await.expect("watcher");
        eprintln!(
            "SIGTERM hand-off: SSE client of {run}: {on_victim} events from {victim_id}, \
             {} after resuming elsewhere",
            got.len() - on_victim
        );
        assert!(on_victim < got.len(), "{run}: never resumed elsewhere");
        assert_eq!(
            got.last().map(|g| g.event_type.as_str()),
            Some("run.completed")
        );
        assert_saw_the_stream(&cluster, uuid(&run), &got, "the resumed SSE client").await;
    }
    cluster.stop().await.expect("stop");
}

#[tokio::test]
async fn a_stopped_owner_is_fenced_after_its_lease_is_taken() {
    const TTL_MS: u64 = 1500;
    const ADOPT_MS: u64 = 200;
    const REPLY_MS: u64 = 2500;
    let mut cluster = start_cluster(
        2,
        &[
            (LEASE_TTL_MS, "1500"),
            (RENEW_INTERVAL_MS, "300"),
            (ADOPT_INTERVAL_MS, "200"),
        ],
        None,
    )
    .await;
    let (_, key) = cluster.create_tenant("acme").await.expect("tenant");
    let apis: Vec<Api> = (0..2)
        .map(|i| Api::new(cluster.base_url(i), &key))
        .collect();
    let agent = apis[0]
        .agent(&[("slow answer", REPLY_MS, false), ("quick", 50, true)])
        .await;
    let run = apis[0].run(&agent, "take your time").await;
    let run_id = uuid(&run);

    let c = &cluster;
    let owner = until("turn.started", DEADLINE, || async move {
        let rows = c.event_rows(run_id).await.expect("rows");
        rows.into_iter()
            .find(|r| r.event_type == "turn.started")
            .map(|r| r.replica.expect("turn.started names its writer"))
    })
    .await;
    let started = Instant::now();
    let stopped = index_of(&owner);
    let other = 1 - stopped;
    cluster.sigstop(stopped).expect("sigstop");
    let stopped_at = Instant::now();
    let old = lease(&cluster, run_id).await;
    assert_eq!(old.owner.as_deref(), Some(owner.as_str()), "{old:?}");
    let old_epoch = old.epoch;

    let c = &cluster;
    let (adopter, new) = until("the other replica claims the lease", DEADLINE, || {
        let owner = owner.clone();
        async move {
            let l = lease(c, run_id).await;
            match l.owner.clone() {
                Some(o) if o != owner && l.epoch > old_epoch => Some((o, l)),
                _ => None,
            }
        }
    })
    .await;
    let claimed_after = stopped_at.elapsed();
    eprintln!(
        "SIGSTOP: {adopter} claimed epoch {} (was {}) {claimed_after:?} after the SIGSTOP",
        new.epoch, old.epoch
    );
    assert_eq!(index_of(&adopter), other);
    let bound = Duration::from_millis(TTL_MS + ADOPT_MS) + SCHEDULING_MARGIN;
    assert!(claimed_after <= bound, "{claimed_after:?} > {bound:?}");

    // Not a synchronisation: the stopped driver's reply falls due REPLY_MS after its
    // turn started; keeping it stopped past that makes it go straight for the append of
    // the answer when it wakes, while the adopter still holds the lease mid-turn.
    tokio::time::sleep_until((started + Duration::from_millis(REPLY_MS + 200)).into()).await;
    let at_wake = lease(&cluster, run_id).await;
    eprintln!(
        "SIGSTOP: at SIGCONT ({:?} stopped) the lease is {:?} epoch {}",
        stopped_at.elapsed(),
        at_wake.owner,
        at_wake.epoch
    );
    cluster.sigcont(stopped).expect("sigcont");

    apis[other].wait_status(&run, "waiting").await;
    let events = apis[other].events(&run).await;
    let adopted = events
        .iter()
        .find(|e| event_type(e) == "lease.acquired" && e["data"]["owner"] == adopter.as_str())
        .unwrap_or_else(|| panic!("no lease.acquired by {adopter}: {events:#?}"));
    assert_eq!(adopted["data"]["reason"], "adopted", "{adopted}");
    assert_eq!(adopted["data"]["epoch"], new.epoch, "{adopted}");
    let adopted_at = version(adopted);
    for e in events.iter().filter(|e| version(e) > adopted_at) {
        assert_ne!(
            writer(e),
            Some(owner.as_str()),
            "a stale writer landed: {e}"
        );
    }
    let completed: Vec<&Value> = events
        .iter()
        .filter(|e| event_type(e) == "turn.completed")
        .collect();
    assert_eq!(completed.len(), 1, "{events:#?}");
    assert_eq!(writer(completed[0]), Some(adopter.as_str()));
    cluster
        .check_run_invariants(run_id)
        .await
        .expect("invariants");

    // The woken replica noticed: its appends were fenced, or its keeper found the lease
    // gone first and stopped the driver before it tried.
    let c = &cluster;
    let (fenced, keeper) = until(
        "the woken replica to notice",
        Duration::from_secs(5),
        || async move {
            let fenced = log_count(c, stopped, FENCED_LOG);
            let keeper = log_count(c, stopped, KEEPER_LOST_LOG);
            (fenced + keeper > 0).then_some((fenced, keeper))
        },
    )
    .await;
    let driver_lost = log_count(&cluster, stopped, DRIVER_LOST_LOG);
    eprintln!(
        "SIGSTOP: after SIGCONT {owner} logged {fenced} fenced append(s), {keeper} keeper \
         loss warning(s), {driver_lost} driver stop(s) on a lost lease"
    );

    // The woken replica serves and drives again, under a new lease.
    let woken = &apis[stopped];
    let (code, body) = woken.get("/readyz").await;
    assert_eq!(code, 200, "{body}");
    woken.message_when_idle(&run, "one more").await;
    woken.wait_status(&run, "completed").await;
    let events = woken.events(&run).await;
    let last_lease = events
        .iter()
        .rfind(|e| event_type(e) == "lease.acquired")
        .expect("lease.acquired");
    assert!(
        last_lease["data"]["epoch"].as_i64() > Some(new.epoch),
        "{last_lease}"
    );
    cluster
        .check_run_invariants(run_id)
        .await
        .expect("invariants");
    cluster.stop().await.expect("stop");
}

#[tokio::test]
async fn nats_restart_during_a_run_loses_no_sse_event() {
    const TURNS: usize = 6;
    const RESYNC: Duration = Duration::from_millis(3000);
    let mut nats = TestNats::start().await.expect("nats-server");
    let cluster = start_cluster(
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
    let (_, key) = cluster.create_tenant("acme").await.expect("tenant");
    let (a, b) = (
        Api::new(cluster.base_url(0), &key),
        Api::new(cluster.base_url(1), &key),
    );
    let replies: Vec<(String, u64, bool)> = (1..=TURNS)
        .map(|i| (format!("reply {i}"), 200, i == TURNS))
        .collect();
    let replies: Vec<(&str, u64, bool)> = replies
        .iter()
        .map(|(c, d, e)| (c.as_str(), *d, *e))
        .collect();
    let agent = a.agent(&replies).await;
    let run = a.run(&agent, "message 1").await;
    let run_id = uuid(&run);

    // B streams from the start until the run ends; what it got is shared with the test.
    let seen: Arc<Mutex<Vec<Got>>> = Arc::default();
    let mut stream = b.sse(&run, 0).await.expect("stream");
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
    let during_outage = a.summary(&run).await["version"].as_i64().expect("version");
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
