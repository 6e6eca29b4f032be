//! The drivers of this process, by run: wake-up counts (so a driver never exits over a
//! wake-up it has not seen), a notifier that interrupts their waits, whether each holds
//! its run's lease (for the keeper), and the runs parked after an error that retrying
//! cannot fix.

use crate::lease::Lease;
use baton_core::RunId;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;
use tokio::sync::Notify;

#[derive(Default)]
struct Mailbox {
    wakes: u64,
    notify: Arc<Notify>,
    /// Since when the driver holds the run's lease, if it does.
    leased: Option<Instant>,
    /// The keeper found the lease gone: the driver must stop.
    lost: bool,
    /// A lease claimed for this run by the adopter while the driver was running.
    offered: Option<Lease>,
}

#[derive(Default)]
pub(crate) struct Mailboxes {
    active: Mutex<HashMap<RunId, Mailbox>>,
    /// Parked runs and the lease they still hold, kept (and renewed) so other replicas
    /// of this build do not claim and park them in turn; a drain or a client command
    /// frees them.
    parked: Mutex<HashMap<RunId, Option<Lease>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding these locks cannot leave the maps inconsistent.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Mailboxes {
    /// Registers a new driver and returns its notifier; `None` when the run has a driver
    /// already, which then gets `lease` (if any) and a wake-up, atomically, so a lease
    /// claimed by the adopter is never lost to a driver deciding to exit.
    pub(crate) fn open(&self, run: RunId, lease: Option<Lease>) -> Option<Arc<Notify>> {
        let mut active = lock(&self.active);
        if let Some(m) = active.get_mut(&run) {
            if lease.is_some() {
                m.offered = lease;
                m.wakes += 1;
                m.notify.notify_one();
            }
            return None;
        }
        let mailbox = Mailbox {
            leased: lease.is_some().then(Instant::now),
            ..Mailbox::default()
        };
        let notify = mailbox.notify.clone();
        active.insert(run, mailbox);
        Some(notify)
    }

    /// A lease the adopter handed to this run's running driver, if any.
    pub(crate) fn take_offered(&self, run: RunId) -> Option<Lease> {
        let mut active = lock(&self.active);
        let m = active.get_mut(&run)?;
        let lease = m.offered.take();
        if lease.is_some() {
            m.leased = Some(Instant::now());
        }
        lease
    }

    /// Wakes the run's driver; false when it has none.
    pub(crate) fn wake(&self, run: RunId) -> bool {
        match lock(&self.active).get_mut(&run) {
            Some(m) => {
                m.wakes += 1;
                m.notify.notify_one();
                true
            }
            None => false,
        }
    }

    pub(crate) fn active(&self) -> usize {
        lock(&self.active).len()
    }

    pub(crate) fn wakes(&self, run: RunId) -> u64 {
        lock(&self.active).get(&run).map_or(0, |m| m.wakes)
    }

    /// Records whether the driver holds its lease; either way a previous loss is done
    /// with (a new lease is not lost).
    pub(crate) fn set_leased(&self, run: RunId, leased: bool) {
        if let Some(m) = lock(&self.active).get_mut(&run) {
            m.leased = leased.then(Instant::now);
            m.lost = false;
        }
    }

    /// Whether the run has a driver here.
    pub(crate) fn has_driver(&self, run: RunId) -> bool {
        lock(&self.active).contains_key(&run)
    }

    /// Whether the keeper found the driver's lease gone.
    pub(crate) fn lost(&self, run: RunId) -> bool {
        lock(&self.active).get(&run).is_some_and(|m| m.lost)
    }

    /// Marks every driver that held its lease before `renewed_at` (when the renewal that
    /// answered `held` started) but is missing from `held` as lost, and wakes it; a lease
    /// taken after the renewal started cannot be in its answer. Returns how many were lost.
    pub(crate) fn keep_only(&self, held: &HashSet<RunId>, renewed_at: Instant) -> usize {
        let mut lost = 0;
        for (run, m) in lock(&self.active).iter_mut() {
            if m.leased.is_some_and(|t| t < renewed_at) && !held.contains(run) {
                m.lost = true;
                m.notify.notify_one();
                lost += 1;
            }
        }
        lost
    }

    /// Removes the driver whatever wake-ups it was sent.
    pub(crate) fn forget(&self, run: RunId) {
        lock(&self.active).remove(&run);
    }

    /// Removes the driver unless a wake-up arrived after `seen`; whether it may exit.
    pub(crate) fn retire(&self, run: RunId, seen: u64) -> bool {
        let mut active = lock(&self.active);
        match active.get(&run) {
            Some(m) if m.wakes != seen => false,
            _ => {
                active.remove(&run);
                true
            }
        }
    }

    /// Moves the driver's run to the parked set, atomically, unless a wake-up arrived
    /// after `seen` (then the driver should look again); whether it parked.
    pub(crate) fn park(&self, run: RunId, lease: Option<Lease>, seen: u64) -> bool {
        let mut active = lock(&self.active);
        if active.get(&run).is_some_and(|m| m.wakes != seen) {
            return false;
        }
        active.remove(&run);
        lock(&self.parked).insert(run, lease);
        true
    }

    /// Parks a run claimed by the adopter while already parked here (its old lease had
    /// expired), keeping the new lease.
    pub(crate) fn repark(&self, run: RunId, lease: Lease) {
        lock(&self.parked).insert(run, Some(lease));
    }

    /// Un-parks the run, returning the lease it held, if any.
    pub(crate) fn unpark(&self, run: RunId) -> Option<Lease> {
        lock(&self.parked).remove(&run).flatten()
    }

    pub(crate) fn is_parked(&self, run: RunId) -> bool {
        lock(&self.parked).contains_key(&run)
    }

    /// Every parked run's lease, emptying the parked set (for the drain).
    pub(crate) fn take_parked(&self) -> Vec<(RunId, Lease)> {
        lock(&self.parked)
            .drain()
            .filter_map(|(run, lease)| lease.map(|l| (run, l)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_leases_held_before_a_renewal_can_be_lost_by_it() {
        let boxes = Mailboxes::default();
        let (old, new, idle) = (RunId::new(), RunId::new(), RunId::new());
        for run in [old, new, idle] {
            assert!(boxes.open(run, None).is_some());
        }
        boxes.set_leased(old, true);
        let renewal_started = Instant::now();
        boxes.set_leased(new, true);
        // The renewal's answer holds neither: `old` was taken over; `new` was claimed
        // after the renewal statement ran, so its absence means nothing.
        assert_eq!(boxes.keep_only(&HashSet::new(), renewal_started), 1);
        assert!(boxes.lost(old));
        assert!(!boxes.lost(new));
        assert!(
            !boxes.lost(idle),
            "a driver without a lease cannot lose one"
        );
        assert!(
            boxes.open(old, None).is_none(),
            "still registered until it stops"
        );
    }
}
