//! The replica's background loops: the lease keeper (one renewal statement per interval
//! for every lease held) and the adopter (claims runs with work and no live lease).

use crate::driver;
use crate::lease::Lease;
use crate::shared::Shared;
use baton_core::StoreError;
use baton_core::ports::{Control, Fence};
use baton_events::LeaseReason;
use std::collections::HashSet;
use std::sync::Arc;

/// How often a draining keeper looks whether its drivers are all gone.
const DRAIN_POLL: std::time::Duration = std::time::Duration::from_millis(20);

/// Renews this replica's leases every interval until shutdown, and then until the last
/// driver has handed its run off. Drivers whose lease is
/// missing from the answer were taken over and are stopped; leases in the answer that no
/// driver or parked run here holds (orphaned by a driver that stopped) are released and
/// adopted again, so no run stays owned by nobody. Parked runs' leases are released at
/// shutdown.
pub(crate) fn spawn_keeper(shared: Arc<Shared>) {
    shared.tasks.clone().spawn(async move {
        let keeper = &shared;
        let mut ticks = tokio::time::interval(keeper.opts.renew_every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await;
        // While draining, renewal goes on until the last driver is gone: one still in a
        // model or tool call keeps its lease, so no replica adopts its run mid-call (and
        // holds a mutation that was about to succeed as uncertain).
        let mut draining = false;
        loop {
            tokio::select! {
                () = keeper.shutdown.cancelled(), if !draining => draining = true,
                _ = ticks.tick() => renew(&shared).await,
                () = tokio::time::sleep(DRAIN_POLL), if draining => {}
            }
            if draining && keeper.mailboxes.active() == 0 {
                break;
            }
        }
        for (run, lease) in keeper.mailboxes.take_parked() {
            if let Ok(true) = keeper
                .ports
                .leases
                .release_lease(lease.tenant, run, &lease.fence)
                .await
            {
                keeper.count_hand_off();
            }
        }
    });
}

async fn renew(shared: &Arc<Shared>) {
    // A renewal slower than this would let the leases it extends expire meanwhile.
    let budget = shared
        .opts
        .lease_ttl
        .saturating_sub(shared.opts.renew_every);
    let started = std::time::Instant::now();
    let now = shared.ports.clock.now();
    let renewed = tokio::time::timeout(
        budget,
        shared
            .ports
            .leases
            .renew_leases(&shared.opts.replica, shared.opts.lease_ttl, now),
    )
    .await;
    let held = match renewed {
        Ok(Ok(held)) => held,
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "lease renewal failed; retrying next interval");
            return;
        }
        Err(_) => {
            tracing::error!(?budget, "lease renewal timed out; leases may expire");
            return;
        }
    };
    metrics::gauge!("baton_leases_held").set(held.len() as f64);
    let runs: HashSet<_> = held.iter().map(|h| h.run).collect();
    let lost = shared.mailboxes.keep_only(&runs, started);
    if lost > 0 {
        metrics::counter!("baton_leases_lost_total").increment(lost as u64);
        tracing::warn!(lost, "leases were taken over; stopping their drivers");
    }
    // Under the claim lock, so a run the adopter just claimed but has not handed to a
    // driver yet is not mistaken for an orphan.
    let _claiming = shared.claim_lock.lock().await;
    let mut orphans = 0;
    for h in held {
        if shared.mailboxes.has_driver(h.run) || shared.mailboxes.is_parked(h.run) {
            continue;
        }
        let fence = Fence {
            owner: shared.opts.replica.clone(),
            epoch: h.epoch,
        };
        if let Ok(true) = shared
            .ports
            .leases
            .release_lease(h.tenant, h.run, &fence)
            .await
        {
            orphans += 1;
        }
    }
    drop(_claiming);
    if orphans > 0 {
        tracing::warn!(
            orphans,
            "released leases no driver held; adopting them again"
        );
        if let Err(e) = adopt(shared).await {
            tracing::warn!(error = %e, "adoption after releasing orphans failed");
        }
    }
}

/// Adopts every interval until shutdown (the first round runs in `Engine::start`).
pub(crate) fn spawn_adopter(shared: Arc<Shared>) {
    shared.tasks.clone().spawn(async move {
        loop {
            tokio::select! {
                () = shared.shutdown.cancelled() => return,
                () = tokio::time::sleep(shared.opts.adopt_every) => {}
            }
            if let Err(e) = adopt(&shared).await {
                tracing::warn!(error = %e, "adoption round failed; retrying");
            }
        }
    });
}

/// Adopts until a round claims less than a full batch (so a drained replica's 1,000 runs
/// do not wait for 10 intervals); returns how many runs it claimed.
pub(crate) async fn adopt(shared: &Arc<Shared>) -> Result<usize, StoreError> {
    let batch = shared.opts.adopt_batch as usize;
    let mut total = 0;
    for _ in 0..MAX_ROUNDS {
        let n = adopt_batch(shared).await?;
        total += n;
        if n < batch {
            break;
        }
        tokio::task::yield_now().await;
    }
    Ok(total)
}

/// Full batches one adoption may chain before leaving the rest to the next interval.
const MAX_ROUNDS: usize = 100;

/// One batch: claims runs with work and no live lease and starts their drivers.
async fn adopt_batch(shared: &Arc<Shared>) -> Result<usize, StoreError> {
    if shared.shutdown.is_cancelled() {
        return Ok(0);
    }
    let _claiming = shared.claim_lock.lock().await;
    let claimed = shared
        .ports
        .leases
        .claim_runs(
            &shared.opts.replica,
            shared.opts.lease_ttl,
            shared.ports.clock.now(),
            shared.opts.adopt_batch,
            None,
        )
        .await?;
    let n = claimed.len();
    for c in claimed {
        if c.reason == LeaseReason::Adopted {
            tracing::info!(run_id = %c.run, epoch = c.epoch, "adopting a run whose lease expired");
        }
        let lease = Lease::claimed(&shared.opts.replica, &c);
        if shared.mailboxes.is_parked(c.run) {
            // Its old lease expired; hold the new one so the run stays parked here.
            shared.mailboxes.repark(c.run, lease);
            continue;
        }
        driver::spawn(shared, c.tenant, c.run, Some(lease), None);
    }
    Ok(n)
}

/// Acts on other replicas' control messages until shutdown: a wake reaches this
/// replica's driver of the run, or its parked run, if it has either (the replica that
/// took the command starts a driver itself when nobody drives the run); an adopt
/// request runs an adoption round.
pub(crate) fn spawn_listener(
    shared: Arc<Shared>,
    mut control: tokio::sync::mpsc::Receiver<baton_core::ports::ControlMessage>,
) {
    shared.tasks.clone().spawn(async move {
        loop {
            let msg = tokio::select! {
                () = shared.shutdown.cancelled() => return,
                msg = control.recv() => match msg {
                    Some(msg) => msg,
                    None => return,
                },
            };
            if msg.from == shared.opts.replica {
                continue;
            }
            match msg.control {
                // A run parked here is freed by a command taken anywhere.
                Control::Wake { tenant, run } => {
                    driver::wake_here(&shared, tenant, run, false, None);
                }
                Control::Adopt => {
                    if let Err(e) = adopt(&shared).await {
                        tracing::warn!(error = %e, "adoption on request failed");
                    }
                }
                // Ended credentials end event streams; drivers have nothing to do.
                Control::KeyRevoked { .. }
                | Control::SessionEnded { .. }
                | Control::MemberRemoved { .. } => {}
            }
        }
    });
}
