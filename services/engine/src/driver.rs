//! One run's driver: a loop that reads the run's projection and takes the next step
//! (start the queued turn, answer it, honour a cancel) until the run is idle or ended.
//! Each step is one optimistic append; losing a race just means reading again.

use crate::Inner;
use crate::provider::{Reply, ScriptedProvider};
use baton_core::model::{RunStatus, RunSummary};
use baton_core::ports::{AppendOutcome, AppendRequest};
use baton_core::{RunId, StoreError, TenantId};
use baton_events::{
    ErrorInfo, EventMeta, MessageAppended, MessageId, MessageRole, NewEvent, RunCancelled,
    RunCompleted, RunEvent, TurnCompleted, TurnFailed, TurnStarted,
};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// Pause after a transient store error before trying the step again; doubles up to
/// [`RETRY_MAX`] while the errors last.
const RETRY_AFTER: Duration = Duration::from_millis(200);
const RETRY_MAX: Duration = Duration::from_secs(30);

pub(crate) struct Driver {
    inner: Arc<Inner>,
    tenant: TenantId,
    run: RunId,
    notify: Arc<Notify>,
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
    ) -> Self {
        Self {
            inner,
            tenant,
            run,
            notify,
            due: None,
        }
    }

    #[tracing::instrument(name = "drive_run", skip_all, fields(tenant_id = %self.tenant, run_id = %self.run))]
    pub(crate) async fn run(mut self) {
        let mut backoff = RETRY_AFTER;
        loop {
            let seen = self.inner.wakes(self.run);
            if self.inner.shutdown.is_cancelled() {
                self.inner.forget(self.run);
                return;
            }
            match self.step().await {
                Ok(Next::Continue) => backoff = RETRY_AFTER,
                Ok(Next::Idle) => {
                    if self.inner.retire(self.run, seen) {
                        return;
                    }
                }
                Err(StoreError::Unavailable(e)) => {
                    tracing::warn!(error = %e, retry_in = ?backoff, "store unavailable; retrying the step");
                    tokio::select! {
                        () = self.inner.shutdown.cancelled() => {}
                        () = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(RETRY_MAX);
                }
                Err(e) => {
                    // Not transient: data this build cannot read (a newer replica's agent
                    // or event), or a bug. Leave the run alone until a client acts on it.
                    tracing::error!(error = %e, "cannot drive this run; parking it");
                    self.inner.park(self.run);
                    return;
                }
            }
        }
    }

    async fn step(&mut self) -> Result<Next, StoreError> {
        let Some(run) = self.inner.log.store.get_run(self.tenant, self.run).await? else {
            return Ok(Next::Idle);
        };
        if run.status.is_terminal() || !(run.status.is_busy()) {
            return Ok(Next::Idle);
        }
        if run.cancel_requested {
            let cancelled = RunEvent::RunCancelled(RunCancelled { reason: None });
            return self.append(&run, vec![cancelled]).await;
        }
        match run.status {
            RunStatus::Queued => {
                let started = RunEvent::TurnStarted(TurnStarted {
                    turn: run.turn_count,
                });
                self.append(&run, vec![started]).await
            }
            RunStatus::Running => self.take_turn(&run).await,
            _ => Ok(Next::Idle),
        }
    }

    /// Answers the running turn: asks the provider, waits out its latency (interrupted by
    /// a wake-up, e.g. a cancel), then records the reply and settles the run in one append.
    async fn take_turn(&mut self, run: &RunSummary) -> Result<Next, StoreError> {
        let turn = run.turn_count;
        let Some(agent) = self
            .inner
            .agents
            .get_agent(self.tenant, run.agent_id)
            .await?
        else {
            let failed = failure(turn, "agent_missing", "the run's agent no longer exists");
            return self.append(run, vec![failed]).await;
        };
        let reply = match ScriptedProvider::reply(&agent, turn) {
            Ok(reply) => reply,
            Err(error) => {
                let failed = RunEvent::TurnFailed(TurnFailed { turn, error });
                return self.append(run, vec![failed]).await;
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
        self.append(run, answer(turn, reply)).await
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

    /// Every engine write. The version check makes a step that raced with a client
    /// command (a cancel) harmless: the loop reads the run again and decides anew.
    async fn append(&self, run: &RunSummary, events: Vec<RunEvent>) -> Result<Next, StoreError> {
        let mut meta = EventMeta::new(self.tenant);
        meta.actor = Some("engine".into());
        meta.replica = Some(self.inner.replica.clone());
        let req = AppendRequest {
            run: self.run,
            expected_version: run.version,
            events: events
                .into_iter()
                .map(|e| NewEvent::new(e, meta.clone()))
                .collect(),
            at: self.inner.clock.now(),
            idempotency: None,
            fence: None,
            release: false,
        };
        match self.inner.log.append(self.tenant, req).await {
            Ok(AppendOutcome::Appended { .. }) | Err(StoreError::Conflict { .. }) => {
                Ok(Next::Continue)
            }
            Ok(AppendOutcome::Duplicate(_)) => Ok(Next::Continue),
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
