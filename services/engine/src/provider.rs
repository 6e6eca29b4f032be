//! Model providers. Only `scripted` exists so far: deterministic replies for tests,
//! demos and load tests (turn N answers with reply N; past the end the turn fails).

use baton_core::model::{Agent, ProviderSpec};
use baton_events::ErrorInfo;
use std::time::Duration;

/// What the model answered for one turn.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub content: String,
    /// Simulated model latency, waited before the reply is recorded.
    pub delay: Duration,
    pub finish_reason: String,
    /// The provider asks to end the run after this reply.
    pub complete_run: bool,
}

pub struct ScriptedProvider;

impl ScriptedProvider {
    /// The reply of `turn` (1-based), or why the turn fails.
    pub fn reply(agent: &Agent, turn: i64) -> Result<Reply, ErrorInfo> {
        let ProviderSpec::Scripted { replies } = &agent.provider;
        let step = usize::try_from(turn - 1)
            .ok()
            .and_then(|i| replies.get(i))
            .ok_or_else(|| ErrorInfo {
                code: "script_exhausted".into(),
                message: format!(
                    "the scripted agent has {} replies and this is turn {turn}",
                    replies.len()
                ),
            })?;
        Ok(Reply {
            content: step.content.clone(),
            delay: Duration::from_millis(step.delay_ms),
            finish_reason: "stop".into(),
            complete_run: step.complete_run,
        })
    }
}
