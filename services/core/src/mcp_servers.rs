//! MCP servers as a tool source: an admin registers a server (its Streamable HTTP URL,
//! headers from the tenant's secrets, a timeout); a member asks Baton to list its tools
//! (a discovery, stored numbered and shown); an admin enables a discovered tool, which
//! makes a Baton tool of kind `mcp` with the effect and approval the admin chose.
//!
//! **Nothing a server says is trusted.** Its annotations are shown, never used: a tool's
//! effect is the admin's (a mutation unless they say otherwise). A discovery that finds
//! an enabled tool changed (another description or input schema) does not touch the
//! enabled tool: agents keep calling the definition that was accepted, and the change is
//! shown as `changed` until an admin enables the tool again, accepting it. Every request
//! to a server goes through the egress client, and the URL is checked against the
//! policy and the tenant's allowlist when it is stored, at each discovery, and at each
//! call.

use crate::egress_allowlists::EgressAllowlists;
use crate::error::CoreError;
use crate::model::{
    Action, AuditAction, AuditEntry, McpDiscovery, McpOAuth, McpServer, McpToolChanges,
    McpToolInfo, McpToolState, Principal, SecretHeader, Tool, ToolKindSpec, mcp_tool_status,
};
use crate::page::{self, Page};
use crate::ports::{ClientCredentials, Clock, McpLister, McpServerStore, SecretReader, ToolStore};
use crate::tools::{self, NewTool, Tools};
use crate::validate;
use baton_events::{McpServerId, ToolEffect};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;

/// Most servers one tenant may register.
pub const MAX_SERVERS: u32 = 50;
/// Most tools one discovery keeps; a server listing more is refused.
pub const MAX_TOOLS: usize = 500;
/// Per discovery and call when the server does not say, in milliseconds.
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;

/// A server as a client registers or replaces it.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewMcpServer {
    /// `[A-Za-z0-9_-]{1,64}`, unique in the tenant.
    pub name: String,
    /// The server's Streamable HTTP endpoint, e.g. `https://mcp.example.com/mcp`.
    pub url: String,
    /// Headers whose values come from the tenant's secrets.
    #[serde(default)]
    pub secret_headers: Vec<SecretHeader>,
    /// OAuth client credentials (the secret by name), for a server that asks for a
    /// token.
    #[serde(default)]
    pub oauth: Option<McpOAuth>,
    /// Per discovery, and per call of a tool enabled without its own; default 30000.
    #[serde(default = "default_timeout")]
    pub timeout_ms: u64,
}

fn default_timeout() -> u64 {
    DEFAULT_TIMEOUT_MS
}

/// How an admin enables a discovered tool (or accepts its changed definition). A field
/// left out takes its value from [`EnableMcpTool::default`].
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct EnableMcpTool {
    /// The Baton tool's name, what the model calls (`[A-Za-z0-9_-]{1,64}`, unique in the
    /// tenant); default: the server's name for it. Kept when accepting a change, unless
    /// given.
    pub name: Option<String>,
    /// What a call may change, whatever the server's annotations say: `read` (a call cut
    /// off is made again) or `mutation` (held `uncertain` for a member); default
    /// `mutation`.
    pub effect: ToolEffect,
    /// The server recognises a repeated call by its idempotency key (a mutation cut off
    /// may be sent again).
    pub idempotent: bool,
    pub requires_approval: bool,
    /// Per call; default: the server's timeout.
    pub timeout_ms: Option<u64>,
}

impl Default for EnableMcpTool {
    /// A mutation, not idempotent, no approval, named as the server names it, with the
    /// server's timeout.
    fn default() -> Self {
        EnableMcpTool {
            name: None,
            effect: ToolEffect::Mutation,
            idempotent: false,
            requires_approval: false,
            timeout_ms: None,
        }
    }
}

/// A discovery and what changed since the one before.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct DiscoveryReport {
    pub discovery: McpDiscovery,
    pub changes: McpToolChanges,
}

/// A server's tools: the latest discovery's, each with how it stands.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct McpToolList {
    /// The discovery they come from; none before the first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub discovery: Option<i64>,
    pub tools: Vec<McpToolState>,
}

#[derive(Clone)]
pub struct McpServers {
    pub store: Arc<dyn McpServerStore>,
    /// Where enabled tools live (and which of them are a server's).
    pub tool_store: Arc<dyn ToolStore>,
    pub tools: Tools,
    pub secrets: Arc<dyn SecretReader>,
    pub lister: Arc<dyn McpLister>,
    pub clock: Arc<dyn Clock>,
    pub egress: EgressAllowlists,
}

impl McpServers {
    #[tracing::instrument(name = "mcp_servers.create", skip_all)]
    pub async fn create(&self, p: &Principal, new: NewMcpServer) -> Result<McpServer, CoreError> {
        p.require(Action::ManageMcpServers)?;
        self.check(p, &new).await?;
        let existing = self
            .store
            .list_mcp_servers(p.tenant, None, MAX_SERVERS)
            .await?;
        if existing.len() >= MAX_SERVERS as usize {
            return Err(CoreError::invalid(format!(
                "the tenant has {MAX_SERVERS} MCP servers, the most it may have"
            )));
        }
        let now = self.clock.now();
        let server = McpServer {
            id: McpServerId::new(),
            tenant: p.tenant,
            name: new.name,
            url: new.url,
            secret_headers: new.secret_headers,
            oauth: new.oauth,
            timeout_ms: new.timeout_ms,
            version: 1,
            created_at: now,
            updated_at: now,
        };
        let audit = self.audit(p, AuditAction::McpServerCreated, &server);
        match self.store.create_mcp_server(&server, &audit).await {
            Err(crate::StoreError::Conflict { .. }) => Err(taken(&server.name)),
            other => other.map(|()| server).map_err(CoreError::from),
        }
    }

    #[tracing::instrument(name = "mcp_servers.get", skip_all)]
    pub async fn get(&self, p: &Principal, id: McpServerId) -> Result<McpServer, CoreError> {
        p.require(Action::ReadTools)?;
        self.store
            .get_mcp_server(p.tenant, id)
            .await?
            .ok_or(CoreError::NotFound("MCP server"))
    }

    #[tracing::instrument(name = "mcp_servers.list", skip_all)]
    pub async fn list(
        &self,
        p: &Principal,
        cursor: Option<McpServerId>,
        limit: Option<u32>,
    ) -> Result<Page<McpServer>, CoreError> {
        p.require(Action::ReadTools)?;
        let limit = page::limit(limit)?;
        let items = self.store.list_mcp_servers(p.tenant, cursor, limit).await?;
        Ok(Page::of(items, limit, |s| s.id.to_string()))
    }

    /// Replaces the server's name, URL, headers and timeout. Its enabled tools call the
    /// new URL from their next call.
    #[tracing::instrument(name = "mcp_servers.replace", skip_all)]
    pub async fn replace(
        &self,
        p: &Principal,
        id: McpServerId,
        new: NewMcpServer,
    ) -> Result<McpServer, CoreError> {
        p.require(Action::ManageMcpServers)?;
        self.check(p, &new).await?;
        let current = self.get(p, id).await?;
        let server = McpServer {
            name: new.name,
            url: new.url,
            secret_headers: new.secret_headers,
            oauth: new.oauth,
            timeout_ms: new.timeout_ms,
            version: current.version + 1,
            updated_at: self.clock.now(),
            ..current
        };
        let audit = self.audit(p, AuditAction::McpServerUpdated, &server);
        match self
            .store
            .update_mcp_server(&server, current.version, &audit)
            .await
        {
            Ok(true) => Ok(server),
            Ok(false) => Err(CoreError::Conflict),
            Err(crate::StoreError::Conflict { .. }) => Err(taken(&server.name)),
            Err(e) => Err(e.into()),
        }
    }

    /// Deletes the server and its discoveries; refused while a tool enabled from it
    /// exists (delete those first: they may be archived and then deleted).
    #[tracing::instrument(name = "mcp_servers.delete", skip_all)]
    pub async fn delete(&self, p: &Principal, id: McpServerId) -> Result<(), CoreError> {
        p.require(Action::ManageMcpServers)?;
        let server = self.get(p, id).await?;
        let enabled = self.enabled_tools(p, id).await?;
        if !enabled.is_empty() {
            let names: Vec<&str> = enabled.iter().map(|t| t.name.as_str()).collect();
            return Err(CoreError::InUse(format!(
                "MCP server {id} ({}) has enabled tools ({}): archive and delete them first",
                server.name,
                names.join(", ")
            )));
        }
        let audit = self.audit(p, AuditAction::McpServerDeleted, &server);
        match self.store.delete_mcp_server(p.tenant, id, &audit).await? {
            true => Ok(()),
            false => Err(CoreError::NotFound("MCP server")),
        }
    }

    /// Lists the server's tools now and stores them as its next discovery. Enabled tools
    /// are not changed: a difference shows as `changed` until accepted.
    #[tracing::instrument(name = "mcp_servers.discover", skip_all)]
    pub async fn discover(
        &self,
        p: &Principal,
        id: McpServerId,
    ) -> Result<DiscoveryReport, CoreError> {
        p.require(Action::DiscoverMcpTools)?;
        let server = self.get(p, id).await?;
        let url = validate::http_url("url", &server.url)?;
        self.egress.check_definition(p.tenant, "url", &url).await?;
        let hosts = self.egress.rules(p.tenant).await?;
        let headers = self.headers(p, &server).await?;
        let oauth = match &server.oauth {
            Some(o) => Some(ClientCredentials {
                client_id: o.client_id.clone(),
                client_secret: self
                    .reveal(p, &o.client_secret, "oauth.client_secret")
                    .await?,
                scope: o.scope.clone(),
                issuer: o.issuer.clone(),
            }),
            None => None,
        };
        let listed = self
            .lister
            .list_tools(
                hosts,
                &url,
                headers,
                oauth,
                Duration::from_millis(server.timeout_ms),
            )
            .await
            .map_err(|why| CoreError::Upstream(format!("MCP server {}: {why}", server.name)))?;
        let tools = checked_tools(listed.tools)?;
        let before = self.store.latest_mcp_discovery(p.tenant, id).await?;
        let discovery = McpDiscovery {
            number: before.as_ref().map_or(1, |d| d.number + 1),
            discovered_at: self.clock.now(),
            protocol_version: listed.protocol_version,
            server_info: listed.server_info,
            tools,
        };
        let changes = McpToolChanges::between(
            before.as_ref().map(|d| d.tools.as_slice()),
            &discovery.tools,
        );
        let audit = AuditEntry::by(
            p,
            discovery.discovered_at,
            AuditAction::McpServerDiscovered,
            id.to_string(),
            serde_json::json!({
                "discovery": discovery.number,
                "tools": discovery.tools.len(),
                "added": changes.added,
                "removed": changes.removed,
                "changed": changes.changed,
            }),
        );
        match self
            .store
            .add_mcp_discovery(p.tenant, id, &discovery, &audit)
            .await
        {
            Ok(()) => Ok(DiscoveryReport { discovery, changes }),
            Err(crate::StoreError::NotFound) => Err(CoreError::NotFound("MCP server")),
            Err(e) => Err(e.into()),
        }
    }

    /// The server's tools as its latest discovery listed them, and the enabled ones it no
    /// longer lists, each with how it stands.
    #[tracing::instrument(name = "mcp_servers.tools", skip_all)]
    pub async fn tools(&self, p: &Principal, id: McpServerId) -> Result<McpToolList, CoreError> {
        self.get(p, id).await?;
        let latest = self.store.latest_mcp_discovery(p.tenant, id).await?;
        let enabled = self.enabled_tools(p, id).await?;
        let by_name = |name: &str| {
            enabled
                .iter()
                .find(|t| matches!(&t.kind, ToolKindSpec::Mcp { tool, .. } if tool == name))
        };
        let discovered = latest.as_ref().map_or(&[][..], |d| d.tools.as_slice());
        let mut tools: Vec<McpToolState> = discovered
            .iter()
            .map(|d| state(&d.name, Some(d), by_name(&d.name)))
            .collect();
        for t in &enabled {
            let ToolKindSpec::Mcp { tool, .. } = &t.kind else {
                continue;
            };
            if !discovered.iter().any(|d| &d.name == tool) {
                tools.push(state(tool, None, Some(t)));
            }
        }
        Ok(McpToolList {
            discovery: latest.map(|d| d.number),
            tools,
        })
    }

    /// Enables tool `name` of the latest discovery as a Baton tool with the admin's
    /// effect and approval policy, or, when it is enabled already, stores its latest
    /// definition and the policy given as that tool's next version (accepting a change).
    #[tracing::instrument(name = "mcp_servers.enable", skip_all)]
    pub async fn enable(
        &self,
        p: &Principal,
        id: McpServerId,
        name: &str,
        how: EnableMcpTool,
    ) -> Result<Tool, CoreError> {
        p.require(Action::ManageMcpServers)?;
        p.require(Action::ManageTools)?;
        let server = self.get(p, id).await?;
        let latest = self.store.latest_mcp_discovery(p.tenant, id).await?;
        let Some(found) = latest
            .as_ref()
            .and_then(|d| d.tools.iter().find(|t| t.name == name))
        else {
            return Err(CoreError::NotFound("discovered tool"));
        };
        let enabled = self.enabled_tools(p, id).await?;
        let current = enabled
            .into_iter()
            .find(|t| matches!(&t.kind, ToolKindSpec::Mcp { tool, .. } if tool == name));
        let tool_name = how
            .name
            .or_else(|| current.as_ref().map(|t| t.name.clone()))
            .unwrap_or_else(|| name.to_string());
        let new = NewTool {
            name: tool_name,
            description: found
                .description
                .chars()
                .take(tools::MAX_DESCRIPTION_CHARS)
                .collect(),
            input_schema: found.input_schema.clone(),
            effect: how.effect,
            idempotent: how.idempotent,
            requires_approval: how.requires_approval,
            timeout_ms: how.timeout_ms.unwrap_or(server.timeout_ms),
            kind: ToolKindSpec::Mcp {
                server_id: id,
                tool: name.to_string(),
            },
        };
        let audit = AuditEntry::by(
            p,
            self.clock.now(),
            AuditAction::McpToolEnabled,
            id.to_string(),
            serde_json::json!({
                "tool": name,
                "discovery": latest.as_ref().map(|d| d.number),
                "effect": how.effect,
                "requires_approval": how.requires_approval,
            }),
        );
        self.tools.put_mcp(p, current, new, &audit).await
    }

    /// The tenant's tools, archived or not, enabled from server `id`.
    async fn enabled_tools(&self, p: &Principal, id: McpServerId) -> Result<Vec<Tool>, CoreError> {
        let store = &self.tool_store;
        page::every(
            |archived, before| store.list_tools(p.tenant, archived, before, page::MAX_LIMIT),
            |t: &Tool| t.id,
            |t| matches!(&t.kind, ToolKindSpec::Mcp { server_id, .. } if *server_id == id),
        )
        .await
        .map_err(CoreError::from)
    }

    /// The server's headers in the clear; a secret that is not set is a bad request.
    async fn headers(
        &self,
        p: &Principal,
        server: &McpServer,
    ) -> Result<Vec<(String, String)>, CoreError> {
        let mut headers = Vec::with_capacity(server.secret_headers.len());
        for h in &server.secret_headers {
            let what = format!("header {}", h.header);
            headers.push((h.header.clone(), self.reveal(p, &h.secret, &what).await?));
        }
        Ok(headers)
    }

    /// Secret `name` in the clear; one that is not set is a bad request naming `what`
    /// needs it.
    async fn reveal(&self, p: &Principal, name: &str, what: &str) -> Result<String, CoreError> {
        self.secrets
            .reveal(p.tenant, name)
            .await?
            .ok_or_else(|| CoreError::invalid(format!("the secret {name:?} of {what} is not set")))
    }

    /// A definition whose name, URL (policy and allowlist), headers or timeout is wrong
    /// is refused whole.
    async fn check(&self, p: &Principal, new: &NewMcpServer) -> Result<(), CoreError> {
        tools::check_name("name", &new.name)?;
        let url = validate::http_url("url", &new.url)?;
        self.egress.check_definition(p.tenant, "url", &url).await?;
        tools::check_headers("secret_headers", &new.secret_headers)?;
        if let Some(o) = &new.oauth {
            let printable = |s: &str| !s.is_empty() && s.chars().all(|c| (' '..='~').contains(&c));
            if !printable(&o.client_id) || o.client_id.len() > 256 {
                return Err(CoreError::invalid(
                    "oauth.client_id must be 1 to 256 printable ASCII characters",
                ));
            }
            tools::check_name("oauth.client_secret", &o.client_secret)?;
            if o.scope
                .as_deref()
                .is_some_and(|s| !printable(s) || s.len() > 1000)
            {
                return Err(CoreError::invalid(
                    "oauth.scope must be 1 to 1000 printable ASCII characters",
                ));
            }
            if let Some(issuer) = &o.issuer {
                let issuer = validate::http_url("oauth.issuer", issuer)?;
                self.egress
                    .check_definition(p.tenant, "oauth.issuer", &issuer)
                    .await?;
            }
            if new
                .secret_headers
                .iter()
                .any(|h| h.header.eq_ignore_ascii_case("authorization"))
            {
                return Err(CoreError::invalid(
                    "secret_headers may not set Authorization when oauth is given: the token \
                     goes there",
                ));
            }
        }
        if new.timeout_ms == 0 || new.timeout_ms > tools::MAX_TIMEOUT_MS {
            return Err(CoreError::invalid(format!(
                "timeout_ms must be between 1 and {}",
                tools::MAX_TIMEOUT_MS
            )));
        }
        Ok(())
    }

    fn audit(&self, p: &Principal, action: AuditAction, s: &McpServer) -> AuditEntry {
        AuditEntry::by(
            p,
            self.clock.now(),
            action,
            s.id.to_string(),
            serde_json::json!({"name": s.name, "version": s.version}),
        )
    }
}

fn taken(name: &str) -> CoreError {
    CoreError::AlreadyExists(format!("an MCP server named {name:?} already exists"))
}

fn state(name: &str, discovered: Option<&McpToolInfo>, enabled: Option<&Tool>) -> McpToolState {
    McpToolState {
        name: name.to_string(),
        status: mcp_tool_status(discovered, enabled),
        discovered: discovered.cloned(),
        tool_id: enabled.map(|t| t.id),
        tool_name: enabled.map(|t| t.name.clone()),
    }
}

/// A server's tool list, as far as Baton keeps it: at most [`MAX_TOOLS`], each named
/// within the limits of a tool name on the server's side, listed once.
/// Whether a string (or key) anywhere in `v` holds a NUL, which no database keeps in a
/// JSON document.
fn holds_nul(v: &serde_json::Value) -> bool {
    use serde_json::Value;
    match v {
        Value::String(s) => s.contains('\0'),
        Value::Array(items) => items.iter().any(holds_nul),
        Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || holds_nul(v)),
        Value::Null | Value::Bool(_) | Value::Number(_) => false,
    }
}

fn checked_tools(tools: Vec<McpToolInfo>) -> Result<Vec<McpToolInfo>, CoreError> {
    if tools.len() > MAX_TOOLS {
        return Err(CoreError::Upstream(format!(
            "the server lists {} tools; Baton keeps at most {MAX_TOOLS}",
            tools.len()
        )));
    }
    let mut seen = std::collections::HashSet::new();
    for t in &tools {
        if t.name.is_empty() || t.name.len() > 128 || t.name.chars().any(char::is_control) {
            return Err(CoreError::Upstream(
                "the server lists a tool whose name is empty, longer than 128 bytes or holds \
                 control characters"
                    .into(),
            ));
        }
        let texts = [Some(&t.description), t.title.as_ref()];
        if texts.into_iter().flatten().any(|s| s.contains('\0'))
            || holds_nul(&t.input_schema)
            || t.annotations.as_ref().is_some_and(holds_nul)
        {
            return Err(CoreError::Upstream(format!(
                "the server's definition of tool {:?} holds a NUL character",
                t.name
            )));
        }
        if !seen.insert(t.name.as_str()) {
            return Err(CoreError::Upstream(format!(
                "the server lists tool {:?} twice",
                t.name
            )));
        }
    }
    Ok(tools)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str, schema: serde_json::Value) -> McpToolInfo {
        McpToolInfo {
            name: name.into(),
            title: None,
            description: "d".into(),
            input_schema: schema,
            annotations: None,
        }
    }

    #[test]
    fn a_listing_no_database_could_keep_is_the_servers_fault() {
        let fine = json!({"type": "object"});
        assert!(checked_tools(vec![tool("a", fine.clone())]).is_ok());
        let nul_deep = json!({"type": "object", "properties": {"x": {"enum": ["a\u{0}b"]}}});
        let nul_key = json!({"properties": {"a\u{0}": {}}});
        for bad in [
            vec![tool("a", nul_deep)],
            vec![tool("a", nul_key)],
            vec![McpToolInfo {
                title: Some("t\u{0}".into()),
                ..tool("a", fine.clone())
            }],
            vec![tool("a", fine.clone()), tool("a", fine.clone())],
            vec![tool("bad\nname", fine.clone())],
        ] {
            let refused = checked_tools(bad.clone());
            assert!(
                matches!(refused, Err(CoreError::Upstream(_))),
                "{bad:?}: {refused:?}"
            );
        }
    }
}
