//! Agent definitions: instructions, the model provider, the tools it may call and the
//! limits of one turn. Changing an agent makes a new version; a run keeps the version it
//! started with.

use baton_events::{AgentId, TenantId, ToolId};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// How an agent's replies are produced.
// Each variant's `title` names its schema in the API document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ProviderSpec {
    /// Deterministic replies for tests, demos and load tests — not a real model.
    /// The run's Nth model call answers with reply N; a call past the end of the script
    /// fails the turn.
    #[schema(title = "ScriptedProvider")]
    Scripted { replies: Vec<ScriptedReply> },
    /// An OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, Ollama, llama.cpp).
    #[schema(title = "OpenAiProvider")]
    Openai(OpenAiSpec),
}

impl ProviderSpec {
    /// The provider's kind, as the API spells it (`scripted`, `openai`).
    pub fn kind(&self) -> &'static str {
        match self {
            ProviderSpec::Scripted { .. } => "scripted",
            ProviderSpec::Openai(_) => "openai",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ScriptedReply {
    #[serde(default)]
    pub content: String,
    /// Wait this long before answering (simulates model latency).
    #[serde(default)]
    pub delay_ms: u64,
    /// End the run (`run.completed`) after this reply.
    #[serde(default)]
    pub complete_run: bool,
    /// Tool calls the reply makes, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ScriptedToolCall>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ScriptedToolCall {
    /// The tool's name.
    pub name: String,
    /// The arguments (they need not match the tool's schema). A JSON string is sent
    /// as the raw argument text, so a script can also send text that is not JSON.
    #[serde(default)]
    pub arguments: serde_json::Value,
}

/// Where and how to call an OpenAI-compatible chat-completions API.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OpenAiSpec {
    /// Base URL up to and including the version, e.g. `https://api.openai.com/v1`;
    /// requests go to `{base_url}/chat/completions`.
    pub base_url: String,
    pub model: String,
    /// The tenant secret holding the API key, sent as a bearer token. None for
    /// servers that need no key (a local vLLM or Ollama).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_secret: Option<String>,
    /// One HTTP attempt may take this long.
    #[serde(default = "defaults::request_timeout_ms")]
    pub request_timeout_ms: u64,
    /// Retries after a 429, a 5xx, a transport error or a broken stream.
    #[serde(default = "defaults::max_retries")]
    pub max_retries: u32,
    /// All attempts of one model call, back-off included, fit in this budget.
    #[serde(default = "defaults::retry_budget_ms")]
    pub retry_budget_ms: u64,
    /// Stream the reply (token deltas go to the run's live subscribers).
    #[serde(default = "defaults::yes")]
    pub stream: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
}

/// What bounds one turn, and what the agent's runs do with messages posted while one is
/// in progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentLimits {
    /// Model calls per turn; the turn fails when the model still wants tools after it.
    #[serde(default = "defaults::max_steps")]
    pub max_steps: u32,
    /// Tool calls per turn; calls beyond it get an error result.
    #[serde(default = "defaults::max_tool_calls")]
    pub max_tool_calls: u32,
    /// Wall time of one turn, from `turn.started`, not counting time spent waiting
    /// for approvals or client tool outputs.
    #[serde(default = "defaults::turn_timeout_ms")]
    pub turn_timeout_ms: u64,
    /// Passed to the model as `max_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
    /// Failed turns in a row after which the run fails for good (`run.failed`, with the
    /// last turn's error); 0: never, each failed turn leaves the run `waiting`.
    #[serde(default = "defaults::max_failed_turns")]
    pub max_failed_turns: u32,
    /// What a message posted while a turn is in progress does when it names no
    /// `strategy` of its own.
    #[serde(default)]
    pub message_strategy: super::MessageStrategy,
    /// Messages a run may hold queued (`strategy: enqueue`); one more is refused with
    /// 409 `queue_full`.
    #[serde(default = "defaults::max_queued_messages")]
    pub max_queued_messages: u32,
    /// Days this agent's ended runs are kept after their last change, 1 to 36500, in
    /// place of the tenant's retention default; absent: the tenant's default applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_days: Option<u32>,
}

impl Default for AgentLimits {
    fn default() -> Self {
        Self {
            max_steps: defaults::max_steps(),
            max_tool_calls: defaults::max_tool_calls(),
            turn_timeout_ms: defaults::turn_timeout_ms(),
            max_output_tokens: None,
            max_failed_turns: defaults::max_failed_turns(),
            message_strategy: super::MessageStrategy::default(),
            max_queued_messages: defaults::max_queued_messages(),
            retention_days: None,
        }
    }
}

mod defaults {
    pub fn request_timeout_ms() -> u64 {
        60_000
    }
    pub fn max_retries() -> u32 {
        3
    }
    pub fn retry_budget_ms() -> u64 {
        120_000
    }
    pub fn yes() -> bool {
        true
    }
    pub fn max_steps() -> u32 {
        8
    }
    pub fn max_tool_calls() -> u32 {
        32
    }
    pub fn turn_timeout_ms() -> u64 {
        10 * 60 * 1000
    }
    pub fn max_failed_turns() -> u32 {
        3
    }
    pub fn max_queued_messages() -> u32 {
        100
    }
}

/// An agent definition at one version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Agent {
    pub id: AgentId,
    #[serde(skip)]
    pub tenant: TenantId,
    pub name: String,
    pub instructions: String,
    pub provider: ProviderSpec,
    /// The tenant's tools this agent may call.
    #[serde(default)]
    pub tools: Vec<ToolId>,
    #[serde(default)]
    pub limits: AgentLimits,
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// When the agent was archived: it takes no new runs, and the runs it has go on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archived_at: Option<DateTime<Utc>>,
}
