//! One run's driver and its lifecycle: spawned for a run with work, woken by commands,
//! a loop that reads the run, asks [`decide`] for the next step and carries it out
//! until the run is idle or ended, and the stop — giving the lease up when it was
//! taken over, parking the run on data this build cannot read, handing it off at
//! shutdown.

use crate::agent::{self, TurnContext};
use crate::calls::execute::Calls;
use crate::checkpoint;
use crate::decide::{Facts, Step, TurnStep, decide};
use crate::interrupt::Interrupts;
use crate::lease::Lease;
use crate::outcome::{Next, StepError};
use crate::settle;
use crate::shared::Shared;
use crate::stream::RunStream;
use crate::turn;
use baton_core::model::RunSummary;
use baton_core::ports::Release;
use baton_core::{RunId, TenantId};
use baton_events::{Envelope, LeaseReleased, ReleaseReason, RunEvent, TurnStarted};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tracing::Instrument;

/// Pause after a transient store error before trying the step again; doubles up to
/// [`RETRY_MAX`] while the errors last.
const RETRY_AFTER: Duration = Duration::from_millis(200);
const RETRY_MAX: Duration = Duration::from_secs(30);

/// Starts a driver for the run, handing it `lease` when the caller already claimed it
/// (a running driver gets the lease instead), and `landed`, the run as the append that
/// woke it left it and the events it wrote, to take its first step from.
pub(crate) fn spawn(
    shared: &Arc<Shared>,
    tenant: TenantId,
    run: RunId,
    lease: Option<Lease>,
    landed: Option<(RunSummary, Vec<Envelope>)>,
) {
    let Some(notify) = shared.mailboxes.open(run, lease.clone()) else {
        return;
    };
    let mut driver = Driver::new(shared.clone(), tenant, run, notify, lease);
    if let Some((landed, events)) = landed {
        driver
            .stream
            .start_from(landed, &events, shared.mailboxes.wakes(run));
    }
    let shared = shared.clone();
    shared.tasks.clone().spawn(async move {
        let _guard = PanicGuard { shared, run };
        driver.run().await;
    });
}

/// Wakes this replica's driver of the run, if any; otherwise starts one when the run
/// was parked here (with its lease) or when `start` (the command was taken here), which
/// takes its first step from `landed` when the waker gave the run as it left it.
pub(crate) fn wake_here(
    shared: &Arc<Shared>,
    tenant: TenantId,
    run: RunId,
    start: bool,
    landed: Option<(RunSummary, Vec<Envelope>)>,
) {
    if shared.shutdown.is_cancelled() || shared.mailboxes.wake(run) {
        return;
    }
    let parked_lease = shared.mailboxes.unpark(run);
    if start || parked_lease.is_some() {
        spawn(shared, tenant, run, parked_lease, landed);
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
    shared: Arc<Shared>,
    /// The run's stream as this driver holds it: state, lease, unsaved results.
    stream: RunStream,
    interrupts: Interrupts,
    /// The run's agent version, tools and provider, loaded at each turn's first step.
    ctx: Option<Arc<TurnContext>>,
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
            stream: RunStream::new(shared.clone(), tenant, run, lease),
            interrupts: Interrupts::new(shared.clone(), tenant, run, notify),
            shared,
            ctx: None,
        }
    }

    #[tracing::instrument(name = "drive_run", skip_all, fields(tenant_id = %self.stream.tenant, run_id = %self.stream.run))]
    async fn run(mut self) {
        let mut backoff = RETRY_AFTER;
        loop {
            let seen = self.shared.mailboxes.wakes(self.stream.run);
            if self.shared.shutdown.is_cancelled() {
                self.hand_off().await;
                self.shared.mailboxes.forget(self.stream.run);
                return;
            }
            if self.shared.mailboxes.lost(self.stream.run) {
                tracing::warn!("the run's lease was taken over; stopping");
                if self.give_up_lease(seen) {
                    return;
                }
                continue;
            }
            match self.step(seen).await {
                Ok(Next::Continue) => backoff = RETRY_AFTER,
                Ok(Next::Idle) => {
                    if self.shared.mailboxes.retire(self.stream.run, seen) {
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
                        .park(self.stream.run, self.stream.lease.clone(), seen)
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
        self.stream.lease = None;
        // What another owner did since is in the stream; these may be stale.
        self.stream.unsaved.clear();
        self.shared.mailboxes.set_leased(self.stream.run, false);
        self.shared.mailboxes.retire(self.stream.run, seen)
    }

    /// Reads the run (unless the driver's last append left it as it is now, with
    /// nothing woken since `seen`) and takes its next step, as [`decide`] says; a step
    /// that only gathers what the decision needs (the lease, the folded state, the
    /// agent) is followed by the next decision in the same step.
    async fn step(&mut self, seen: u64) -> Result<Next, StepError> {
        let run = match self.stream.take_landed(seen) {
            Some(run) => run,
            None => {
                let read = self
                    .shared
                    .ports
                    .runs
                    .get_run(self.stream.tenant, self.stream.run)
                    .await?;
                let Some(run) = read else {
                    return Ok(Next::Idle);
                };
                run
            }
        };
        let mut folded = false;
        // The turn's part of the step is one span in the turn's trace: the child of
        // whatever posted the turn's message, on whichever replica that was.
        let mut turn_span = None;
        loop {
            let step = decide(&Facts {
                run: &run,
                lease: self.stream.lease.as_ref(),
                state: &self.stream.state,
                folded,
                agent: self.ctx.as_deref(),
                unsaved: &self.stream.unsaved,
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
                    self.stream.refresh(&run).await?;
                    folded = true;
                    continue;
                }
                Step::Reread => Ok(Next::Continue),
                Step::Cancel => settle::cancel(&mut self.stream, &run).await,
                Step::Interrupt => settle::interrupt(&mut self.stream, &run).await,
                Step::Announce => self.stream.append(&run, vec![], None).await,
                Step::StartTurn => {
                    let started = RunEvent::TurnStarted(TurnStarted {
                        turn: run.turn_count,
                    });
                    self.stream.append(&run, vec![started], None).await
                }
                Step::LoadAgent => {
                    let pins = &self.stream.state.tool_versions;
                    match agent::load(&self.shared, &run, pins)
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
                Err(StepError::Turn(error)) => {
                    // The agent's rule, or the default when it could not be loaded.
                    let max_failed_turns = self.ctx.as_ref().map_or_else(
                        || baton_core::model::AgentLimits::default().max_failed_turns,
                        |c| c.agent.limits.max_failed_turns,
                    );
                    settle::fail_turn(&mut self.stream, &run, error, max_failed_turns)
                        .instrument(span)
                        .await
                }
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
            TurnStep::AskModel => {
                turn::ask_model(&mut self.stream, &self.interrupts, &ctx, run).await
            }
            TurnStep::AskApproval { call, tool } => {
                self.calls(run, &ctx).ask_approval(&call, &tool).await
            }
            TurnStep::RunCalls(batch) => self.calls(run, &ctx).run(batch).await,
            TurnStep::Reject { call, error } => self.calls(run, &ctx).reject(&call, error).await,
            TurnStep::SaveResult(result) => self.calls(run, &ctx).save(result).await,
            TurnStep::Recover { call, intent } => {
                self.calls(run, &ctx).recover(&ctx, &call, &intent).await
            }
            TurnStep::Retry { call, intent } => {
                self.calls(run, &ctx).retry(&ctx, &call, &intent).await
            }
            // The projection says `requires_action`: a member or the client acts next.
            TurnStep::Wait => Ok(Next::Idle),
        }
    }

    /// The step's calls of `run`, carried out on this driver's stream through the turn's
    /// outbound client.
    fn calls<'a>(&'a mut self, run: &'a RunSummary, ctx: &'a TurnContext) -> Calls<'a> {
        Calls {
            stream: &mut self.stream,
            waits: &self.interrupts,
            run,
            egress: &ctx.egress,
        }
    }

    /// The span of a turn step, a child of the request that asked for the turn.
    fn turn_span(&self) -> tracing::Span {
        let span = tracing::info_span!(
            "turn_step",
            turn = self.stream.state.turn,
            step = self.stream.state.step,
            otel.name = "turn step",
        );
        baton_core::trace::adopt(&span, self.stream.state.turn_trace.as_deref());
        span
    }

    /// Takes the run's lease if it is free or expired.
    async fn claim(&mut self) -> Result<bool, StepError> {
        if self.stream.lease.is_none() {
            self.stream.lease = self.shared.mailboxes.take_offered(self.stream.run);
        }
        if self.stream.lease.is_some() {
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
                Some((self.stream.tenant, self.stream.run)),
            )
            .await?;
        let Some(c) = claimed.into_iter().next() else {
            return Ok(false);
        };
        self.stream.lease = Some(Lease::claimed(&opts.replica, &c));
        self.shared.mailboxes.set_leased(self.stream.run, true);
        Ok(true)
    }

    /// Gives up a lease the run no longer needs (nothing to announce: no event).
    async fn release(&mut self) {
        if let Some(lease) = self.stream.lease.take() {
            self.shared.mailboxes.set_leased(self.stream.run, false);
            let _ = self
                .shared
                .ports
                .leases
                .release_lease(self.stream.tenant, self.stream.run, &lease.fence)
                .await;
        }
    }

    /// At shutdown: releases the lease with `lease.released{drained}` so another replica
    /// adopts the run at once instead of after the lease expires.
    async fn hand_off(&mut self) {
        let Some(lease) = self.stream.lease.clone() else {
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
            let run = match self
                .shared
                .ports
                .runs
                .get_run(self.stream.tenant, self.stream.run)
                .await
            {
                Ok(Some(run)) => run,
                _ => return,
            };
            // The next owner starts from here rather than from the whole stream.
            let mut events = Vec::with_capacity(2);
            if self.stream.refresh(&run).await.is_ok() && self.stream.state.version == run.version {
                let sealed = checkpoint::seal(
                    &self.shared,
                    self.stream.tenant,
                    self.stream.run,
                    &self.stream.state,
                );
                match sealed.await {
                    Ok(saved) => events.push(saved),
                    Err(e) => tracing::warn!(error = %e, "no checkpoint for the hand-off"),
                }
            }
            events.push(released);
            match self
                .stream
                .append(&run, events, Some(Release::HandOff))
                .await
            {
                Ok(_) if self.stream.lease.is_none() => {
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
}
