//! The run engine: drives each run that has a turn to take, one driver task per run in
//! this process, answering with the agent's model provider.
//!
//! Single replica for now: the engine drives every run it is woken for, and at start-up
//! (and periodically) every run whose projection says a turn is in progress. Every engine
//! write goes through [`driver::Driver::append`], the one place where a lease fence joins
//! the version check when runs get leases.

mod driver;
mod provider;

pub use provider::{Reply, ScriptedProvider};

use baton_core::ports::{AgentStore, Clock, RunDriver};
use baton_core::runs::EventLog;
use baton_core::{RunId, StoreError, TenantId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How many runs one recovery sweep picks up.
const SWEEP_BATCH: u32 = 500;

/// A driver's mailbox: `wakes` counts wake-ups so a driver never exits over one it
/// has not seen; `notify` interrupts its waits.
#[derive(Default)]
struct Mailbox {
    wakes: u64,
    notify: Arc<Notify>,
}

pub(crate) struct Inner {
    log: EventLog,
    agents: Arc<dyn AgentStore>,
    clock: Arc<dyn Clock>,
    replica: String,
    active: Mutex<HashMap<RunId, Mailbox>>,
    /// Runs whose driver met an error that retrying will not fix; the sweep skips them
    /// until a client command wakes them again.
    parked: Mutex<std::collections::HashSet<RunId>>,
    shutdown: CancellationToken,
    tasks: TaskTracker,
}

/// Cheap to clone; all clones share one set of drivers.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

impl Engine {
    pub fn new(
        log: EventLog,
        agents: Arc<dyn AgentStore>,
        clock: Arc<dyn Clock>,
        replica: impl Into<String>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                log,
                agents,
                clock,
                replica: replica.into(),
                active: Mutex::new(HashMap::new()),
                parked: Mutex::new(std::collections::HashSet::new()),
                shutdown: CancellationToken::new(),
                tasks: TaskTracker::new(),
            }),
        }
    }

    /// Starts a driver for every run with a turn in progress or a cancel pending that
    /// has none in this process. Returns how many drivers it started.
    pub async fn run_once(&self) -> Result<usize, StoreError> {
        let runs = self.inner.log.store.runs_needing_drive(SWEEP_BATCH).await?;
        let mut started = 0;
        for (tenant, run) in runs {
            if !self.inner.lock().contains_key(&run) && !self.inner.is_parked(run) {
                self.wake(tenant, run);
                started += 1;
            }
        }
        Ok(started)
    }

    /// Sweeps at start and then every `every` until shutdown, so a run whose wake-up was
    /// lost (a crash between commit and wake) is still driven.
    pub fn spawn_sweeper(&self, every: std::time::Duration) {
        let engine = self.clone();
        self.inner.tasks.spawn(async move {
            loop {
                if let Err(e) = engine.run_once().await {
                    tracing::warn!(error = %e, "engine sweep failed; retrying");
                }
                tokio::select! {
                    () = engine.inner.shutdown.cancelled() => return,
                    () = tokio::time::sleep(every) => {}
                }
            }
        });
    }

    /// Runs with a live driver in this process.
    pub fn active_runs(&self) -> usize {
        self.inner.lock().len()
    }

    /// Stops taking work and waits for drivers to reach a step boundary. Nothing is
    /// appended on the way out: an interrupted turn is taken again after the restart.
    pub async fn shutdown(&self) {
        self.inner.shutdown.cancel();
        self.inner.tasks.close();
        self.inner.tasks.wait().await;
    }
}

impl RunDriver for Engine {
    fn wake(&self, tenant: TenantId, run: RunId) {
        if self.inner.shutdown.is_cancelled() {
            return;
        }
        self.inner.unpark(run);
        let mut active = self.inner.lock();
        if let Some(mailbox) = active.get_mut(&run) {
            mailbox.wakes += 1;
            mailbox.notify.notify_one();
            return;
        }
        let mailbox = Mailbox::default();
        let notify = mailbox.notify.clone();
        active.insert(run, mailbox);
        drop(active);
        let inner = self.inner.clone();
        self.inner.tasks.spawn(async move {
            driver::Driver::new(inner, tenant, run, notify).run().await;
        });
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<RunId, Mailbox>> {
        self.active
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The number of wake-ups a run's driver has been sent.
    fn wakes(&self, run: RunId) -> u64 {
        self.lock().get(&run).map_or(0, |m| m.wakes)
    }

    /// Removes the run's driver whatever wake-ups it was sent (shutdown).
    fn forget(&self, run: RunId) {
        self.lock().remove(&run);
    }

    /// Removes the run's driver and keeps the sweep away from the run.
    fn park(&self, run: RunId) {
        self.parked_runs().insert(run);
        self.forget(run);
    }

    fn unpark(&self, run: RunId) {
        self.parked_runs().remove(&run);
    }

    fn is_parked(&self, run: RunId) -> bool {
        self.parked_runs().contains(&run)
    }

    fn parked_runs(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<RunId>> {
        self.parked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Removes the run's driver unless a wake-up arrived after `seen`; returns whether
    /// the driver may exit.
    fn retire(&self, run: RunId, seen: u64) -> bool {
        let mut active = self.lock();
        match active.get(&run) {
            Some(m) if m.wakes != seen => false,
            _ => {
                active.remove(&run);
                true
            }
        }
    }
}
