//! A driver's hold on its run's stream: the engine state folded from the run's events
//! (restored from a checkpoint first), the lease its writes carry, the results it made
//! but could not write yet, and the one fenced, optimistic append every engine write
//! goes through. It decides nothing.

use crate::checkpoint;
use crate::lease::Lease;
use crate::outcome::{Next, StepError};
use crate::queue;
use crate::shared::Shared;
use crate::state::RunState;
use baton_core::model::RunSummary;
use baton_core::ports::{AppendOutcome, AppendRequest, Release};
use baton_core::{RunId, StoreError, TenantId};
use baton_events::{
    Decoded, Envelope, EventMeta, LeaseAcquired, NewEvent, ReceiptId, RunEvent, ToolResult,
};
use std::collections::HashMap;
use std::sync::Arc;

/// How often one engine write is made again on top of client events that leave its step
/// valid, before the driver reads the run again anyway.
const MAX_REAPPENDS: usize = 8;
/// Most client events one re-append looks past.
const REAPPEND_SCAN: u32 = 64;

/// What an exact append came to.
pub(crate) enum Landed {
    Written,
    /// Client events moved the run to this version first.
    Moved(i64),
    /// Not written, and not to be tried again: the lease is gone, or the version moved
    /// back (a deleted run).
    NotWritten,
}

/// Whether `events` are a stream from its first event to `version`, every one of them.
fn is_whole_stream(version: i64, events: &[Envelope]) -> bool {
    !events.is_empty()
        && events.len() as i64 == version
        && events
            .iter()
            .enumerate()
            .all(|(i, e)| e.version == i as i64 + 1)
}

pub(crate) struct RunStream {
    pub(crate) shared: Arc<Shared>,
    pub(crate) tenant: TenantId,
    pub(crate) run: RunId,
    /// The run's lease, while this driver holds it.
    pub(crate) lease: Option<Lease>,
    /// The run's state as of `state.version`, folded from its events.
    pub(crate) state: RunState,
    /// Results of calls this driver made whose append has not succeeded yet: recorded
    /// as they are rather than treated as interrupted calls.
    pub(crate) unsaved: HashMap<ReceiptId, ToolResult>,
    /// The state was started from the newest usable checkpoint (or found none).
    restored: bool,
    /// The run as this driver's last append left it, and the run's wake-ups counted
    /// before that append was sent: the next step may start from it instead of reading
    /// the run again ([`Self::take_landed`]).
    landed: Option<(RunSummary, u64)>,
}

impl RunStream {
    pub(crate) fn new(
        shared: Arc<Shared>,
        tenant: TenantId,
        run: RunId,
        lease: Option<Lease>,
    ) -> Self {
        Self {
            shared,
            tenant,
            run,
            lease,
            state: RunState::default(),
            unsaved: HashMap::new(),
            restored: false,
            landed: None,
        }
    }

    /// The run as this driver's last append left it, if nothing has woken the driver
    /// since before that append (`seen`, the wake-ups counted now, is what they were
    /// then). A command commits before it wakes the driver, so one committed before the
    /// append made that append conflict, and one committed after it has not woken the
    /// driver yet: its wake-up is still to come, and keeps the driver from retiring on
    /// this view. Either way the run read now would say nothing more.
    pub(crate) fn take_landed(&mut self, seen: u64) -> Option<RunSummary> {
        match self.landed.take() {
            Some((run, wakes)) if wakes == seen => Some(run),
            _ => None,
        }
    }

    /// Gives a new driver (nothing folded yet) the run as the append that woke it left
    /// it, with the run's wake-ups counted when it was handed over: the first step starts
    /// from it as from the driver's own append ([`Self::take_landed`]). When `events`,
    /// what that append wrote, are the whole stream (a run just created), they are the
    /// state: folded as written, with no checkpoint to look for and nothing to read.
    pub(crate) fn start_from(&mut self, run: RunSummary, events: &[Envelope], wakes: u64) {
        if is_whole_stream(run.version, events) {
            let mut state = RunState::default();
            if state.fold(events).is_ok() {
                self.state = state;
                self.restored = true;
            }
        }
        self.landed = Some((run, wakes));
    }

    /// Folds the run's events after the state's version (up to `run`'s), starting from
    /// the newest usable checkpoint the first time (there is none to look for under the
    /// run's first lease).
    pub(crate) async fn refresh(&mut self, run: &RunSummary) -> Result<(), StepError> {
        self.fold_to(run.version).await
    }

    /// Folds the run's events after the state's version up to `version`.
    async fn fold_to(&mut self, version: i64) -> Result<(), StepError> {
        if !self.restored {
            // Checkpoints are written only under a lease, so under the run's first one
            // (epoch 1) none can exist yet: the read for one is skipped.
            let first_lease = self.lease.as_ref().is_some_and(|l| l.fence.epoch == 1);
            if !first_lease {
                let restored =
                    checkpoint::restore(&self.shared, self.tenant, self.run, version).await?;
                if let Some(state) = restored {
                    self.state = state;
                }
            }
            self.restored = true;
        }
        while self.state.version < version {
            let events = self
                .shared
                .ports
                .runs
                .read_stream(self.tenant, self.run, self.state.version, 500)
                .await?;
            if events.is_empty() {
                break;
            }
            self.state.fold(&events).map_err(StepError::Unreadable)?;
        }
        let running = self.state.running_receipts();
        self.unsaved.retain(|id, _| running.contains(id));
        Ok(())
    }

    /// Every engine write: fenced by the lease (a replica that lost it can never land an
    /// event) and checked against the version the step was decided on, so a step that
    /// raced with a client command is harmless: the loop reads the run again. The first
    /// write under a lease carries `lease.acquired`; `release` gives the lease up in the
    /// same transaction.
    pub(crate) async fn append(
        &mut self,
        run: &RunSummary,
        events: Vec<RunEvent>,
        release: Option<Release>,
    ) -> Result<Next, StepError> {
        self.append_wrote(run, events, release).await?;
        Ok(Next::Continue)
    }

    /// [`Self::append`], saying whether the events were written (`false`: a client
    /// command moved the version first, and the caller reads the run again).
    pub(crate) async fn append_wrote(
        &mut self,
        run: &RunSummary,
        events: Vec<RunEvent>,
        release: Option<Release>,
    ) -> Result<bool, StepError> {
        let after = self.commit(run, events, release).await?;
        let wrote = after.is_some();
        if let (Some(after), Some(Release::Idle)) = (after, release) {
            // The turn settled: snapshot the run for whoever drives it next.
            self.checkpoint_after_turn(&after).await;
        }
        Ok(wrote)
    }

    /// [`Self::append`] against `run` (at its version), returning the run after the append,
    /// or `None` when nothing was written (a client command moved the version first,
    /// or this driver holds no lease): the caller reads the run again.
    ///
    /// Events that settle the turn also take the run's next queued message, and then
    /// keep the lease for its turn (`queue.rs`). When what got in first only queued a
    /// message or relabelled the run, the step stands: it is folded and the append made
    /// again on top of it, so a model's reply is never asked for twice on that account.
    pub(crate) async fn commit(
        &mut self,
        run: &RunSummary,
        events: Vec<RunEvent>,
        release: Option<Release>,
    ) -> Result<Option<RunSummary>, StepError> {
        let mut expected = run.version;
        // The run the step was decided on, which the store writes against without
        // reading it again; an append made again on top of client events has none.
        let mut base = Some(run);
        for _ in 0..MAX_REAPPENDS {
            let Some(lease) = self.lease.clone() else {
                return Ok(None);
            };
            // The queue as of `expected`: a settling append takes its head.
            if queue::settled_turn(&events).is_some() && self.state.version < expected {
                self.fold_to(expected).await?;
            }
            let taken = queue::next_turn(&self.state, &events);
            let release = if taken.is_empty() { release } else { None };
            let mut all = Vec::with_capacity(events.len() + taken.len() + 1);
            if !lease.announced {
                all.push(RunEvent::LeaseAcquired(LeaseAcquired {
                    owner: lease.fence.owner.clone(),
                    epoch: lease.fence.epoch,
                    reason: lease.reason,
                }));
            }
            all.extend(events.iter().cloned());
            all.extend(taken);
            let mut req = self.request(&lease, expected, all);
            req.release = release;
            req.base = base.take().map(|run| Box::new(run.clone()));
            let wakes = self.shared.mailboxes.wakes(self.run);
            match self.shared.ports.recorder.append(self.tenant, req).await {
                Ok(AppendOutcome::Appended { run, events }) => {
                    if release.is_some() {
                        self.lease = None;
                        self.shared.mailboxes.set_leased(self.run, false);
                    } else if let Some(l) = self.lease.as_mut() {
                        l.announced = true;
                    }
                    // The state was at the version appended to: what was written is
                    // folded as written, not read back.
                    if self.state.version == expected {
                        self.state.fold(&events).map_err(StepError::Unreadable)?;
                    }
                    self.landed = Some(((*run).clone(), wakes));
                    return Ok(Some(*run));
                }
                Err(StoreError::Conflict { actual, .. }) if actual > expected => {
                    if !self.step_stands(expected, actual).await? {
                        return Ok(None);
                    }
                    expected = actual;
                }
                Ok(AppendOutcome::Duplicate(_)) | Err(StoreError::Conflict { .. }) => {
                    return Ok(None);
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(None)
    }

    /// One fenced append of `events` with the contents `blobs` at exactly `expected`:
    /// a promotion, which is resolved again (by the caller) against what moved the
    /// version rather than appended on top of it.
    pub(crate) async fn commit_exact(
        &mut self,
        expected: i64,
        events: Vec<RunEvent>,
        blobs: Vec<baton_core::ports::Blob>,
    ) -> Result<Landed, StepError> {
        let Some(lease) = self.lease.clone() else {
            return Ok(Landed::NotWritten);
        };
        let mut all = Vec::with_capacity(events.len() + 1);
        if !lease.announced {
            all.push(RunEvent::LeaseAcquired(LeaseAcquired {
                owner: lease.fence.owner.clone(),
                epoch: lease.fence.epoch,
                reason: lease.reason,
            }));
        }
        all.extend(events);
        let mut req = self.request(&lease, expected, all);
        req.blobs = blobs;
        // Whatever this append does, the run is no longer as the last one left it.
        self.landed = None;
        match self.shared.ports.recorder.append(self.tenant, req).await {
            Ok(AppendOutcome::Appended { .. }) => {
                if let Some(l) = self.lease.as_mut() {
                    l.announced = true;
                }
                Ok(Landed::Written)
            }
            Err(StoreError::Conflict { actual, .. }) if actual > expected => {
                Ok(Landed::Moved(actual))
            }
            Ok(AppendOutcome::Duplicate(_)) | Err(StoreError::Conflict { .. }) => {
                Ok(Landed::NotWritten)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The fenced append of `events` at `expected`, with the engine's metadata.
    fn request(&self, lease: &Lease, expected: i64, events: Vec<RunEvent>) -> AppendRequest {
        let mut meta = EventMeta::new(self.tenant);
        meta.actor = Some("engine".into());
        meta.replica = Some(self.shared.opts.replica.clone());
        meta.traceparent = self.state.turn_trace.clone();
        let mut req = AppendRequest::new(
            self.run,
            expected,
            events
                .into_iter()
                .map(|e| NewEvent::new(e, meta.clone()))
                .collect(),
            self.shared.ports.clock.now(),
        );
        req.fence = Some(lease.fence.clone());
        req
    }

    /// Whether the events a client appended after `expected` (up to `actual`) leave the
    /// step valid; if so they are folded into the state.
    pub(crate) async fn step_stands(
        &mut self,
        expected: i64,
        actual: i64,
    ) -> Result<bool, StepError> {
        let got_in = self
            .shared
            .ports
            .runs
            .read_stream(self.tenant, self.run, expected, REAPPEND_SCAN)
            .await?;
        let stands = got_in.len() as i64 == actual - expected
            && got_in.iter().all(|e| match e.decode() {
                Decoded::Known(event) => queue::leaves_the_step_valid(&event),
                Decoded::Unknown { .. } => false,
            });
        if stands {
            // Fold what was just read rather than reading it again.
            self.fold_to(expected).await?;
            self.state.fold(&got_in).map_err(StepError::Unreadable)?;
        }
        Ok(stands)
    }

    /// After a turn settled (the lease is already released): saves a checkpoint of the
    /// run as it stands and appends `checkpoint.saved`, unless a client command got in
    /// first (the row stays: it is a true snapshot of its version). Best effort: a
    /// failure costs a longer rebuild later, never the turn.
    async fn checkpoint_after_turn(&mut self, run: &RunSummary) {
        if run.status.is_terminal() {
            return;
        }
        // `checkpoint.saved` moves the version on.
        self.landed = None;
        let saved = async {
            self.refresh(run).await?;
            if self.state.version != run.version {
                return Ok(());
            }
            checkpoint::save_and_announce(&self.shared, self.tenant, self.run, &self.state)
                .await
                .map_err(StepError::from)
        };
        if let Err(e) = saved.await {
            tracing::warn!(error = %e, "could not save the turn's checkpoint");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::is_whole_stream;
    use crate::given::{stored, turn_requested};

    #[test]
    fn only_a_whole_stream_is_folded_as_handed_over() {
        let events = stored(&turn_requested());
        assert!(is_whole_stream(3, &events));
        assert!(
            !is_whole_stream(4, &events),
            "one short of the run's version"
        );
        assert!(
            !is_whole_stream(3, &events[1..]),
            "not from the first event"
        );
        let mut gap = events.clone();
        gap[2].version = 4;
        assert!(!is_whole_stream(3, &gap), "a gap");
        assert!(!is_whole_stream(0, &[]));
    }
}
