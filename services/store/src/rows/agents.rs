//! The rows of `agents` and `agent_versions`, and an agent's JSON columns as stored.

use super::{corrupt, to_json};
use baton_core::StoreError;
use baton_core::model::{Agent, AgentLimits, ProviderSpec};
use baton_events::ToolId;
use chrono::{DateTime, Utc};
use sqlx::types::Json;
use uuid::Uuid;

/// Expands to the columns of `agents`, in the order its row type reads them.
macro_rules! agent_columns {
    () => {
        "tenant_id, id, name, instructions, provider, tools, limits, version, created_at, \
         updated_at, archived_at"
    };
}
pub(crate) use agent_columns;

/// Expands to the columns of `agent_versions` as an [`AgentRow`] reads them.
macro_rules! agent_version_columns {
    () => {
        "tenant_id, agent_id AS id, name, instructions, provider, tools, limits, version, \
         created_at, updated_at, CAST(NULL AS TIMESTAMPTZ) AS archived_at"
    };
}
pub(crate) use agent_version_columns;

/// A row of `agents` or `agent_versions`.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct AgentRow {
    pub tenant_id: Uuid,
    pub id: Uuid,
    pub name: String,
    pub instructions: String,
    pub provider: Json<serde_json::Value>,
    pub tools: Json<serde_json::Value>,
    pub limits: Json<serde_json::Value>,
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Always null in `agent_versions`: archiving is the agent's, not a version's.
    pub archived_at: Option<DateTime<Utc>>,
}

impl TryFrom<AgentRow> for Agent {
    type Error = StoreError;

    fn try_from(r: AgentRow) -> Result<Self, StoreError> {
        let unreadable = |what: &str, e: serde_json::Error| {
            corrupt(format!(
                "agent {} version {} has unreadable {what}: {e}",
                r.id, r.version
            ))
        };
        let provider: ProviderSpec =
            serde_json::from_value(r.provider.0).map_err(|e| unreadable("provider", e))?;
        let tools: Vec<ToolId> =
            serde_json::from_value(r.tools.0).map_err(|e| unreadable("tools", e))?;
        let limits: AgentLimits =
            serde_json::from_value(r.limits.0).map_err(|e| unreadable("limits", e))?;
        Ok(Agent {
            id: r.id.into(),
            tenant: r.tenant_id.into(),
            name: r.name,
            instructions: r.instructions,
            provider,
            tools,
            limits,
            version: r.version,
            created_at: r.created_at,
            updated_at: r.updated_at,
            archived_at: r.archived_at,
        })
    }
}

/// An agent's JSON columns as stored: `provider`, `tools` and `limits`.
pub(crate) struct AgentJson {
    pub provider: serde_json::Value,
    pub tools: serde_json::Value,
    pub limits: serde_json::Value,
}

impl AgentJson {
    pub fn of(agent: &Agent) -> Result<Self, StoreError> {
        Ok(AgentJson {
            provider: to_json("provider", &agent.provider)?,
            tools: to_json("tools", &agent.tools)?,
            limits: to_json("limits", &agent.limits)?,
        })
    }
}
