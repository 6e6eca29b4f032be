//! What a turn needs from the run's agent version — the agent, its tools with their
//! input schemas compiled, its provider, and the outbound client under the tenant's egress
//! allowlist — loaded once per turn.
//!
//! An agent version never changes once written, and goes only with its agent, which may be
//! deleted only when archived and named by no run that has not ended (and an ended run
//! takes no more turns): this replica keeps the versions it read ([`AgentVersions`]), and
//! a turn reads the database for its tools (which may be deleted under a live run) and the
//! tenant's allowlist (which holds from the next turn on once changed), never for its
//! agent version twice.

use crate::outcome::{StepError, info};
use crate::provider::{self, Provider};
use crate::shared::Shared;
use baton_core::StoreError;
use baton_core::model::{Agent, RunSummary, Tool};
use baton_core::ports::AgentStore;
use baton_egress::TenantEgress;
use baton_events::{AgentId, TenantId, ToolId, ToolVersions};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The agent versions this replica keeps at most; past it, it starts over.
const KEPT_VERSIONS: usize = 4096;

/// The agent versions this replica has read, by tenant, agent and version.
#[derive(Default)]
pub(crate) struct AgentVersions {
    kept: Mutex<HashMap<(TenantId, AgentId, i64), Arc<Agent>>>,
}

impl AgentVersions {
    /// The run's agent version, read once per replica; `None` when it does not exist.
    async fn of(
        &self,
        agents: &dyn AgentStore,
        run: &RunSummary,
    ) -> Result<Option<Arc<Agent>>, StoreError> {
        let key = (run.tenant, run.agent_id, run.agent_version);
        if let Some(agent) = self.lock().get(&key) {
            return Ok(Some(agent.clone()));
        }
        let Some(agent) = agents
            .get_agent_version(run.tenant, run.agent_id, run.agent_version)
            .await?
        else {
            // Not kept: a version not found now is not found later either, and keeping
            // misses would let a caller fill the map with made-up keys.
            return Ok(None);
        };
        let agent = Arc::new(agent);
        let mut kept = self.lock();
        if kept.len() >= KEPT_VERSIONS {
            kept.clear();
        }
        kept.insert(key, agent.clone());
        Ok(Some(agent))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(TenantId, AgentId, i64), Arc<Agent>>> {
        // A panic while holding the lock leaves the map as it was: still usable.
        self.kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// What a turn needs from the run's agent version.
pub(crate) struct TurnContext {
    /// The turn it was loaded for: the next turn loads its own, so tools, the provider
    /// and the tenant's allowlist as changed between turns hold from the next turn on.
    pub turn: i64,
    pub agent: Arc<Agent>,
    /// The agent's tools that still exist, in the agent's order.
    pub tools: Vec<Tool>,
    /// Each tool's input schema, compiled once (or why it does not compile).
    schemas: HashMap<ToolId, Result<jsonschema::Validator, String>>,
    pub provider: Arc<dyn Provider>,
    /// The client of the turn's tool and model calls: the installation's egress policy,
    /// narrowed by the tenant's allowlist as it stood when the turn loaded.
    pub egress: TenantEgress,
}

impl TurnContext {
    /// The context of `agent` with `tools`, compiling each tool's input schema.
    pub(crate) fn new(
        turn: i64,
        agent: Arc<Agent>,
        tools: Vec<Tool>,
        provider: Arc<dyn Provider>,
        egress: TenantEgress,
    ) -> Self {
        let schemas = tools
            .iter()
            .map(|t| {
                let compiled =
                    jsonschema::validator_for(&t.input_schema).map_err(|e| e.to_string());
                (t.id, compiled)
            })
            .collect();
        Self {
            turn,
            agent,
            tools,
            schemas,
            provider,
            egress,
        }
    }

    /// The agent's tool named `name`.
    pub(crate) fn tool(&self, name: &str) -> Option<&Tool> {
        self.tools.iter().find(|t| t.name == name)
    }

    /// The tool's compiled input schema, or why it does not compile; `None` for a tool
    /// that is not the agent's.
    pub(crate) fn schema(&self, tool: ToolId) -> Option<&Result<jsonschema::Validator, String>> {
        self.schemas.get(&tool)
    }
}

/// Loads the run's agent version, its tools at the versions the run keeps (`pins`, from
/// its `run.created`; a tool it names no version of, in a run created before tools had
/// versions, at its current one) and its provider. A missing agent version or API key
/// secret fails the turn; a tool deleted since is left out.
pub(crate) async fn load(
    shared: &Shared,
    run: &RunSummary,
    pins: &ToolVersions,
) -> Result<TurnContext, StepError> {
    let Some(agent) = shared.agent_versions.of(&*shared.ports.agents, run).await? else {
        return Err(StepError::Turn(info(
            "agent_missing",
            "the run's agent version no longer exists",
        )));
    };
    let mut tools = Vec::with_capacity(agent.tools.len());
    for id in &agent.tools {
        let tool = match pins.get(id) {
            Some(v) => {
                shared
                    .ports
                    .tools
                    .get_tool_version(run.tenant, *id, *v)
                    .await?
            }
            None => shared.ports.tools.get_tool(run.tenant, *id).await?,
        };
        // Commands the operator switched off are not offered (nor, so, run).
        if let Some(t) = tool.filter(|t| !shared.ports.code.hides(t)) {
            tools.push(t);
        }
    }
    let hosts = match shared
        .ports
        .allowlists
        .get_egress_allowlist(run.tenant)
        .await?
    {
        Some(allowlist) => allowlist.rules()?,
        None => Vec::new(),
    };
    let egress = shared.ports.egress.for_tenant(hosts);
    let provider =
        provider::from_spec(&agent.provider, &egress, &*shared.ports.secrets, run.tenant).await?;
    Ok(TurnContext::new(
        run.turn_count,
        agent,
        tools,
        provider,
        egress,
    ))
}
