//! Waiting on a model or tool call while staying responsive: a wake-up of the driver
//! checks for a pending cancel, which ends the wait at once; a pending interrupt and the
//! shutdown end a model call's wait but never a tool call's (a call cut short would leave
//! its mutation uncertain: the turn is interrupted once its calls are recorded).

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
        self.until(work, true).await
    }

    /// Awaits `work` (tool calls) unless a cancel comes first (`None`). Shutdown waits
    /// for it: a call cut short would leave its mutation uncertain.
    pub(crate) async fn interruptible_by_cancel<T>(
        &self,
        work: impl Future<Output = T>,
    ) -> Option<T> {
        match self.until(work, false).await {
            Interrupted::Done(out) => Some(out),
            Interrupted::Cancel | Interrupted::Interrupt | Interrupted::Shutdown => None,
        }
    }

    /// Awaits `work` unless a cancel comes first, or an interrupt or the shutdown when
    /// `model_call`.
    async fn until<T>(&self, work: impl Future<Output = T>, model_call: bool) -> Interrupted<T> {
        tokio::pin!(work);
        let on_shutdown = model_call;
        loop {
            tokio::select! {
                out = &mut work => return Interrupted::Done(out),
                () = self.notify.notified() => {
                    match self.pending().await {
                        Pending::Cancel => return Interrupted::Cancel,
                        Pending::Interrupt if model_call => return Interrupted::Interrupt,
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
