//! The run engine: drives runs that have work (a turn to take, a cancel to honour), one
//! driver task per run in this process, under a fenced lease (docs/architecture.md).
//!
//! - A driver claims its run's lease before its first write and appends
//!   `lease.acquired` with its first step; every later write carries the fence, so a
//!   driver whose lease was taken over is `Fenced` and stops at once. The append that
//!   leaves the run idle also releases the lease: idle runs hold none.
//! - The keeper renews every lease of this replica in one statement per interval and
//!   stops drivers whose lease was lost.
//! - The adopter claims runs with work whose lease is free or expired — left by a
//!   crashed, stalled or draining replica, or never driven — at start-up and then
//!   periodically, in bounded batches.
//! - On shutdown, drivers stop at a step boundary and hand their runs off with
//!   `lease.released{drained}`, so another replica adopts them without waiting for expiry.

mod agent;
mod calls;
mod checkpoint;
mod cluster;
mod contents;
mod decide;
mod delegate;
mod driver;
#[cfg(test)]
mod given;
mod interrupt;
mod lease;
mod mailbox;
mod outcome;
pub mod provider;
mod queue;
mod secrets;
mod settle;
mod shared;
mod state;
mod stream;
mod tools;
mod turn;
mod workspace;

pub use shared::{EngineOptions, EnginePorts};
pub use tools::MAX_OUTPUT_BYTES;
pub use workspace::CodeTools;

use baton_core::model::RunSummary;
use baton_core::ports::{Control, RunDriver};
use baton_core::{RunId, TenantId};
use baton_events::Envelope;
use shared::Shared;
use std::sync::Arc;
use std::time::Duration;

/// Cheap to clone; all clones share one set of drivers.
#[derive(Clone)]
pub struct Engine {
    shared: Arc<Shared>,
}

impl Engine {
    pub fn new(ports: EnginePorts, opts: EngineOptions) -> Self {
        Self {
            shared: Arc::new(Shared::new(ports, opts)),
        }
    }

    /// This replica's identity, as recorded in leases and events.
    pub fn replica(&self) -> &str {
        &self.shared.opts.replica
    }

    /// Runs with a live driver in this process.
    pub fn active_runs(&self) -> usize {
        self.shared.mailboxes.active()
    }

    /// Adopts what needs driving, then starts the keeper, the adopter (every interval)
    /// and the listener for other replicas' control messages.
    pub async fn start(&self) -> Result<(), baton_core::StoreError> {
        let control = self.shared.ports.recorder.bus.subscribe_control().await?;
        cluster::adopt(&self.shared).await?;
        cluster::spawn_keeper(self.shared.clone());
        cluster::spawn_adopter(self.shared.clone());
        cluster::spawn_listener(self.shared.clone(), control);
        Ok(())
    }

    /// One adoption round: claims runs with work and no live lease and starts their
    /// drivers. Returns how many it claimed.
    pub async fn run_once(&self) -> Result<usize, baton_core::StoreError> {
        cluster::adopt(&self.shared).await
    }

    /// Stops taking work, lets every driver reach a step boundary and hand its run off,
    /// and waits for them.
    pub async fn shutdown(&self) {
        self.shared.shutdown.cancel();
        self.shared.tasks.close();
        self.shared.tasks.wait().await;
        let handed_off = self
            .shared
            .handed_off
            .load(std::sync::atomic::Ordering::Relaxed);
        if handed_off > 0 {
            tracing::info!(handed_off, "asking the other replicas to adopt at once");
            self.shared.control(Control::Adopt).await;
        }
        self.shared.ports.recorder.bus.close(BUS_DRAIN).await;
    }
}

impl RunDriver for Engine {
    /// Wakes the run's driver here, starting one if needed, and tells the other
    /// replicas: if one of them holds the lease, its driver looks again at once. While
    /// this replica drains it only tells the others.
    fn wake(&self, tenant: TenantId, run: RunId) {
        self.wake_everywhere(tenant, run, None);
    }

    fn wake_from(&self, run: RunSummary, events: Vec<Envelope>) {
        self.wake_everywhere(run.tenant, run.id, Some((run, events)));
    }
}

impl Engine {
    /// [`RunDriver::wake`]; a driver started here takes its first step from `landed`.
    fn wake_everywhere(
        &self,
        tenant: TenantId,
        run: RunId,
        landed: Option<(RunSummary, Vec<Envelope>)>,
    ) {
        let shared = self.shared.clone();
        self.shared.tasks.spawn(async move {
            shared.control(Control::Wake { tenant, run }).await;
        });
        driver::wake_here(&self.shared, tenant, run, true, landed);
    }
}

/// How long a stopping replica waits for its last bus messages to go out.
const BUS_DRAIN: Duration = Duration::from_secs(2);
