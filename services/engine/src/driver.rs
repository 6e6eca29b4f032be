//! One run's driver: a loop that reads the run's projection and takes the next step
//! (start the queued turn, answer it, honour a cancel) until the run is idle or ended.
//! Each step is one optimistic append under the run's lease; losing a race to a client
//! command just means reading again, and losing the lease stops the driver at once.

use crate::agent::{self, TurnContext};
use crate::decide::{Facts, Step, TurnStep, decide};
use crate::lease::Lease;
use crate::outcome::{Next, StepError};
use crate::settle;
use crate::shared::Shared;
use crate::state::RunState;
use baton_core::model::RunSummary;
use baton_core::ports::{AppendOutcome, AppendRequest, Release};
use baton_core::{RunId, StoreError, TenantId};
use baton_events::{
    EventMeta, LeaseAcquired, LeaseReleased, NewEvent, ReceiptId, ReleaseReason, RunCancelled,
    RunEvent, ToolResult, TurnStarted,
};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tracing::Instrument;

/// Pause after a transient store error before trying the step again; doubles up to
/// [`RETRY_MAX`] while the errors last.
const RETRY_AFTER: Duration = Duration::from_millis(200);
const RETRY_MAX: Duration = Duration::from_secs(30);

/// Starts a driver for the run, handing it `lease` when the caller already claimed it
/// (a running driver gets the lease instead).
pub(crate) fn spawn(shared: &Arc<Shared>, tenant: TenantId, run: RunId, lease: Option<Lease>) {
    let Some(notify) = shared.mailboxes.open(run, lease.clone()) else {
        return;
    };
    let driver = Driver::new(shared.clone(), tenant, run, notify, lease);
    let shared = shared.clone();
    shared.tasks.clone().spawn(async move {
        let _guard = PanicGuard { shared, run };
        driver.run().await;
    });
}

/// Wakes this replica's driver of the run, if any; otherwise starts one when the run
/// was parked here (with its lease) or when `start` (the command was taken here).
pub(crate) fn wake_here(shared: &Arc<Shared>, tenant: TenantId, run: RunId, start: bool) {
    if shared.shutdown.is_cancelled() || shared.mailboxes.wake(run) {
        return;
    }
    let parked_lease = shared.mailboxes.unpark(run);
    if start || parked_lease.is_some() {
        spawn(shared, tenant, run, parked_lease);
    }
}

/// Forgets the run's mailbox if its driver panics, so the run is not left with a dead
/// driver: the keeper then frees its lease as an orphan and the run is driven again.
struct PanicGuard {
    shared: Arc<Shared>,
    run: RunId,
}

impl Drop for PanicGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            tracing::error!(run_id = %self.run, "a run's driver panicked; its lease will be freed");
            self.shared.mailboxes.forget(self.run);
        }
    }
}

pub(crate) struct Driver {
    pub(crate) shared: Arc<Shared>,
    pub(crate) tenant: TenantId,
    pub(crate) run: RunId,
    notify: Arc<Notify>,
    lease: Option<Lease>,
    /// The run's state as of `state.version`, folded from its events.
    pub(crate) state: RunState,
    /// The run's agent version, tools and provider, loaded at the first turn step.
    pub(crate) ctx: Option<Arc<TurnContext>>,
    /// Results of calls this driver made whose append has not succeeded yet: recorded
    /// as they are rather than treated as interrupted calls.
    pub(crate) unsaved: HashMap<ReceiptId, ToolResult>,
    /// The state was started from the newest usable checkpoint (or found none).
    restored: bool,
}

impl Driver {
    fn new(
        shared: Arc<Shared>,
        tenant: TenantId,
        run: RunId,
        notify: Arc<Notify>,
        lease: Option<Lease>,
    ) -> Self {
        Self {
            shared,
            tenant,
            run,
            notify,
            lease,
            state: RunState::default(),
            ctx: None,
            unsaved: HashMap::new(),
            restored: false,
        }
    }

    #[tracing::instrument(name = "drive_run", skip_all, fields(tenant_id = %self.tenant, run_id = %self.run))]
    async fn run(mut self) {
        let mut backoff = RETRY_AFTER;
        loop {
            let seen = self.shared.mailboxes.wakes(self.run);
            if self.shared.shutdown.is_cancelled() {
                self.hand_off().await;
                self.shared.mailboxes.forget(self.run);
                return;
            }
            if self.shared.mailboxes.lost(self.run) {
                tracing::warn!("the run's lease was taken over; stopping");
                if self.give_up_lease(seen) {
                    return;
                }
                continue;
            }
            match self.step().await {
                Ok(Next::Continue) => backoff = RETRY_AFTER,
                Ok(Next::Idle) => {
                    if self.shared.mailboxes.retire(self.run, seen) {
                        return;
                    }
                }
                Err(StepError::Fenced) => {
                    tracing::warn!("fenced: another replica owns this run now; stopping");
                    if self.give_up_lease(seen) {
                        return;
                    }
                }
                Err(StepError::Unreadable(reason)) => {
                    // Data this build cannot read (a newer replica's agent or event). Keep
                    // the lease, so replicas of this build do not take turns failing on
                    // it, until a client command or the drain frees it.
                    tracing::error!(error = %reason, "cannot read this run's data; parking it");
                    if self
                        .shared
                        .mailboxes
                        .park(self.run, self.lease.clone(), seen)
                    {
                        metrics::counter!("baton_runs_parked_total").increment(1);
                        return;
                    }
                }
                // A store failure; a turn's own failure is recorded by the step and never
                // gets here, but would be retried the same way.
                Err(e @ (StepError::Store(_) | StepError::Turn(_))) => {
                    tracing::warn!(error = %e, retry_in = ?backoff, "run step failed; retrying");
                    tokio::select! {
                        () = self.shared.shutdown.cancelled() => {}
                        () = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(RETRY_MAX);
                }
            }
        }
    }

    /// Drops a lease that is no longer ours (taken over, or fenced) and exits unless a
    /// wake-up arrived meanwhile; then the loop goes on and may claim the run afresh.
    fn give_up_lease(&mut self, seen: u64) -> bool {
        self.lease = None;
        // What another owner did since is in the stream; these may be stale.
        self.unsaved.clear();
        self.shared.mailboxes.set_leased(self.run, false);
        self.shared.mailboxes.retire(self.run, seen)
    }

    /// Reads the run and takes its next step, as [`decide`] says; a step that only
    /// gathers what the decision needs (the lease, the folded state, the agent) is
    /// followed by the next decision in the same step.
    async fn step(&mut self) -> Result<Next, StepError> {
        let Some(run) = self
            .shared
            .ports
            .runs
            .get_run(self.tenant, self.run)
            .await?
        else {
            return Ok(Next::Idle);
        };
        let mut folded = false;
        // The turn's part of the step is one span in the turn's trace: the child of
        // whatever posted the turn's message, on whichever replica that was.
        let mut turn_span = None;
        loop {
            let step = decide(&Facts {
                run: &run,
                lease: self.lease.as_ref(),
                state: &self.state,
                folded,
                agent: self.ctx.as_deref(),
                unsaved: &self.unsaved,
                now: self.shared.ports.clock.now(),
            });
            let span = match step {
                Step::LoadAgent | Step::Turn(_) => {
                    turn_span.get_or_insert_with(|| self.turn_span()).clone()
                }
                _ => tracing::Span::none(),
            };
            let done = match step {
                Step::Idle => Ok(Next::Idle),
                Step::Release => {
                    self.release().await;
                    Ok(Next::Idle)
                }
                Step::Claim => {
                    if self.claim().await? {
                        continue;
                    }
                    // Another replica drives it.
                    Ok(Next::Idle)
                }
                Step::Fold => {
                    // Fold what happened since; the turn's events carry the trace
                    // context of the request that asked for it.
                    self.refresh(&run).await?;
                    folded = true;
                    continue;
                }
                Step::Reread => Ok(Next::Continue),
                Step::Cancel => self.cancel(&run).await,
                Step::Announce => self.append(&run, vec![], None).await,
                Step::StartTurn => {
                    let started = RunEvent::TurnStarted(TurnStarted {
                        turn: run.turn_count,
                    });
                    self.append(&run, vec![started], None).await
                }
                Step::LoadAgent => {
                    match agent::load(&self.shared, &run)
                        .instrument(span.clone())
                        .await
                    {
                        Ok(ctx) => {
                            self.ctx = Some(Arc::new(ctx));
                            continue;
                        }
                        Err(e) => Err(e),
                    }
                }
                Step::Turn(step) => self.take_turn(&run, *step).instrument(span.clone()).await,
            };
            // The turn's own failures (a missing agent version or secret, a model error)
            // end it here, recorded as `turn.failed`.
            return match done {
                Err(StepError::Turn(error)) => self.fail_turn(&run, error).instrument(span).await,
                other => other,
            };
        }
    }

    /// Carries out a step of the running turn.
    async fn take_turn(&mut self, run: &RunSummary, step: TurnStep) -> Result<Next, StepError> {
        let Some(ctx) = self.ctx.clone() else {
            // Decided with the agent loaded, so never here; deciding again loads it.
            return Ok(Next::Continue);
        };
        match step {
            TurnStep::Fail(error) => Err(StepError::Turn(error)),
            TurnStep::AskModel => self.ask_model(run, &ctx).await,
            TurnStep::AskApproval { call, tool } => self.ask_approval(run, &call, &tool).await,
            TurnStep::RunCalls(calls) => self.run_calls(run, calls).await,
            TurnStep::Reject { call, error } => self.reject(run, &call, error).await,
            TurnStep::SaveResult(result) => {
                self.append(run, vec![RunEvent::ToolResult(result)], None)
                    .await
            }
            TurnStep::Recover { call, intent } => self.recover(run, &ctx, &call, &intent).await,
            TurnStep::Retry { call, intent } => self.retry(run, &ctx, &call, &intent).await,
            // The projection says `requires_action`: a member or the client acts next.
            TurnStep::Wait => Ok(Next::Idle),
        }
    }

    /// The span of a turn step, a child of the request that asked for the turn.
    fn turn_span(&self) -> tracing::Span {
        let span = tracing::info_span!(
            "turn_step",
            turn = self.state.turn,
            step = self.state.step,
            otel.name = "turn step",
        );
        baton_core::trace::adopt(&span, self.state.turn_trace.as_deref());
        span
    }

    /// Takes the run's lease if it is free or expired.
    async fn claim(&mut self) -> Result<bool, StepError> {
        if self.lease.is_none() {
            self.lease = self.shared.mailboxes.take_offered(self.run);
        }
        if self.lease.is_some() {
            return Ok(true);
        }
        let opts = &self.shared.opts;
        let claimed = self
            .shared
            .ports
            .leases
            .claim_runs(
                &opts.replica,
                opts.lease_ttl,
                self.shared.ports.clock.now(),
                1,
                Some((self.tenant, self.run)),
            )
            .await?;
        let Some(c) = claimed.into_iter().next() else {
            return Ok(false);
        };
        self.lease = Some(Lease::claimed(&opts.replica, &c));
        self.shared.mailboxes.set_leased(self.run, true);
        Ok(true)
    }

    /// Gives up a lease the run no longer needs (nothing to announce: no event).
    async fn release(&mut self) {
        if let Some(lease) = self.lease.take() {
            self.shared.mailboxes.set_leased(self.run, false);
            let _ = self
                .shared
                .ports
                .leases
                .release_lease(self.tenant, self.run, &lease.fence)
                .await;
        }
    }

    /// At shutdown: releases the lease with `lease.released{drained}` so another replica
    /// adopts the run at once instead of after the lease expires.
    async fn hand_off(&mut self) {
        let Some(lease) = self.lease.clone() else {
            return;
        };
        if !lease.announced {
            self.release().await;
            self.shared.count_hand_off();
            return;
        }
        // A client command may move the version under us: read and try again.
        for _ in 0..3 {
            let released = RunEvent::LeaseReleased(LeaseReleased {
                owner: lease.fence.owner.clone(),
                epoch: lease.fence.epoch,
                reason: ReleaseReason::Drained,
            });
            let run = match self.shared.ports.runs.get_run(self.tenant, self.run).await {
                Ok(Some(run)) => run,
                _ => return,
            };
            // The next owner starts from here rather than from the whole stream.
            let mut events = Vec::with_capacity(2);
            if self.refresh(&run).await.is_ok() && self.state.version == run.version {
                match self.seal_checkpoint().await {
                    Ok(saved) => events.push(saved),
                    Err(e) => tracing::warn!(error = %e, "no checkpoint for the hand-off"),
                }
            }
            events.push(released);
            match self.append(&run, events, Some(Release::HandOff)).await {
                Ok(_) if self.lease.is_none() => {
                    self.shared.count_hand_off();
                    metrics::counter!("baton_lease_handoffs_total").increment(1);
                    tracing::info!(epoch = lease.fence.epoch, "handed the run off");
                    return;
                }
                Ok(_) => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "hand-off failed; the lease will expire");
                    return;
                }
            }
        }
        tracing::warn!("hand-off kept racing client commands; the lease will expire");
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
        let after = self.commit(run.version, events, release).await?;
        let wrote = after.is_some();
        if let (Some(after), Some(Release::Idle)) = (after, release) {
            // The turn settled: snapshot the run for whoever drives it next.
            self.checkpoint_after_turn(&after).await;
        }
        Ok(wrote)
    }

    /// [`Self::append`] against `expected` version, returning the run after the append,
    /// or `None` when nothing was written (a client command moved the version first,
    /// or this driver holds no lease): the caller reads the run again.
    pub(crate) async fn commit(
        &mut self,
        expected: i64,
        events: Vec<RunEvent>,
        release: Option<Release>,
    ) -> Result<Option<RunSummary>, StepError> {
        let Some(lease) = self.lease.clone() else {
            return Ok(None);
        };
        let mut meta = EventMeta::new(self.tenant);
        meta.actor = Some("engine".into());
        meta.replica = Some(self.shared.opts.replica.clone());
        meta.traceparent = self.state.turn_trace.clone();
        let mut all = Vec::with_capacity(events.len() + 1);
        if !lease.announced {
            all.push(RunEvent::LeaseAcquired(LeaseAcquired {
                owner: lease.fence.owner.clone(),
                epoch: lease.fence.epoch,
                reason: lease.reason,
            }));
        }
        all.extend(events);
        let mut req = AppendRequest::new(
            self.run,
            expected,
            all.into_iter()
                .map(|e| NewEvent::new(e, meta.clone()))
                .collect(),
            self.shared.ports.clock.now(),
        );
        req.fence = Some(lease.fence.clone());
        req.release = release;
        match self.shared.ports.recorder.append(self.tenant, req).await {
            Ok(AppendOutcome::Appended { run, .. }) => {
                if release.is_some() {
                    self.lease = None;
                    self.shared.mailboxes.set_leased(self.run, false);
                } else if let Some(l) = self.lease.as_mut() {
                    l.announced = true;
                }
                Ok(Some(*run))
            }
            Ok(AppendOutcome::Duplicate(_)) | Err(StoreError::Conflict { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Folds the run's events after the state's version (up to `run`'s).
    pub(crate) async fn refresh(&mut self, run: &RunSummary) -> Result<(), StepError> {
        if !self.restored {
            self.restore(run).await?;
            self.restored = true;
        }
        while self.state.version < run.version {
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

    /// Ends the run as cancelled, settling its open calls ([`Self::settle_calls`]).
    pub(crate) async fn cancel(&mut self, run: &RunSummary) -> Result<Next, StepError> {
        self.refresh(run).await?;
        let mut events = self.settle_calls("the run was cancelled");
        events.push(RunEvent::RunCancelled(RunCancelled { reason: None }));
        self.append(run, events, Some(Release::Idle)).await
    }

    /// What ending the turn now records for each open call ([`settle::settle`]).
    pub(crate) fn settle_calls(&self, why: &str) -> Vec<RunEvent> {
        settle::settle(&self.state, &self.unsaved, why)
    }

    /// Awaits `work` (a model call) unless a cancel or the shutdown comes first; a
    /// wake-up for anything else lets it go on.
    pub(crate) async fn interruptible<T>(
        &self,
        work: impl std::future::Future<Output = T>,
    ) -> Interrupted<T> {
        tokio::pin!(work);
        loop {
            tokio::select! {
                out = &mut work => return Interrupted::Done(out),
                () = self.notify.notified() => {
                    if self.cancel_requested().await {
                        return Interrupted::Cancel;
                    }
                }
                () = self.shared.shutdown.cancelled() => return Interrupted::Shutdown,
            }
        }
    }

    /// Awaits `work` (tool calls) unless a cancel comes first (`None`). Shutdown waits
    /// for it: a call cut short would leave its mutation uncertain.
    pub(crate) async fn interruptible_by_cancel<T>(
        &self,
        work: impl std::future::Future<Output = T>,
    ) -> Option<T> {
        tokio::pin!(work);
        loop {
            tokio::select! {
                out = &mut work => return Some(out),
                () = self.notify.notified() => {
                    if self.cancel_requested().await {
                        return None;
                    }
                }
            }
        }
    }

    /// Whether a cancel is pending. A read that fails counts as no: the work in flight
    /// goes on (cutting a tool call short would leave its mutation uncertain), and the
    /// next step reads again.
    async fn cancel_requested(&self) -> bool {
        match self.shared.ports.runs.get_run(self.tenant, self.run).await {
            Ok(run) => run.is_some_and(|r| r.cancel_requested),
            Err(e) => {
                tracing::warn!(error = %e, "could not check for a cancel; carrying on");
                false
            }
        }
    }
}

/// How an interruptible wait ended.
pub(crate) enum Interrupted<T> {
    Done(T),
    Cancel,
    Shutdown,
}
