//! One run's driver: a loop that reads the run's projection and takes the next step
//! (start the queued turn, answer it, honour a cancel) until the run is idle or ended.
//! Each step is one optimistic append under the run's lease; losing a race to a client
//! command just means reading again, and losing the lease stops the driver at once.

use crate::Inner;
use crate::provider::{Reply, ScriptedProvider};
use baton_core::model::{RunStatus, RunSummary};
use baton_core::ports::{AppendOutcome, AppendRequest, Fence, Release};
use baton_core::{RunId, StoreError, TenantId};
use baton_events::{
    ErrorInfo, EventMeta, LeaseAcquired, LeaseReason, LeaseReleased, MessageAppended, MessageId,
    MessageRole, NewEvent, ReleaseReason, RunCancelled, RunCompleted, RunEvent, TurnCompleted,
    TurnFailed, TurnStarted,
};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// Pause after a transient store error before trying the step again; doubles up to
/// [`RETRY_MAX`] while the errors last.
const RETRY_AFTER: Duration = Duration::from_millis(200);
const RETRY_MAX: Duration = Duration::from_secs(30);

/// A run lease this driver holds.
#[derive(Debug, Clone)]
pub(crate) struct Lease {
    pub(crate) tenant: TenantId,
    pub(crate) fence: Fence,
    /// `lease.acquired` is in the stream (it goes with the first fenced append).
    pub(crate) announced: bool,
    pub(crate) reason: LeaseReason,
}

pub(crate) struct Driver {
    inner: Arc<Inner>,
    tenant: TenantId,
    run: RunId,
    notify: Arc<Notify>,
    lease: Option<Lease>,
    /// When the reply of the turn being answered is due: a wait interrupted by an
    /// unrelated wake-up resumes towards the same deadline instead of starting over.
    due: Option<(i64, Instant)>,
}

/// What a step asks the loop to do next.
enum Next {
    Continue,
    Idle,
}

impl Driver {
    pub(crate) fn new(
        inner: Arc<Inner>,
        tenant: TenantId,
        run: RunId,
        notify: Arc<Notify>,
        lease: Option<Lease>,
    ) -> Self {
        Self {
            inner,
            tenant,
            run,
            notify,
            lease,
            due: None,
        }
    }

    #[tracing::instrument(name = "drive_run", skip_all, fields(tenant_id = %self.tenant, run_id = %self.run))]
    pub(crate) async fn run(mut self) {
        let mut backoff = RETRY_AFTER;
        loop {
            let seen = self.inner.mailboxes.wakes(self.run);
            if self.inner.shutdown.is_cancelled() {
                self.hand_off().await;
                self.inner.mailboxes.forget(self.run);
                return;
            }
            if self.inner.mailboxes.lost(self.run) {
                tracing::warn!("the run's lease was taken over; stopping");
                if self.give_up_lease(seen) {
                    return;
                }
                continue;
            }
            match self.step().await {
                Ok(Next::Continue) => backoff = RETRY_AFTER,
                Ok(Next::Idle) => {
                    if self.inner.mailboxes.retire(self.run, seen) {
                        return;
                    }
                }
                Err(StoreError::Fenced) => {
                    tracing::warn!("fenced: another replica owns this run now; stopping");
                    if self.give_up_lease(seen) {
                        return;
                    }
                }
                Err(StoreError::Unreadable(e)) => {
                    // Data this build cannot read (a newer replica's agent or event). Keep
                    // the lease, so replicas of this build do not take turns failing on
                    // it, until a client command or the drain frees it.
                    tracing::error!(error = %e, "cannot read this run's data; parking it");
                    if self
                        .inner
                        .mailboxes
                        .park(self.run, self.lease.clone(), seen)
                    {
                        metrics::counter!("baton_runs_parked_total").increment(1);
                        return;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, retry_in = ?backoff, "run step failed; retrying");
                    tokio::select! {
                        () = self.inner.shutdown.cancelled() => {}
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
        self.inner.mailboxes.set_leased(self.run, false);
        self.inner.mailboxes.retire(self.run, seen)
    }

    async fn step(&mut self) -> Result<Next, StoreError> {
        let Some(run) = self.inner.log.store.get_run(self.tenant, self.run).await? else {
            return Ok(Next::Idle);
        };
        let has_work = run.status.is_busy() || (run.cancel_requested && !run.status.is_terminal());
        if !has_work {
            self.release().await;
            return Ok(Next::Idle);
        }
        if self.lease.is_none() {
            self.lease = self.inner.mailboxes.take_offered(self.run);
        }
        if self.lease.is_none() && !self.claim().await? {
            // Another replica drives it.
            return Ok(Next::Idle);
        }
        if run.cancel_requested {
            let cancelled = RunEvent::RunCancelled(RunCancelled { reason: None });
            return self
                .append(&run, vec![cancelled], Some(Release::Idle))
                .await;
        }
        if run.status == RunStatus::Running && self.lease.as_ref().is_some_and(|l| !l.announced) {
            // Taking over a turn in progress: say so now, not when the turn is answered.
            return self.append(&run, vec![], None).await;
        }
        match run.status {
            RunStatus::Queued => {
                let started = RunEvent::TurnStarted(TurnStarted {
                    turn: run.turn_count,
                });
                self.append(&run, vec![started], None).await
            }
            RunStatus::Running => self.take_turn(&run).await,
            _ => Ok(Next::Idle),
        }
    }

    /// Takes the run's lease if it is free or expired.
    async fn claim(&mut self) -> Result<bool, StoreError> {
        let opts = &self.inner.opts;
        let claimed = self
            .inner
            .leases
            .claim_runs(
                &opts.replica,
                opts.lease_ttl,
                self.inner.clock.now(),
                1,
                Some((self.tenant, self.run)),
            )
            .await?;
        let Some(c) = claimed.into_iter().next() else {
            return Ok(false);
        };
        self.lease = Some(Lease {
            tenant: self.tenant,
            fence: Fence {
                owner: opts.replica.clone(),
                epoch: c.epoch,
            },
            announced: false,
            reason: c.reason,
        });
        crate::cluster::count_claim(c.reason);
        self.inner.mailboxes.set_leased(self.run, true);
        Ok(true)
    }

    /// Gives up a lease the run no longer needs (nothing to announce: no event).
    async fn release(&mut self) {
        if let Some(lease) = self.lease.take() {
            self.inner.mailboxes.set_leased(self.run, false);
            let _ = self
                .inner
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
            self.inner
                .handed_off
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return;
        }
        // A client command may move the version under us: read and try again.
        for _ in 0..3 {
            let released = RunEvent::LeaseReleased(LeaseReleased {
                owner: lease.fence.owner.clone(),
                epoch: lease.fence.epoch,
                reason: ReleaseReason::Drained,
            });
            let run = match self.inner.log.store.get_run(self.tenant, self.run).await {
                Ok(Some(run)) => run,
                _ => return,
            };
            match self
                .append(&run, vec![released], Some(Release::HandOff))
                .await
            {
                Ok(_) if self.lease.is_none() => {
                    self.inner
                        .handed_off
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
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

    /// Answers the running turn: asks the provider, waits out its latency (interrupted by
    /// a wake-up, e.g. a cancel), then records the reply and settles the run in one append
    /// that also releases the lease (the run goes idle or ends).
    async fn take_turn(&mut self, run: &RunSummary) -> Result<Next, StoreError> {
        let turn = run.turn_count;
        let Some(agent) = self
            .inner
            .agents
            .get_agent(self.tenant, run.agent_id)
            .await?
        else {
            let failed = failure(turn, "agent_missing", "the run's agent no longer exists");
            return self.append(run, vec![failed], Some(Release::Idle)).await;
        };
        let reply = match ScriptedProvider::reply(&agent, turn) {
            Ok(reply) => reply,
            Err(error) => {
                let failed = RunEvent::TurnFailed(TurnFailed { turn, error });
                return self.append(run, vec![failed], Some(Release::Idle)).await;
            }
        };
        let due = match self.due {
            Some((t, due)) if t == turn => due,
            _ => Instant::now() + reply.delay,
        };
        self.due = Some((turn, due));
        if !self.wait_until(due).await {
            // Woken or shutting down: re-read the run (a cancel may be pending).
            return Ok(Next::Continue);
        }
        self.append(run, answer(turn, reply), Some(Release::Idle))
            .await
    }

    /// Waits until `due`; false when interrupted by a wake-up or shutdown.
    async fn wait_until(&self, due: Instant) -> bool {
        if due <= Instant::now() {
            return true;
        }
        tokio::select! {
            () = tokio::time::sleep_until(due) => true,
            () = self.notify.notified() => false,
            () = self.inner.shutdown.cancelled() => false,
        }
    }

    /// Every engine write: fenced by the lease (a replica that lost it can never land an
    /// event) and checked against the version the step was decided on, so a step that
    /// raced with a client command is harmless: the loop reads the run again. The first
    /// write under a lease carries `lease.acquired`; `release` gives the lease up in the
    /// same transaction.
    async fn append(
        &mut self,
        run: &RunSummary,
        events: Vec<RunEvent>,
        release: Option<Release>,
    ) -> Result<Next, StoreError> {
        let Some(lease) = self.lease.clone() else {
            return Ok(Next::Continue);
        };
        let mut meta = EventMeta::new(self.tenant);
        meta.actor = Some("engine".into());
        meta.replica = Some(self.inner.opts.replica.clone());
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
            run.version,
            all.into_iter()
                .map(|e| NewEvent::new(e, meta.clone()))
                .collect(),
            self.inner.clock.now(),
        );
        req.fence = Some(lease.fence.clone());
        req.release = release;
        match self.inner.log.append(self.tenant, req).await {
            Ok(AppendOutcome::Appended { .. }) => {
                if release.is_some() {
                    self.lease = None;
                    self.inner.mailboxes.set_leased(self.run, false);
                } else if let Some(l) = self.lease.as_mut() {
                    l.announced = true;
                }
                Ok(Next::Continue)
            }
            Ok(AppendOutcome::Duplicate(_)) | Err(StoreError::Conflict { .. }) => {
                Ok(Next::Continue)
            }
            Err(e) => Err(e),
        }
    }
}

fn answer(turn: i64, reply: Reply) -> Vec<RunEvent> {
    let mut events = vec![
        RunEvent::MessageAppended(MessageAppended {
            message_id: MessageId::new(),
            role: MessageRole::Assistant,
            content: reply.content,
        }),
        RunEvent::TurnCompleted(TurnCompleted {
            turn,
            finish_reason: Some(reply.finish_reason),
        }),
    ];
    if reply.complete_run {
        events.push(RunEvent::RunCompleted(RunCompleted {}));
    }
    events
}

fn failure(turn: i64, code: &str, message: &str) -> RunEvent {
    RunEvent::TurnFailed(TurnFailed {
        turn,
        error: ErrorInfo {
            code: code.into(),
            message: message.into(),
        },
    })
}
