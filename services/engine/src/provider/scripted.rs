//! The `scripted` provider: deterministic replies for tests, demos and load tests, not
//! a real model. The run's Nth model call answers with reply N of the script (the
//! number of assistant messages already in the conversation says which call this is);
//! a call past the end of the script fails the turn.

use super::chat::{ChatRole, Delta};
use super::chat::{DeltaSink, ModelError, ModelReply, ModelRequest, Provider};
use baton_core::model::ScriptedReply;
use baton_events::ToolCallRequest;
use std::time::Duration;

pub struct ScriptedProvider {
    replies: Vec<ScriptedReply>,
}

impl ScriptedProvider {
    pub fn new(replies: Vec<ScriptedReply>) -> Self {
        Self { replies }
    }

    /// The reply for the model call that follows `request`'s conversation.
    fn reply_for(&self, request: &ModelRequest) -> Result<&ScriptedReply, ModelError> {
        let answered = request
            .messages
            .iter()
            .filter(|m| m.role == ChatRole::Assistant)
            .count();
        self.replies.get(answered).ok_or_else(|| {
            ModelError::new(
                "script_exhausted",
                format!(
                    "the scripted agent has {} replies and this is model call {}",
                    self.replies.len(),
                    answered + 1
                ),
            )
        })
    }
}

#[async_trait::async_trait]
impl Provider for ScriptedProvider {
    async fn complete(
        &self,
        request: &ModelRequest,
        deltas: &DeltaSink,
    ) -> Result<ModelReply, ModelError> {
        let step = self.reply_for(request)?;
        if step.delay_ms > 0 {
            tokio::time::sleep(Duration::from_millis(step.delay_ms)).await;
        }
        if !step.content.is_empty() {
            deltas(Delta {
                attempt: 1,
                content: step.content.clone(),
                reasoning: false,
            });
        }
        let answered = request
            .messages
            .iter()
            .filter(|m| m.role == ChatRole::Assistant)
            .count();
        let tool_calls: Vec<ToolCallRequest> = step
            .tool_calls
            .iter()
            .enumerate()
            .map(|(i, c)| ToolCallRequest {
                id: format!("call_{}_{}", answered + 1, i + 1),
                name: c.name.clone(),
                arguments: match &c.arguments {
                    // A string is the raw argument text, so a script can send invalid JSON.
                    serde_json::Value::String(raw) => raw.clone(),
                    other => other.to_string(),
                },
            })
            .collect();
        Ok(ModelReply {
            content: (!step.content.is_empty()).then(|| step.content.clone()),
            reasoning: None,
            finish_reason: if tool_calls.is_empty() {
                "stop"
            } else {
                "tool_calls"
            }
            .into(),
            tool_calls,
            usage: None,
            model: Some("scripted".into()),
            complete_run: step.complete_run,
        })
    }
}
