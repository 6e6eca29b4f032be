//! What the engine asks a model and what it gets back: the conversation and the tools
//! on offer go in; the assistant's content, tool calls, finish reason and usage come
//! out, with token deltas sent to a [`DeltaSink`] as they arrive; reasoning comes out
//! apart from the answer (`reasoning.rs` splits `<think>` blocks out of content).

use baton_events::{ToolCallRequest, Usage};
use serde::{Deserialize, Serialize};

/// One message of the conversation sent to the model (OpenAI chat shape).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: ChatRole,
    /// `None` for an assistant message that only calls tools.
    pub content: Option<String>,
    /// The assistant's tool calls (assistant messages only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallRequest>,
    /// The call this message answers (tool messages only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChatRole {
    System,
    User,
    Assistant,
    Tool,
}

impl ChatMessage {
    pub fn text(role: ChatRole, content: impl Into<String>) -> Self {
        Self {
            role,
            content: Some(content.into()),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }

    pub fn tool_output(call_id: impl Into<String>, output: impl Into<String>) -> Self {
        Self {
            role: ChatRole::Tool,
            content: Some(output.into()),
            tool_calls: Vec::new(),
            tool_call_id: Some(call_id.into()),
        }
    }
}

/// A tool offered to the model (OpenAI `tools` entry of type `function`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON schema of the arguments.
    pub parameters: serde_json::Value,
}

/// One model step's input.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelRequest {
    pub messages: Vec<ChatMessage>,
    pub tools: Vec<ToolSpec>,
    pub max_output_tokens: Option<u32>,
}

/// One model step's output: the durable `model.completed` event is made from it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ModelReply {
    /// The answer, without the reasoning.
    pub content: Option<String>,
    /// The model's reasoning, when the server sent it apart (`reasoning_content`) or the
    /// model wrote it in `<think>` blocks.
    pub reasoning: Option<String>,
    pub tool_calls: Vec<ToolCallRequest>,
    /// `stop`, `tool_calls`, `length`, …
    pub finish_reason: String,
    pub usage: Option<Usage>,
    /// The model that answered, as the server named it.
    pub model: Option<String>,
    /// The scripted provider asks to end the run after this reply.
    pub complete_run: bool,
}

/// A piece of streamed output. `attempt` starts at 1 and grows when a broken stream is
/// retried: a client shows only the deltas of the latest attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Delta {
    pub attempt: u32,
    pub content: String,
    /// A piece of the reasoning, not of the answer.
    pub reasoning: bool,
}

/// Where streamed deltas go. Must not block.
pub type DeltaSink = dyn Fn(Delta) + Send + Sync;

/// Why a model step failed, after any retries. `code` is stable and lands in
/// `turn.failed`; `message` never holds a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ModelError {
    pub code: &'static str,
    pub message: String,
    /// The egress rule that refused the call, when one did (`code` is `egress_denied`).
    pub denied: Option<String>,
}

impl ModelError {
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            denied: None,
        }
    }

    /// The egress policy refused the call to the model server, by `rule`.
    pub fn denied(rule: String) -> Self {
        Self {
            code: "egress_denied",
            message: format!(
                "the model server may not be called from this installation: egress denied: {rule}"
            ),
            denied: Some(rule),
        }
    }
}

#[async_trait::async_trait]
pub trait Provider: Send + Sync {
    async fn complete(
        &self,
        request: &ModelRequest,
        deltas: &DeltaSink,
    ) -> Result<ModelReply, ModelError>;
}
