//! MCP servers: their definitions and discoveries, and the client that lists their
//! tools.

use crate::egress::HostRule;
use crate::error::StoreError;
use crate::model::{AuditEntry, McpDiscovery, McpImplementation, McpServer, McpToolInfo};
use async_trait::async_trait;
use baton_events::{McpServerId, TenantId};
use std::time::Duration;

/// The discoveries kept per server: the latest and those before it, the older ones
/// deleted as new ones are stored.
pub const MCP_DISCOVERIES_KEPT: i64 = 20;

#[async_trait]
pub trait McpServerStore: Send + Sync {
    /// Stores a new server with its audit entry; a name the tenant already uses is
    /// `Conflict`.
    async fn create_mcp_server(&self, s: &McpServer, audit: &AuditEntry) -> Result<(), StoreError>;

    /// One of the tenant's servers; another tenant's is `None`.
    async fn get_mcp_server(
        &self,
        tenant: TenantId,
        id: McpServerId,
    ) -> Result<Option<McpServer>, StoreError>;

    /// The tenant's servers newest first, older than `before` when given, at most
    /// `limit`.
    async fn list_mcp_servers(
        &self,
        tenant: TenantId,
        before: Option<McpServerId>,
        limit: u32,
    ) -> Result<Vec<McpServer>, StoreError>;

    /// Replaces the server by `s` (whose `version` is the new one) if its stored version
    /// is still `expected`, with its audit entry; `false` when it moved or is gone. A name
    /// another server has is `Conflict`.
    async fn update_mcp_server(
        &self,
        s: &McpServer,
        expected: i64,
        audit: &AuditEntry,
    ) -> Result<bool, StoreError>;

    /// Deletes the server and its discoveries with the audit entry; `false` when there is
    /// no such server.
    async fn delete_mcp_server(
        &self,
        tenant: TenantId,
        id: McpServerId,
        audit: &AuditEntry,
    ) -> Result<bool, StoreError>;

    /// Stores `d` as the server's discovery `d.number`, with its audit entry, and deletes
    /// those older than the last [`MCP_DISCOVERIES_KEPT`]; `Conflict` when that number is
    /// taken (another discovery was stored meanwhile), `NotFound` when the server is gone.
    async fn add_mcp_discovery(
        &self,
        tenant: TenantId,
        server: McpServerId,
        d: &McpDiscovery,
        audit: &AuditEntry,
    ) -> Result<(), StoreError>;

    /// The server's latest discovery.
    async fn latest_mcp_discovery(
        &self,
        tenant: TenantId,
        server: McpServerId,
    ) -> Result<Option<McpDiscovery>, StoreError>;
}

/// A server's tools as it listed them.
#[derive(Debug, Clone, PartialEq)]
pub struct ListedTools {
    pub protocol_version: String,
    pub server_info: Option<McpImplementation>,
    pub tools: Vec<McpToolInfo>,
}

/// A client of an MCP server's authorization server, its secret revealed (so its `Debug`
/// leaves the secret out).
#[derive(Clone, PartialEq, Eq)]
pub struct ClientCredentials {
    pub client_id: String,
    pub client_secret: String,
    pub scope: Option<String>,
    /// The only authorization server the secret may go to, if pinned.
    pub issuer: Option<String>,
}

impl std::fmt::Debug for ClientCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientCredentials")
            .field("client_id", &self.client_id)
            .field("scope", &self.scope)
            .field("issuer", &self.issuer)
            .finish_non_exhaustive()
    }
}

/// Lists an MCP server's tools through the egress client.
#[async_trait]
pub trait McpLister: Send + Sync {
    /// Every tool `url` lists (all pages), under the installation's egress policy
    /// narrowed by `hosts`, with `headers` and, for a server that asks, the OAuth client
    /// credentials `oauth`, within `timeout`; or in a few
    /// words why not (never an address, never a secret).
    async fn list_tools(
        &self,
        hosts: Vec<HostRule>,
        url: &url::Url,
        headers: Vec<(String, String)>,
        oauth: Option<ClientCredentials>,
        timeout: Duration,
    ) -> Result<ListedTools, String>;
}
