//! What every driver and background loop of this replica shares: the ports, the HTTP
//! client, the options, the drivers' mailboxes and the shutdown token. It holds no
//! per-run state and starts nothing.

use crate::mailbox::Mailboxes;
use baton_core::crypto::Keyring;
use baton_core::model::{AuditAction, AuditEntry, RunSummary};
use baton_core::ports::{
    AgentStore, AuditStore, CheckpointStore, Clock, Control, ControlMessage, EgressAllowlistStore,
    LeaseStore, McpServerStore, RunReader, SecretReader, ToolStore,
};
use baton_core::runs::Recorder;
use baton_egress::Egress;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
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
    /// The servers `mcp` tools are called on.
    pub mcp_servers: Arc<dyn McpServerStore>,
    pub secrets: Arc<dyn SecretReader>,
    pub checkpoints: Arc<dyn CheckpointStore>,
    /// Seals checkpoints.
    pub keyring: Arc<Keyring>,
    pub clock: Arc<dyn Clock>,
    /// Every model and tool call goes out through it, under the egress policy.
    pub egress: Egress,
    /// Tenants' egress allowlists, which narrow the policy for their calls.
    pub allowlists: Arc<dyn EgressAllowlistStore>,
    /// Where refused outbound calls are recorded.
    pub audit: Arc<dyn AuditStore>,
    /// Runs' files, which the workspace tools read and their promotions change.
    pub workspaces: Arc<dyn baton_core::ports::WorkspaceStore>,
    /// Where the workspace tools' commands run.
    pub code: crate::workspace::CodeTools,
    /// The environments commands run in.
    pub environments: baton_core::environments::Environments,
    /// Keys and members, for the role a turn's commands act with.
    pub api_keys: Arc<dyn baton_core::ports::ApiKeyStore>,
    pub users: Arc<dyn baton_core::ports::UserStore>,
    /// Starts the child runs of `delegate` tool calls (filled once the run use cases,
    /// which drive runs through this engine, exist).
    pub delegator: baton_core::ports::DelegatorSlot,
}

pub(crate) struct Shared {
    pub(crate) ports: EnginePorts,
    pub(crate) opts: EngineOptions,
    pub(crate) mailboxes: Mailboxes,
    /// The agent versions this replica has read (they never change).
    pub(crate) agent_versions: crate::agent::AgentVersions,
    /// Leases given up at shutdown (announced to the other replicas afterwards).
    pub(crate) handed_off: AtomicUsize,
    /// Held while claimed leases are on their way to drivers, so the keeper never takes
    /// one of them for an orphan.
    pub(crate) claim_lock: tokio::sync::Mutex<()>,
    pub(crate) shutdown: CancellationToken,
    pub(crate) tasks: TaskTracker,
}

impl Shared {
    pub(crate) fn new(ports: EnginePorts, opts: EngineOptions) -> Self {
        Self {
            ports,
            opts,
            mailboxes: Mailboxes::default(),
            agent_versions: crate::agent::AgentVersions::default(),
            handed_off: AtomicUsize::new(0),
            claim_lock: tokio::sync::Mutex::new(()),
            shutdown: CancellationToken::new(),
            tasks: TaskTracker::new(),
        }
    }

    /// Tells the other replicas (and not this one) over the bus.
    pub(crate) async fn control(&self, control: Control) {
        let msg = ControlMessage {
            from: self.opts.replica.clone(),
            control,
        };
        self.ports.recorder.bus.publish_control(&msg).await;
    }

    /// Records in the run's tenant's audit stream that the egress policy refused a call of
    /// the run to `url` (its host is the entry's target, never an address it resolved
    /// to), with `details` and the run's id. A failed write is logged; the run goes on.
    pub(crate) async fn audit_refusal(
        &self,
        run: &RunSummary,
        url: Option<&str>,
        mut details: serde_json::Value,
    ) {
        let host = url
            .and_then(|u| url::Url::parse(u).ok())
            .and_then(|u| u.host_str().map(str::to_owned))
            .unwrap_or_default();
        details["run"] = serde_json::json!(run.id);
        let entry = AuditEntry::engine(
            self.ports.clock.now(),
            AuditAction::EgressDenied,
            host,
            details,
        );
        if let Err(e) = self.ports.audit.append_audit(run.tenant, &entry).await {
            tracing::warn!(error = %e, "the audit entry of a refused call was not written");
        }
    }

    /// Counts a run given up to the other replicas during the drain.
    pub(crate) fn count_hand_off(&self) {
        self.handed_off
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}
