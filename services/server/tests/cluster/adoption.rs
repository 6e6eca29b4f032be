//! SIGKILL of a run's owner mid-turn: another replica adopts the run within the lease TTL
//! plus one adoption interval, announces it at once, and completes the turn alone.

use crate::support::{
    DEADLINE, FAST_LEASES, SCHEDULING_MARGIN, claimed_from, event_type, index_of, lease,
    ms_between, recorded_at, start_cluster, turn_owner, until, uuid, version, writer,
};
use chrono::Utc;
use serde_json::Value;
use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

#[tokio::test]
async fn sigkill_of_the_owner_mid_turn_is_adopted_within_ttl_plus_an_adoption_interval() {
    const TTL_MS: u64 = 2000;
    const ADOPT_MS: u64 = 250;
    const REPLY_MS: u64 = 3000;
    let (mut cluster, apis) = start_cluster(3, &FAST_LEASES, None).await;
    let agent = apis[0].agent(&[("slow answer", REPLY_MS, false)]).await;
    let run = apis[0].run(&agent, Some("take your time")).await;
    let run_id = uuid(&run);

    // Whoever wrote `turn.started` owns the run (its `lease.acquired` went with it).
    let owner = turn_owner(&cluster, run_id).await;
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
    let (adopter, new) = claimed_from(
        &cluster,
        run_id,
        &owner,
        old_epoch,
        "another replica claims the lease",
    )
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
    // The settled turn's checkpoint is appended just after: count once it is in.
    until("the turn's checkpoint", DEADLINE, || async {
        let events = survivor.events(&run).await;
        (events.last().map(event_type) == Some("checkpoint.saved")).then_some(())
    })
    .await;
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
