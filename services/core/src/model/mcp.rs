//! Model Context Protocol servers of a tenant, what a discovery found on them, and how a
//! discovered tool stands against the tool an admin enabled from it.
//!
//! A server's own words (tool names, descriptions, schemas, annotations) are an untrusted
//! party's: they are stored and shown as found, offered to no agent until an admin
//! enables the tool, and a later change is offered only once accepted.

use super::{SecretHeader, Tool};
use baton_events::{McpServerId, TenantId, ToolId};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// A tenant's MCP server, reached over the Streamable HTTP transport.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct McpServer {
    pub id: McpServerId,
    #[serde(skip)]
    pub tenant: TenantId,
    /// Unique within the tenant (`[A-Za-z0-9_-]{1,64}`).
    pub name: String,
    /// The server's MCP endpoint (`http` or `https`).
    pub url: String,
    /// Request headers whose values come from the tenant's encrypted secrets (a bearer
    /// token: `{"header": "Authorization", "secret": "..."}` with the secret holding
    /// `Bearer ...`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secret_headers: Vec<SecretHeader>,
    /// OAuth client credentials, for a server that asks for a token (the MCP
    /// authorization flow: its protected resource metadata names the authorization server,
    /// whose token endpoint Baton asks with the `client_credentials` grant).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oauth: Option<McpOAuth>,
    /// A discovery, or one call of a tool with no timeout of its own, may take this long.
    pub timeout_ms: u64,
    /// 1 when created, one more at each change.
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A client of an MCP server's authorization server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct McpOAuth {
    pub client_id: String,
    /// The name of the tenant secret holding the client secret.
    pub client_secret: String,
    /// The scope asked for, if the server wants one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// The authorization server trusted with the client secret (its issuer URL). When
    /// set, a server naming another is refused; when not, the token endpoint must be on
    /// the origin of the issuer the server names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
}

/// What one discovery found: the server's tools as it listed them, numbered from 1 per
/// server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct McpDiscovery {
    pub number: i64,
    pub discovered_at: DateTime<Utc>,
    /// The protocol revision the server and Baton agreed on.
    pub protocol_version: String,
    /// The server's name and version, as it gave them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_info: Option<McpImplementation>,
    pub tools: Vec<McpToolInfo>,
}

/// A server's name for itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct McpImplementation {
    pub name: String,
    #[serde(default)]
    pub version: String,
}

/// One tool as a server listed it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct McpToolInfo {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default)]
    pub description: String,
    /// JSON schema of the arguments.
    #[schema(value_type = Object)]
    pub input_schema: serde_json::Value,
    /// The server's hints (`readOnlyHint`, `destructiveHint`, `idempotentHint`,
    /// `openWorldHint`): shown, never trusted; Baton calls a tool with the effect an admin
    /// chose.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub annotations: Option<serde_json::Value>,
}

/// How a tool of the latest discovery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum McpToolStatus {
    /// Discovered, not enabled: no agent may call it.
    Available,
    /// Enabled, and the server lists it as it was accepted.
    Enabled,
    /// Enabled, but the server lists another description or input schema: agents keep
    /// the accepted definition until an admin accepts the new one (enabling it again).
    Changed,
    /// Enabled, but the latest discovery did not list it.
    Removed,
}

/// A tool of a server: what the latest discovery found, and the tool enabled from it.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct McpToolState {
    pub name: String,
    pub status: McpToolStatus,
    /// As the latest discovery listed it; none when it is gone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub discovered: Option<McpToolInfo>,
    /// The Baton tool enabled from it: what agents attach and the model calls.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, format = Uuid)]
    pub tool_id: Option<ToolId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<String>,
}

/// The names that came, went or changed between two discoveries.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct McpToolChanges {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    /// Listed by both, with another description, input schema or annotations.
    pub changed: Vec<String>,
}

impl McpToolChanges {
    /// What changed from `before` (none: the first discovery) to `after`.
    pub fn between(before: Option<&[McpToolInfo]>, after: &[McpToolInfo]) -> Self {
        let before = before.unwrap_or_default();
        let find = |list: &[McpToolInfo], name: &str| list.iter().find(|t| t.name == name).cloned();
        let mut changes = McpToolChanges::default();
        for t in after {
            match find(before, &t.name) {
                None => changes.added.push(t.name.clone()),
                Some(old) if old != *t => changes.changed.push(t.name.clone()),
                Some(_) => {}
            }
        }
        for t in before {
            if find(after, &t.name).is_none() {
                changes.removed.push(t.name.clone());
            }
        }
        changes
    }

    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }
}

/// How tool `name` of a server stands, given its latest discovered definition and the
/// tool enabled from it.
pub fn mcp_tool_status(discovered: Option<&McpToolInfo>, enabled: Option<&Tool>) -> McpToolStatus {
    match (discovered, enabled) {
        (_, None) => McpToolStatus::Available,
        (None, Some(_)) => McpToolStatus::Removed,
        (Some(d), Some(t))
            if d.description == t.description && d.input_schema == t.input_schema =>
        {
            McpToolStatus::Enabled
        }
        (Some(_), Some(_)) => McpToolStatus::Changed,
    }
}
