//! SIGSTOP of a run's owner past its lease TTL, then SIGCONT: the other replica takes the
//! lease, the woken one's stale appends are fenced (or its keeper stops the driver first),
//! and it serves and drives again under a new lease.

use crate::support::{
    ADOPT_INTERVAL_MS, LEASE_TTL_MS, RENEW_INTERVAL_MS, SCHEDULING_MARGIN, claimed_from,
    event_type, index_of, lease, log_count, start_cluster, turn_owner, until, uuid, version,
    writer,
};
use serde_json::Value;
use std::time::{Duration, Instant};

/// What the engine logs when an append of a stale driver is fenced.
const FENCED_LOG: &str = "fenced: another replica owns this run now; stopping";
/// What the keeper logs when a renewal shows leases it no longer holds.
const KEEPER_LOST_LOG: &str = "leases were taken over; stopping their drivers";
/// What a driver logs when it stops because the keeper found its lease gone.
const DRIVER_LOST_LOG: &str = "the run's lease was taken over; stopping";

#[tokio::test]
async fn a_stopped_owner_is_fenced_after_its_lease_is_taken() {
    const TTL_MS: u64 = 1500;
    const ADOPT_MS: u64 = 200;
    const REPLY_MS: u64 = 2500;
    let (mut cluster, apis) = start_cluster(
        2,
        &[
            (LEASE_TTL_MS, "1500"),
            (RENEW_INTERVAL_MS, "300"),
            (ADOPT_INTERVAL_MS, "200"),
        ],
        None,
    )
    .await;
    let agent = apis[0]
        .agent(&[("slow answer", REPLY_MS, false), ("quick", 50, true)])
        .await;
    let run = apis[0].run(&agent, Some("take your time")).await;
    let run_id = uuid(&run);

    let owner = turn_owner(&cluster, run_id).await;
    let started = Instant::now();
    let stopped = index_of(&owner);
    let other = 1 - stopped;
    cluster.sigstop(stopped).expect("sigstop");
    let stopped_at = Instant::now();
    let old = lease(&cluster, run_id).await;
    assert_eq!(old.owner.as_deref(), Some(owner.as_str()), "{old:?}");
    let old_epoch = old.epoch;

    let (adopter, new) = claimed_from(
        &cluster,
        run_id,
        &owner,
        old_epoch,
        "the other replica claims the lease",
    )
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
    let r = woken.get("/readyz").await;
    assert_eq!(r.status, 200, "{}", r.body);
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
