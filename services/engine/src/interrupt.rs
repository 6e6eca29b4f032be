//! Waiting on a model or tool call while staying responsive: a wake-up of the driver
//! checks for a pending cancel, which ends the wait at once; a pending interrupt and the
//! shutdown end a model call's wait but not a tool call's (a call cut short would leave
//! its mutation uncertain: the turn is interrupted once its calls are recorded), except
//! that the shutdown ends the wait on calls that are all safe to run again when one of
//! them is a delegation (which may wait on its child for minutes).

use crate::shared::Shared;
use baton_core::{RunId, TenantId};
use std::future::Future;
use std::sync::Arc;
use tokio::sync::Notify;

/// How an interruptible wait ended.
pub(crate) enum Interrupted<T> {
    Done(T),
    Cancel,
    /// A message asked to end the turn.
    Interrupt,
    Shutdown,
}

/// What interrupts a driver's waits on its run.
pub(crate) struct Interrupts {
    shared: Arc<Shared>,
    tenant: TenantId,
    run: RunId,
    /// Notified on every wake-up of the run's driver.
    notify: Arc<Notify>,
}

impl Interrupts {
    pub(crate) fn new(
        shared: Arc<Shared>,
        tenant: TenantId,
        run: RunId,
        notify: Arc<Notify>,
    ) -> Self {
        Self {
            shared,
            tenant,
            run,
            notify,
        }
    }

    /// Awaits `work` (a model call) unless a cancel, an interrupt or the shutdown comes
    /// first; a wake-up for anything else lets it go on.
    pub(crate) async fn interruptible<T>(&self, work: impl Future<Output = T>) -> Interrupted<T> {
        self.until(work, true, true).await
    }

    /// Awaits `work` (tool calls that are all safe to run again, delegations among them)
    /// unless a cancel or the shutdown comes first: a replica shutting down hands the run
    /// off with their intents recorded, and the next driver runs them again (a delegation
    /// finds the child it started). An interrupt waits for them, as for any tool call.
    pub(crate) async fn interruptible_by_cancel_or_shutdown<T>(
        &self,
        work: impl Future<Output = T>,
    ) -> Interrupted<T> {
        self.until(work, false, true).await
    }

    /// Awaits `work` (tool calls) unless a cancel comes first (`None`). Shutdown waits
    /// for it: a call cut short would leave its mutation uncertain.
    pub(crate) async fn interruptible_by_cancel<T>(
        &self,
        work: impl Future<Output = T>,
    ) -> Option<T> {
        match self.until(work, false, false).await {
            Interrupted::Done(out) => Some(out),
            Interrupted::Cancel | Interrupted::Interrupt | Interrupted::Shutdown => None,
        }
    }

    /// Awaits `work` unless a cancel comes first, or an interrupt (`on_interrupt`) or the
    /// shutdown (`on_shutdown`).
    async fn until<T>(
        &self,
        work: impl Future<Output = T>,
        on_interrupt: bool,
        on_shutdown: bool,
    ) -> Interrupted<T> {
        tokio::pin!(work);
        loop {
            tokio::select! {
                out = &mut work => return Interrupted::Done(out),
                () = self.notify.notified() => {
                    match self.pending().await {
                        Pending::Cancel => return Interrupted::Cancel,
                        Pending::Interrupt if on_interrupt => return Interrupted::Interrupt,
                        Pending::Interrupt | Pending::Nothing => {}
                    }
                }
                () = self.shared.shutdown.cancelled(), if on_shutdown => {
                    return Interrupted::Shutdown;
                }
            }
        }
    }

    /// Whether a cancel or an interrupt is pending. A read that fails counts as neither:
    /// the work in flight goes on (cutting a tool call short would leave its mutation
    /// uncertain), and the next step reads again.
    async fn pending(&self) -> Pending {
        match self.shared.ports.runs.get_run(self.tenant, self.run).await {
            Ok(Some(run)) if run.cancel_requested => Pending::Cancel,
            Ok(Some(run)) if run.interrupt_requested => Pending::Interrupt,
            Ok(_) => Pending::Nothing,
            Err(e) => {
                tracing::warn!(error = %e, "could not check for a cancel; carrying on");
                Pending::Nothing
            }
        }
    }
}

/// What a wake-up found pending.
enum Pending {
    Cancel,
    Interrupt,
    Nothing,
}
