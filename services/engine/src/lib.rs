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

mod checkpoint;
mod cluster;
mod driver;
mod lease;
mod mailbox;
pub mod provider;
mod state;
mod tools;
mod turn;

pub use tools::MAX_OUTPUT_BYTES;

use baton_core::crypto::Keyring;
use baton_core::ports::{
    AgentStore, CheckpointStore, Clock, Control, ControlMessage, LeaseStore, RunDriver, RunReader,
    SecretReader, ToolStore,
};
use baton_core::runs::Recorder;
use baton_core::{RunId, TenantId};
use mailbox::Mailboxes;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Who this replica is and how it keeps its leases.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// The replica identity: configured name and boot id (`name/boot`). A restarted
    /// process has a new one, so it never believes it still owns its old leases.
    pub replica: String,
    /// How long a lease lasts without renewal.
    pub lease_ttl: Duration,
    /// How often the keeper renews this replica's leases.
    pub renew_every: Duration,
    /// How often the adopter looks for runs with work and no live lease.
    pub adopt_every: Duration,
    /// At most this many runs per adoption round.
    pub adopt_batch: u32,
}

impl EngineOptions {
    pub fn new(replica: impl Into<String>) -> Self {
        Self {
            replica: replica.into(),
            lease_ttl: Duration::from_secs(15),
            renew_every: Duration::from_secs(5),
            adopt_every: Duration::from_secs(2),
            adopt_batch: 100,
        }
    }
}

/// What the engine reads and writes through.
#[derive(Clone)]
pub struct EnginePorts {
    pub runs: Arc<dyn RunReader>,
    pub recorder: Recorder,
    pub leases: Arc<dyn LeaseStore>,
    pub agents: Arc<dyn AgentStore>,
    pub tools: Arc<dyn ToolStore>,
    pub secrets: Arc<dyn SecretReader>,
    pub checkpoints: Arc<dyn CheckpointStore>,
    /// Seals checkpoints.
    pub keyring: Arc<Keyring>,
    pub clock: Arc<dyn Clock>,
}

pub(crate) struct Inner {
    runs: Arc<dyn RunReader>,
    recorder: Recorder,
    leases: Arc<dyn LeaseStore>,
    agents: Arc<dyn AgentStore>,
    tools: Arc<dyn ToolStore>,
    secrets: Arc<dyn SecretReader>,
    checkpoints: Arc<dyn CheckpointStore>,
    keyring: Arc<Keyring>,
    /// Model and tool calls go through this client (one connection pool).
    http: reqwest::Client,
    clock: Arc<dyn Clock>,
    opts: EngineOptions,
    mailboxes: Mailboxes,
    /// Leases given up at shutdown (announced to the other replicas afterwards).
    handed_off: std::sync::atomic::AtomicUsize,
    /// Held while claimed leases are on their way to drivers, so the keeper never takes
    /// one of them for an orphan.
    claim_lock: tokio::sync::Mutex<()>,
    shutdown: CancellationToken,
    tasks: TaskTracker,
}

/// Cheap to clone; all clones share one set of drivers.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

impl Engine {
    pub fn new(ports: EnginePorts, opts: EngineOptions) -> Self {
        let EnginePorts {
            runs,
            recorder,
            leases,
            agents,
            tools,
            secrets,
            checkpoints,
            keyring,
            clock,
        } = ports;
        // Redirects are not followed: a tool endpoint answers itself, and a redirect
        // would carry the secret headers to another host.
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        Self {
            inner: Arc::new(Inner {
                runs,
                recorder,
                leases,
                agents,
                tools,
                secrets,
                checkpoints,
                keyring,
                http,
                clock,
                opts,
                mailboxes: Mailboxes::default(),
                handed_off: std::sync::atomic::AtomicUsize::new(0),
                claim_lock: tokio::sync::Mutex::new(()),
                shutdown: CancellationToken::new(),
                tasks: TaskTracker::new(),
            }),
        }
    }

    /// This replica's identity, as recorded in leases and events.
    pub fn replica(&self) -> &str {
        &self.inner.opts.replica
    }

    /// Runs with a live driver in this process.
    pub fn active_runs(&self) -> usize {
        self.inner.mailboxes.active()
    }

    /// Adopts what needs driving, then starts the keeper, the adopter (every interval)
    /// and the listener for other replicas' control messages.
    pub async fn start(&self) -> Result<(), baton_core::StoreError> {
        let control = self.inner.recorder.bus.subscribe_control().await?;
        cluster::adopt(self).await?;
        cluster::spawn_keeper(self.clone());
        cluster::spawn_adopter(self.clone());
        cluster::spawn_listener(self.clone(), control);
        Ok(())
    }

    /// One adoption round: claims runs with work and no live lease and starts their
    /// drivers. Returns how many it claimed.
    pub async fn run_once(&self) -> Result<usize, baton_core::StoreError> {
        cluster::adopt(self).await
    }

    /// Stops taking work, lets every driver reach a step boundary and hand its run off,
    /// and waits for them.
    pub async fn shutdown(&self) {
        self.inner.shutdown.cancel();
        self.inner.tasks.close();
        self.inner.tasks.wait().await;
        let handed_off = self
            .inner
            .handed_off
            .load(std::sync::atomic::Ordering::Relaxed);
        if handed_off > 0 {
            tracing::info!(handed_off, "asking the other replicas to adopt at once");
            self.inner.control(Control::Adopt).await;
        }
        self.inner.recorder.bus.close(BUS_DRAIN).await;
    }

    /// Starts a driver for the run, handing it `lease` when the caller already claimed it
    /// (a running driver gets the lease instead).
    fn spawn_driver(&self, tenant: TenantId, run: RunId, lease: Option<lease::Lease>) {
        let Some(notify) = self.inner.mailboxes.open(run, lease.clone()) else {
            return;
        };
        let inner = self.inner.clone();
        self.inner.tasks.spawn(async move {
            let _guard = PanicGuard {
                inner: inner.clone(),
                run,
            };
            driver::Driver::new(inner, tenant, run, notify, lease)
                .run()
                .await;
        });
    }
}

impl RunDriver for Engine {
    /// Wakes the run's driver here, starting one if needed, and tells the other
    /// replicas: if one of them holds the lease, its driver looks again at once. While
    /// this replica drains it only tells the others.
    fn wake(&self, tenant: TenantId, run: RunId) {
        let inner = self.inner.clone();
        self.inner.tasks.spawn(async move {
            inner.control(Control::Wake { tenant, run }).await;
        });
        self.wake_here(tenant, run, true);
    }
}

impl Engine {
    /// Wakes this replica's driver of the run, if any; otherwise starts one when the run
    /// was parked here (with its lease) or when `start` (the command was taken here).
    fn wake_here(&self, tenant: TenantId, run: RunId, start: bool) {
        if self.inner.shutdown.is_cancelled() || self.inner.mailboxes.wake(run) {
            return;
        }
        let parked_lease = self.inner.mailboxes.unpark(run);
        if start || parked_lease.is_some() {
            self.spawn_driver(tenant, run, parked_lease);
        }
    }
}

/// Forgets the run's mailbox if its driver panics, so the run is not left with a dead
/// driver: the keeper then frees its lease as an orphan and the run is driven again.
struct PanicGuard {
    inner: Arc<Inner>,
    run: RunId,
}

impl Drop for PanicGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            tracing::error!(run_id = %self.run, "a run's driver panicked; its lease will be freed");
            self.inner.mailboxes.forget(self.run);
        }
    }
}

/// How long a stopping replica waits for its last bus messages to go out.
const BUS_DRAIN: Duration = Duration::from_secs(2);

impl Inner {
    async fn control(&self, control: Control) {
        let msg = ControlMessage {
            from: self.opts.replica.clone(),
            control,
        };
        self.recorder.bus.publish_control(&msg).await;
    }
}
