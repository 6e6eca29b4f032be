//! The rows of `mcp_servers` and `mcp_discoveries`: a server's definition and each
//! discovery kept whole in one JSON column.

use super::{corrupt, to_json};
use baton_core::StoreError;
use baton_core::model::{McpDiscovery, McpOAuth, McpServer, SecretHeader};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::types::Json;
use uuid::Uuid;

/// Expands to the columns of `mcp_servers`, in the order its row type reads them.
macro_rules! mcp_server_columns {
    () => {
        "tenant_id, id, name, definition, version, created_at, updated_at"
    };
}
pub(crate) use mcp_server_columns;

/// A server's `definition` column: what the key and time columns do not hold.
#[derive(Serialize, Deserialize)]
struct Definition {
    url: String,
    #[serde(default)]
    secret_headers: Vec<SecretHeader>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    oauth: Option<McpOAuth>,
    timeout_ms: u64,
}

pub(crate) fn definition_json(s: &McpServer) -> Result<serde_json::Value, StoreError> {
    to_json(
        "an MCP server",
        &Definition {
            url: s.url.clone(),
            secret_headers: s.secret_headers.clone(),
            oauth: s.oauth.clone(),
            timeout_ms: s.timeout_ms,
        },
    )
}

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct McpServerRow {
    pub tenant_id: Uuid,
    pub id: Uuid,
    pub name: String,
    pub definition: Json<serde_json::Value>,
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl TryFrom<McpServerRow> for McpServer {
    type Error = StoreError;

    fn try_from(r: McpServerRow) -> Result<Self, StoreError> {
        let d: Definition = serde_json::from_value(r.definition.0).map_err(|e| {
            corrupt(format!(
                "MCP server {} has an unreadable definition: {e}",
                r.id
            ))
        })?;
        Ok(McpServer {
            id: r.id.into(),
            tenant: r.tenant_id.into(),
            name: r.name,
            url: d.url,
            secret_headers: d.secret_headers,
            oauth: d.oauth,
            timeout_ms: d.timeout_ms,
            version: r.version,
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct McpDiscoveryRow {
    pub server_id: Uuid,
    pub number: i64,
    pub discovered_at: DateTime<Utc>,
    pub result: Json<serde_json::Value>,
}

impl TryFrom<McpDiscoveryRow> for McpDiscovery {
    type Error = StoreError;

    /// The result holds the whole discovery; the number and time columns are
    /// authoritative.
    fn try_from(r: McpDiscoveryRow) -> Result<Self, StoreError> {
        let d: McpDiscovery = serde_json::from_value(r.result.0).map_err(|e| {
            corrupt(format!(
                "discovery {} of MCP server {} is unreadable: {e}",
                r.number, r.server_id
            ))
        })?;
        Ok(McpDiscovery {
            number: r.number,
            discovered_at: r.discovered_at,
            ..d
        })
    }
}
