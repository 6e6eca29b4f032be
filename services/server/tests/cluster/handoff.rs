//! SIGTERM of the replica owning the most of 50 running runs: it drains, hands every run
//! off and asks the others to adopt at once, so each is claimed and announced long before
//! its lease would expire, and SSE clients on it resume elsewhere without loss.

use crate::support::{
    ADOPT_INTERVAL_MS, DEADLINE, LEASE_TTL_MS, POLL, RENEW_INTERVAL_MS, assert_saw_the_stream,
    event_type, index_of, log_count, ms_between, next_event_or_cut, read_until_end, recorded_at,
    start_cluster, until, uuid, version, writer,
};
use baton_testkit::replicas::LeaseRow;
use chrono::Utc;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

const SHUTDOWN_GRACE_SECS: &str = "BATON_HTTP__SHUTDOWN_GRACE_SECS";

#[tokio::test]
async fn sigterm_hands_fifty_runs_off_without_waiting_for_lease_expiry() {
    const RUNS: usize = 50;
    // Long enough that every run is still in its turn at the SIGTERM on a loaded machine;
    // the adopters then answer within the streams' deadline.
    const REPLY_MS: u64 = 10_000;
    const GRACE: Duration = Duration::from_secs(15);
    const WATCHED: usize = 3;
    let (mut cluster, apis) = start_cluster(
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
    let agent = apis[0].agent(&[("done", REPLY_MS, true)]).await;

    let creating = Instant::now();
    let runs: Vec<String> = futures::future::join_all(
        (0..RUNS).map(|i| apis[i % apis.len()].run(&agent, Some("work on this"))),
    )
    .await;
    let run_ids: Vec<uuid::Uuid> = runs.iter().map(|r| uuid(r)).collect();
    let api0 = &apis[0];
    let runs_ref = &runs;
    // Each run seen running once is done with: one slow pass need not catch them all.
    let seen = std::sync::Mutex::new(std::collections::HashSet::new());
    let seen_ref = &seen;
    until("every run running", DEADLINE, || async move {
        for r in runs_ref {
            if seen_ref.lock().expect("seen").contains(r) {
                continue;
            }
            if api0.summary(r).await["status"] == "running" {
                seen_ref.lock().expect("seen").insert(r.clone());
            }
        }
        (seen_ref.lock().expect("seen").len() == runs_ref.len()).then_some(())
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
            let mut stream = on.sse(&run, None).await.expect("a running run streams");
            while let Some(ev) = next_event_or_cut(&mut stream).await {
                let started = ev.event_type == "turn.started";
                got.push(ev);
                if started && let Some(tx) = tx.take() {
                    let _ = tx.send(());
                }
            }
            let on_victim = got.len();
            let cursor = got.last().map_or(0, |g| g.version);
            if let Some(mut resumed) = elsewhere.sse(&run, (cursor > 0).then_some(cursor)).await {
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

/// The `q` quantile (nearest rank) of sorted values.
fn quantile(sorted: &[u128], q: f64) -> u128 {
    assert!(!sorted.is_empty());
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}
