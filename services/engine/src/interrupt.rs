//! Waiting on a model or tool call while staying responsive: a wake-up of the driver
//! checks for a pending cancel, which ends the wait at once; the shutdown ends a model
//! call's wait but never a tool call's (a call cut short would leave its mutation
//! uncertain).

use crate::shared::Shared;
use baton_core::{RunId, TenantId};
use std::future::Future;
use std::sync::Arc;
use tokio::sync::Notify;

/// How an interruptible wait ended.
pub(crate) enum Interrupted<T> {
    Done(T),
    Cancel,
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

    /// Awaits `work` (a model call) unless a cancel or the shutdown comes first; a
    /// wake-up for anything else lets it go on.
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
            Interrupted::Cancel | Interrupted::Shutdown => None,
        }
    }

    /// Awaits `work` unless a cancel comes first, or the shutdown when `on_shutdown`.
    async fn until<T>(&self, work: impl Future<Output = T>, on_shutdown: bool) -> Interrupted<T> {
        tokio::pin!(work);
        loop {
            tokio::select! {
                out = &mut work => return Interrupted::Done(out),
                () = self.notify.notified() => {
                    if self.cancel_requested().await {
                        return Interrupted::Cancel;
                    }
                }
                () = self.shared.shutdown.cancelled(), if on_shutdown => {
                    return Interrupted::Shutdown;
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
