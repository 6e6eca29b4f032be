//! The replica's background loops: the lease keeper (one renewal statement per interval
//! for every lease held) and the adopter (claims runs with work and no live lease).

use crate::driver::Lease;
use crate::{Engine, Inner};
use baton_core::StoreError;
use baton_core::ports::{Control, Fence};
use baton_events::LeaseReason;
use std::collections::HashSet;
use std::sync::Arc;

/// Renews this replica's leases every interval until shutdown; drivers whose lease is
/// missing from the answer were taken over and are stopped. Parked runs' leases are
/// released at shutdown.
pub(crate) fn spawn_keeper(inner: Arc<Inner>) {
    let keeper = inner.clone();
    inner.tasks.spawn(async move {
        loop {
            tokio::select! {
                () = keeper.shutdown.cancelled() => break,
                () = tokio::time::sleep(keeper.opts.renew_every) => {}
            }
            renew(&keeper).await;
        }
        for (run, lease) in keeper.mailboxes.take_parked() {
            let _ = keeper
                .leases
                .release_lease(lease.tenant, run, &lease.fence)
                .await;
        }
    });
}

async fn renew(inner: &Inner) {
    let started = std::time::Instant::now();
    let now = inner.clock.now();
    match inner
        .leases
        .renew_leases(&inner.opts.replica, inner.opts.lease_ttl, now)
        .await
    {
        Ok(held) => {
            metrics::gauge!("baton_leases_held").set(held.len() as f64);
            let held: HashSet<_> = held.into_iter().collect();
            let lost = inner.mailboxes.keep_only(&held, started);
            if lost > 0 {
                metrics::counter!("baton_leases_lost_total").increment(lost as u64);
                tracing::warn!(lost, "leases were taken over; stopping their drivers");
            }
        }
        Err(e) => tracing::warn!(error = %e, "lease renewal failed; retrying next interval"),
    }
}

/// Adopts every interval until shutdown (the first round runs in `Engine::start`).
pub(crate) fn spawn_adopter(engine: Engine) {
    let inner = engine.inner.clone();
    inner.tasks.spawn(async move {
        loop {
            tokio::select! {
                () = engine.inner.shutdown.cancelled() => return,
                () = tokio::time::sleep(engine.inner.opts.adopt_every) => {}
            }
            if let Err(e) = adopt(&engine).await {
                tracing::warn!(error = %e, "adoption round failed; retrying");
            }
        }
    });
}

/// One adoption round; returns how many runs it claimed.
pub(crate) async fn adopt(engine: &Engine) -> Result<usize, StoreError> {
    let inner = &engine.inner;
    if inner.shutdown.is_cancelled() {
        return Ok(0);
    }
    let claimed = inner
        .leases
        .claim_runs(
            &inner.opts.replica,
            inner.opts.lease_ttl,
            inner.clock.now(),
            inner.opts.adopt_batch,
            None,
        )
        .await?;
    let n = claimed.len();
    for c in claimed {
        let reason = c.reason;
        count_claim(reason);
        if reason == LeaseReason::Adopted {
            tracing::info!(run_id = %c.run, epoch = c.epoch, "adopting a run whose lease expired");
        }
        let lease = Lease {
            tenant: c.tenant,
            fence: Fence {
                owner: inner.opts.replica.clone(),
                epoch: c.epoch,
            },
            announced: false,
            reason,
        };
        if inner.mailboxes.is_parked(c.run) {
            // Its old lease expired; hold the new one so the run stays parked here.
            inner.mailboxes.park(c.run, Some(lease));
            continue;
        }
        engine.spawn_driver(c.tenant, c.run, Some(lease));
    }
    Ok(n)
}

/// Acts on other replicas' control messages until shutdown: a wake reaches this
/// replica's driver of the run, if it has one (the replica that took the command starts
/// a driver itself when nobody drives the run); an adopt request runs an adoption round.
pub(crate) fn spawn_listener(
    engine: Engine,
    mut control: tokio::sync::mpsc::Receiver<baton_core::ports::ControlMessage>,
) {
    let inner = engine.inner.clone();
    inner.tasks.spawn(async move {
        loop {
            let msg = tokio::select! {
                () = engine.inner.shutdown.cancelled() => return,
                msg = control.recv() => match msg {
                    Some(msg) => msg,
                    None => return,
                },
            };
            if msg.from == engine.inner.opts.replica {
                continue;
            }
            match msg.control {
                Control::Wake { run, .. } => {
                    engine.inner.mailboxes.wake(run);
                }
                Control::Adopt => {
                    if let Err(e) = adopt(&engine).await {
                        tracing::warn!(error = %e, "adoption on request failed");
                    }
                }
            }
        }
    });
}

/// Counts a lease claim by why it was taken.
pub(crate) fn count_claim(reason: LeaseReason) {
    let reason = match reason {
        LeaseReason::New => "new",
        LeaseReason::Adopted => "adopted",
        LeaseReason::Handoff => "handoff",
    };
    metrics::counter!("baton_lease_claims_total", "reason" => reason).increment(1);
}
