//! Tool use cases: define, update (a new version), get, list, archive, restore and delete
//! a tenant's tools. A definition is checked
//! whole before it is stored: its name, its input schema (it must compile as a JSON
//! schema), its timeout and how it is carried out.

use crate::egress_allowlists::EgressAllowlists;
use crate::error::CoreError;
use crate::model::{Action, Principal};
use crate::model::{AuditAction, AuditEntry};
use crate::model::{SecretHeader, Tool, ToolKindSpec};
use crate::page::{self, Page};
use crate::ports::{AgentStore, Clock, ToolStore};
use crate::validate;
use baton_events::{ToolEffect, ToolId};
use serde::Deserialize;
use std::sync::Arc;

pub const MAX_TOOL_NAME_CHARS: usize = 64;
pub const MAX_DESCRIPTION_CHARS: usize = 4_000;
pub const MAX_SCHEMA_BYTES: usize = 64 * 1024;
pub const MAX_TIMEOUT_MS: u64 = 10 * 60 * 1000;
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;
pub const MAX_SECRET_HEADERS: usize = 16;

/// A tool definition as a client gives it.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewTool {
    /// What the model calls: `[A-Za-z0-9_-]{1,64}`, unique in the tenant.
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// JSON schema of the arguments; a call that does not match gets an error result.
    pub input_schema: serde_json::Value,
    /// `read` or `mutation`.
    pub effect: ToolEffect,
    /// The endpoint recognises a repeat by its `Idempotency-Key`.
    #[serde(default)]
    pub idempotent: bool,
    #[serde(default)]
    pub requires_approval: bool,
    /// Per call, default 30000.
    #[serde(default = "default_timeout")]
    pub timeout_ms: u64,
    /// `{"kind": "http", "url": ..., "secret_headers": [...]}` or `{"kind": "client"}`.
    pub kind: ToolKindSpec,
}

/// What changing an archived tool answers.
fn archived(id: ToolId) -> CoreError {
    CoreError::WrongState(format!(
        "tool {id} is archived: it takes no new versions (restore it first)"
    ))
}

impl NewTool {
    /// The tool this definition makes: `version` of tool `id`, written `at`.
    fn into_tool(
        self,
        id: ToolId,
        tenant: baton_events::TenantId,
        version: i64,
        at: chrono::DateTime<chrono::Utc>,
    ) -> Tool {
        Tool {
            id,
            tenant,
            name: self.name,
            description: self.description,
            input_schema: self.input_schema,
            effect: self.effect,
            idempotent: self.idempotent,
            requires_approval: self.requires_approval,
            timeout_ms: self.timeout_ms,
            kind: self.kind,
            version,
            created_at: at,
            updated_at: at,
            archived_at: None,
        }
    }
}

fn default_timeout() -> u64 {
    DEFAULT_TIMEOUT_MS
}

#[derive(Clone)]
pub struct Tools {
    pub store: Arc<dyn ToolStore>,
    /// The agents that may name a tool, and the versions runs use (a deletion checks).
    pub agents: Arc<dyn AgentStore>,
    pub clock: Arc<dyn Clock>,
    /// What an http tool's URL may reach: the installation's policy and the tenant's
    /// allowlist.
    pub egress: EgressAllowlists,
    /// The environments a command tool may name.
    pub environments: crate::environments::Environments,
}

impl Tools {
    #[tracing::instrument(name = "tools.create", skip_all)]
    pub async fn create(&self, p: &Principal, new: NewTool) -> Result<Tool, CoreError> {
        p.require(Action::ManageTools)?;
        validate(&new)?;
        let new = self.check_kind(p, new).await?;
        let now = self.clock.now();
        let tool = new.into_tool(ToolId::new(), p.tenant, 1, now);
        let audit = AuditEntry::by(
            p,
            now,
            AuditAction::ToolCreated,
            tool.id.to_string(),
            serde_json::json!({"name": tool.name, "effect": tool.effect}),
        );
        match self.store.create_tool(p.tenant, &tool, &audit).await {
            Err(crate::StoreError::Conflict { .. }) => Err(CoreError::AlreadyExists(format!(
                "a tool named {:?} already exists",
                tool.name
            ))),
            other => other.map(|()| tool).map_err(CoreError::from),
        }
    }

    /// Stores `new` as the tool's next version (the name may change, to one no other tool
    /// has). Runs created from now on call it; runs created before keep the version they
    /// started with.
    #[tracing::instrument(name = "tools.update", skip_all)]
    pub async fn update(&self, p: &Principal, id: ToolId, new: NewTool) -> Result<Tool, CoreError> {
        p.require(Action::ManageTools)?;
        validate(&new)?;
        let new = self.check_kind(p, new).await?;
        let current = self.get(p, id).await?;
        if current.archived_at.is_some() {
            return Err(archived(id));
        }
        let tool = Tool {
            created_at: current.created_at,
            ..new.into_tool(id, p.tenant, current.version + 1, self.clock.now())
        };
        let audit = AuditEntry::by(
            p,
            tool.updated_at,
            AuditAction::ToolUpdated,
            tool.id.to_string(),
            serde_json::json!({"name": tool.name, "version": tool.version}),
        );
        match self.store.update_tool(p.tenant, &tool, &audit).await {
            Ok(()) => Ok(tool),
            Err(crate::StoreError::Conflict {
                expected: 0,
                actual: 0,
            }) => Err(CoreError::AlreadyExists(format!(
                "a tool named {:?} already exists",
                tool.name
            ))),
            // Archived or updated since it was read.
            Err(crate::StoreError::Conflict { .. }) => match self.get(p, id).await? {
                t if t.archived_at.is_some() => Err(archived(id)),
                _ => Err(CoreError::Conflict),
            },
            Err(crate::StoreError::NotFound) => Err(CoreError::NotFound("tool")),
            Err(e) => Err(e.into()),
        }
    }

    /// Deletes an archived tool with every version of it. Refused while a run not ended
    /// yet calls it or an agent's current version names it (`in_use`, saying which), and
    /// for a tool not archived (`wrong_state`: archiving first stops new agent versions
    /// naming it).
    #[tracing::instrument(name = "tools.delete", skip_all)]
    pub async fn delete(&self, p: &Principal, id: ToolId) -> Result<(), CoreError> {
        p.require(Action::ManageTools)?;
        let tool = self.get(p, id).await?;
        if tool.archived_at.is_none() {
            return Err(CoreError::WrongState(format!(
                "tool {id} ({}) is not archived: archive it first, so no new agent version \
                 names it",
                tool.name
            )));
        }
        let mut runs = 0;
        for (agent, version, n) in self.agents.versions_in_use(p.tenant).await? {
            let names = self
                .agents
                .get_agent_version(p.tenant, agent, version)
                .await?
                .is_some_and(|a| a.tools.contains(&id));
            if names {
                runs += n;
            }
        }
        let agents = self.agents_naming(p, id).await?;
        if runs > 0 || !agents.is_empty() {
            let mut why = Vec::new();
            if runs > 0 {
                why.push(format!("{runs} runs not ended yet call it"));
            }
            if !agents.is_empty() {
                let ids: Vec<String> = agents.iter().map(ToString::to_string).collect();
                why.push(format!(
                    "agents name it ({}): update them, or delete them if archived",
                    ids.join(", ")
                ));
            }
            return Err(CoreError::InUse(format!(
                "tool {id} ({}) is in use: {}",
                tool.name,
                why.join("; ")
            )));
        }
        let audit = AuditEntry::by(
            p,
            self.clock.now(),
            AuditAction::ToolDeleted,
            id.to_string(),
            serde_json::json!({"name": tool.name, "version": tool.version}),
        );
        match self.store.delete_tool(p.tenant, id, &audit).await? {
            true => Ok(()),
            // Restored or deleted since it was read.
            false => Err(CoreError::Conflict),
        }
    }

    /// Whether a command of `op` in `environment` may use the network; an environment
    /// that does not exist, or one named by a tool that runs no command, is refused.
    async fn networked(
        &self,
        p: &Principal,
        op: crate::model::WorkspaceOp,
        environment: Option<&str>,
    ) -> Result<bool, CoreError> {
        use crate::model::WorkspaceOp;
        let Some(name) = environment else {
            return Ok(false);
        };
        if !matches!(op, WorkspaceOp::Shell | WorkspaceOp::Python) {
            return Err(CoreError::invalid(
                "kind.environment: only shell and python tools run in an environment",
            ));
        }
        match self.environments.resolve(p.tenant, name).await? {
            Some(env) => Ok(env.network),
            None => Err(CoreError::invalid(format!(
                "kind.environment: no environment {name:?} (GET /v1/environments lists them)"
            ))),
        }
    }

    /// What the kind reaches: an `http` tool's URL passes the egress policy and the
    /// tenant's allowlist; a `delegate` tool's agent is the tenant's and not archived,
    /// and its calls are idempotent (the call's receipt id is the child run's
    /// `request_id`, so a call run again finds the run it started).
    async fn check_kind(&self, p: &Principal, mut new: NewTool) -> Result<NewTool, CoreError> {
        match &new.kind {
            ToolKindSpec::Http { url, .. } => {
                let url = validate::http_url("kind.url", url)?;
                self.egress
                    .check_definition(p.tenant, "kind.url", &url)
                    .await?;
            }
            ToolKindSpec::Delegate { agent_id } => {
                match self.agents.get_agent(p.tenant, *agent_id).await? {
                    None => {
                        return Err(CoreError::invalid(format!(
                            "kind.agent_id: no agent {agent_id}"
                        )));
                    }
                    Some(a) if a.archived_at.is_some() => {
                        return Err(crate::agents::archived(*agent_id));
                    }
                    Some(_) => new.idempotent = true,
                }
            }
            ToolKindSpec::Client => {}
            ToolKindSpec::Workspace { op, environment } => {
                let op = *op;
                new.input_schema = crate::workspace::tools::schema(op);
                new.effect = crate::workspace::tools::effect(op);
                // A command without network changes nothing but its promoted files,
                // which land with its result: running it again is safe. One with
                // network may have changed the world: it is held `uncertain`.
                new.idempotent = !self.networked(p, op, environment.as_deref()).await?;
                if new.description.is_empty() {
                    new.description = crate::workspace::tools::description(op).to_string();
                }
            }
            ToolKindSpec::Mcp { .. } => {
                return Err(CoreError::invalid(
                    "kind: an mcp tool is made by enabling a discovered tool \
                     (POST /v1/mcp-servers/{id}/tools/{name}/enable)",
                ));
            }
        }
        Ok(new)
    }

    /// Stores `new`, an `mcp` tool an admin enabled, as a new tool, or as the next
    /// version of `current` (the tool enabled from the same server tool before), with
    /// `audit` (the enabling) beside the tool's own entry.
    pub(crate) async fn put_mcp(
        &self,
        p: &Principal,
        current: Option<Tool>,
        new: NewTool,
        audit: &AuditEntry,
    ) -> Result<Tool, CoreError> {
        validate(&new)?;
        let tool = match current {
            None => new.into_tool(ToolId::new(), p.tenant, 1, audit.at),
            Some(current) if current.archived_at.is_some() => return Err(archived(current.id)),
            Some(current) => Tool {
                created_at: current.created_at,
                ..new.into_tool(current.id, p.tenant, current.version + 1, audit.at)
            },
        };
        let written = if tool.version == 1 {
            self.store.create_tool(p.tenant, &tool, audit).await
        } else {
            self.store.update_tool(p.tenant, &tool, audit).await
        };
        match written {
            Ok(()) => Ok(tool),
            // A create's conflict, and an update's 0/0, are the name.
            Err(crate::StoreError::Conflict { expected, actual })
                if tool.version == 1 || (expected, actual) == (0, 0) =>
            {
                Err(CoreError::AlreadyExists(format!(
                    "a tool named {:?} already exists: enable it under another name",
                    tool.name
                )))
            }
            Err(crate::StoreError::Conflict { .. }) => Err(CoreError::Conflict),
            Err(e) => Err(e.into()),
        }
    }

    /// The tenant's agents, archived or not, whose current version names tool `id` (an
    /// archived agent may be restored: its tool must still be there).
    async fn agents_naming(
        &self,
        p: &Principal,
        id: ToolId,
    ) -> Result<Vec<baton_events::AgentId>, CoreError> {
        let store = &self.agents;
        let naming = page::every(
            |archived, before| store.list_agents(p.tenant, archived, before, page::MAX_LIMIT),
            |a: &crate::model::Agent| a.id,
            |a| a.tools.contains(&id),
        )
        .await?;
        Ok(naming.into_iter().map(|a| a.id).collect())
    }

    #[tracing::instrument(name = "tools.get", skip_all)]
    pub async fn get(&self, p: &Principal, id: ToolId) -> Result<Tool, CoreError> {
        p.require(Action::ReadTools)?;
        self.store
            .get_tool(p.tenant, id)
            .await?
            .ok_or(CoreError::NotFound("tool"))
    }

    /// Archives the tool (no new agent version may name it; the versions that do keep
    /// calling it), or restores it; the tool as it is after.
    #[tracing::instrument(name = "tools.set_archived", skip_all)]
    pub async fn set_archived(
        &self,
        p: &Principal,
        id: ToolId,
        archive: bool,
    ) -> Result<Tool, CoreError> {
        p.require(Action::ManageTools)?;
        let now = self.clock.now();
        let action = match archive {
            true => AuditAction::ToolArchived,
            false => AuditAction::ToolRestored,
        };
        let audit = AuditEntry::by(p, now, action, id.to_string(), serde_json::json!({}));
        self.store
            .set_tool_archived(p.tenant, id, archive.then_some(now), &audit)
            .await?
            .ok_or(CoreError::NotFound("tool"))
    }

    /// A page of the tools in use, or of the archived ones.
    #[tracing::instrument(name = "tools.list", skip_all)]
    pub async fn list(
        &self,
        p: &Principal,
        archived: bool,
        cursor: Option<ToolId>,
        limit: Option<u32>,
    ) -> Result<Page<Tool>, CoreError> {
        p.require(Action::ReadTools)?;
        let limit = page::limit(limit)?;
        let items = self
            .store
            .list_tools(p.tenant, archived, cursor, limit)
            .await?;
        Ok(Page::of(items, limit, |t| t.id.to_string()))
    }
}

/// A name a model can call, or a secret's name: `[A-Za-z0-9_-]{1,64}`.
pub fn check_name(field: &str, name: &str) -> Result<(), CoreError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_TOOL_NAME_CHARS
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if ok {
        Ok(())
    } else {
        Err(CoreError::invalid(format!(
            "{field} must be 1 to {MAX_TOOL_NAME_CHARS} letters, digits, '_' or '-'"
        )))
    }
}

fn validate(new: &NewTool) -> Result<(), CoreError> {
    check_name("name", &new.name)?;
    validate::text("description", &new.description, MAX_DESCRIPTION_CHARS)?;
    validate::json("input_schema", &new.input_schema)?;
    check_schema(&new.input_schema)?;
    if new.timeout_ms == 0 || new.timeout_ms > MAX_TIMEOUT_MS {
        return Err(CoreError::invalid(format!(
            "timeout_ms must be between 1 and {MAX_TIMEOUT_MS}"
        )));
    }
    match &new.kind {
        ToolKindSpec::Http {
            url,
            secret_headers,
        } => {
            validate::http_url("kind.url", url)?;
            check_headers("kind.secret_headers", secret_headers)
        }
        ToolKindSpec::Client
        | ToolKindSpec::Delegate { .. }
        | ToolKindSpec::Mcp { .. }
        | ToolKindSpec::Workspace { .. } => Ok(()),
    }
}

/// The input schema is a JSON object that compiles as a JSON schema.
fn check_schema(schema: &serde_json::Value) -> Result<(), CoreError> {
    if !schema.is_object() {
        return Err(CoreError::invalid("input_schema must be a JSON object"));
    }
    if schema.to_string().len() > MAX_SCHEMA_BYTES {
        return Err(CoreError::invalid(format!(
            "input_schema is larger than {MAX_SCHEMA_BYTES} bytes"
        )));
    }
    jsonschema::validator_for(schema)
        .map(|_| ())
        .map_err(|e| CoreError::invalid(format!("input_schema is not a valid JSON schema: {e}")))
}

/// Secret headers: at most [`MAX_SECRET_HEADERS`], valid names Baton does not set itself,
/// each naming a secret.
pub fn check_headers(field: &str, headers: &[SecretHeader]) -> Result<(), CoreError> {
    if headers.len() > MAX_SECRET_HEADERS {
        return Err(CoreError::invalid(format!(
            "{field} holds more than {MAX_SECRET_HEADERS} headers"
        )));
    }
    for (i, h) in headers.iter().enumerate() {
        let token = !h.header.is_empty()
            && h.header.len() <= 128
            && h.header
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c));
        if !token {
            return Err(CoreError::invalid(format!(
                "{field}[{i}].header is not a valid header name"
            )));
        }
        let reserved = [
            "content-type",
            "content-length",
            "host",
            "idempotency-key",
            "accept",
            "mcp-session-id",
            "mcp-protocol-version",
            "mcp-method",
            "mcp-name",
            "last-event-id",
        ];
        if reserved.contains(&h.header.to_ascii_lowercase().as_str()) {
            return Err(CoreError::invalid(format!(
                "{field}[{i}].header {} is set by Baton",
                h.header
            )));
        }
        check_name(&format!("{field}[{i}].secret"), &h.secret)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(schema: serde_json::Value, kind: ToolKindSpec) -> NewTool {
        NewTool {
            name: "lookup".into(),
            description: "Looks things up".into(),
            input_schema: schema,
            effect: ToolEffect::Read,
            idempotent: false,
            requires_approval: false,
            timeout_ms: DEFAULT_TIMEOUT_MS,
            kind,
        }
    }

    fn err(r: Result<(), CoreError>) -> String {
        r.err().map(|e| e.to_string()).unwrap_or_default()
    }

    #[test]
    fn a_valid_http_tool_and_a_client_tool_pass() {
        let http = ToolKindSpec::Http {
            url: "http://127.0.0.1:9/hook".into(),
            secret_headers: vec![SecretHeader {
                header: "Authorization".into(),
                secret: "hook_token".into(),
            }],
        };
        assert!(validate(&tool(json!({"type": "object"}), http)).is_ok());
        assert!(validate(&tool(json!({}), ToolKindSpec::Client)).is_ok());
    }

    #[test]
    fn bad_names_schemas_urls_and_headers_are_named() {
        let mut t = tool(json!({"type": "object"}), ToolKindSpec::Client);
        t.name = "has space".into();
        assert!(err(validate(&t)).contains("name must be"));
        let t = tool(json!([1]), ToolKindSpec::Client);
        assert!(err(validate(&t)).contains("input_schema must be a JSON object"));
        let t = tool(json!({"type": "nonsense"}), ToolKindSpec::Client);
        assert!(err(validate(&t)).contains("not a valid JSON schema"));
        let t = tool(
            json!({}),
            ToolKindSpec::Http {
                url: "file:///etc/passwd".into(),
                secret_headers: vec![],
            },
        );
        assert!(err(validate(&t)).contains("kind.url"));
        let t = tool(
            json!({}),
            ToolKindSpec::Http {
                url: "https://example.com/x".into(),
                secret_headers: vec![SecretHeader {
                    header: "Idempotency-Key".into(),
                    secret: "s".into(),
                }],
            },
        );
        assert!(err(validate(&t)).contains("set by Baton"));
        let mut t = tool(json!({}), ToolKindSpec::Client);
        t.timeout_ms = 0;
        assert!(err(validate(&t)).contains("timeout_ms"));
        // Postgres cannot store it: refused here, never a 500 from the database.
        let t = tool(json!({"description": "a\u{0}b"}), ToolKindSpec::Client);
        assert!(err(validate(&t)).contains("input_schema must not contain NUL"));
    }
}
