//! Tool definitions of a tenant: what an agent may call, how Baton calls it, and what
//! the call may change. Tools are attached to agents by id.

use baton_events::{TenantId, ToolEffect, ToolId};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// A tenant's tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Tool {
    pub id: ToolId,
    #[serde(skip)]
    pub tenant: TenantId,
    /// Unique within the tenant; what the model calls (`[A-Za-z0-9_-]{1,64}`).
    pub name: String,
    pub description: String,
    /// JSON schema of the arguments; calls that do not match get an error result
    /// without running.
    pub input_schema: serde_json::Value,
    pub effect: ToolEffect,
    /// The tool recognises a repeated call by its `Idempotency-Key`: a call left
    /// without a result by a crash may be sent again.
    pub idempotent: bool,
    /// A member approves each call before it runs.
    pub requires_approval: bool,
    /// One call may take this long.
    pub timeout_ms: u64,
    pub kind: ToolKindSpec,
    /// 1 when created, one more at each update. A run calls the versions current when
    /// it was created.
    #[serde(default = "first_version")]
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// When the tool was archived: no new agent version may name it; the versions that
    /// do keep calling it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archived_at: Option<DateTime<Utc>>,
}

fn first_version() -> i64 {
    1
}

/// How a tool is carried out.
// Each variant's `title` names its schema in the API document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ToolKindSpec {
    /// Baton POSTs the arguments as JSON to `url` with the receipt id as
    /// `Idempotency-Key`; the (size-capped) response body is the output, a non-2xx
    /// answer an error result.
    #[schema(title = "HttpToolKind")]
    Http {
        url: String,
        /// Request headers whose values come from the tenant's encrypted secrets.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        secret_headers: Vec<SecretHeader>,
    },
    /// The run waits in `requires_action` until the API client submits the output.
    #[schema(title = "ClientToolKind")]
    Client,
    /// Baton starts a run of `agent_id` (of the same tenant) with the call's `message`
    /// argument as its first message (the arguments as JSON when there is none) and
    /// waits for its answer: that run's last reply, in full, is the output.
    #[schema(title = "DelegateToolKind")]
    Delegate {
        #[schema(value_type = String, format = Uuid)]
        agent_id: baton_events::AgentId,
    },
    /// Baton calls tool `tool` of the tenant's MCP server `server_id` with the arguments,
    /// the receipt id as its idempotency key. Made by enabling a discovered tool
    /// (`POST /v1/mcp-servers/{id}/tools/{name}/enable`), not through `/v1/tools`.
    #[schema(title = "McpToolKind")]
    Mcp {
        #[schema(value_type = String, format = Uuid)]
        server_id: baton_events::McpServerId,
        /// The tool's name on the server.
        tool: String,
    },
    /// A built-in tool over the run's workspace: `read_file`, `write_file`,
    /// `list_files`, or a command in a sandbox (`shell`, `python`) whose file changes are
    /// promoted with its result. Its input schema and effect are Baton's (what a
    /// definition gives is replaced).
    #[schema(title = "WorkspaceToolKind")]
    Workspace {
        op: WorkspaceOp,
        /// For `shell` and `python`: the execution environment commands run in
        /// (`GET /v1/environments`); absent, `default`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        environment: Option<String>,
    },
}

/// What a workspace tool does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum WorkspaceOp {
    ReadFile,
    WriteFile,
    ListFiles,
    /// Runs `command` with `/bin/sh -c` in the workspace.
    Shell,
    /// Runs `script` with `python3` in the workspace.
    Python,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SecretHeader {
    pub header: String,
    /// The name of the tenant secret holding the header's value.
    pub secret: String,
}

impl Tool {
    pub fn kind(&self) -> baton_events::ToolKind {
        match self.kind {
            ToolKindSpec::Http { .. } => baton_events::ToolKind::Http,
            ToolKindSpec::Client => baton_events::ToolKind::Client,
            ToolKindSpec::Delegate { .. } => baton_events::ToolKind::Delegate,
            ToolKindSpec::Mcp { .. } => baton_events::ToolKind::Mcp,
            ToolKindSpec::Workspace { .. } => baton_events::ToolKind::Workspace,
        }
    }

    /// A call left without a result may be sent again without asking anyone.
    pub fn safe_to_repeat(&self) -> bool {
        self.effect == ToolEffect::Read || self.idempotent
    }
}
