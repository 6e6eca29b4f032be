//! Agent use cases: create, get, list. Agents are plain rows with a version, not streams;
//! a run records the version it started with.

use crate::auth::{Action, Principal};
use crate::error::CoreError;
use crate::model::{Agent, ProviderSpec};
use crate::page::{self, Page};
use crate::ports::{AgentStore, Clock};
use crate::validate;
use baton_events::AgentId;
use serde::Deserialize;
use std::sync::Arc;

pub const MAX_NAME_CHARS: usize = 200;
pub const MAX_INSTRUCTIONS_CHARS: usize = 100_000;
pub const MAX_SCRIPT_REPLIES: usize = 1_000;
pub const MAX_SCRIPT_DELAY_MS: u64 = 10 * 60 * 1000;

#[derive(Debug, Clone, Deserialize)]
pub struct NewAgent {
    pub name: String,
    pub instructions: String,
    pub provider: ProviderSpec,
}

#[derive(Clone)]
pub struct Agents {
    pub store: Arc<dyn AgentStore>,
    pub clock: Arc<dyn Clock>,
}

impl Agents {
    pub async fn create(&self, p: &Principal, new: NewAgent) -> Result<Agent, CoreError> {
        p.require(Action::ManageAgents)?;
        validate(&new)?;
        let now = self.clock.now();
        let agent = Agent {
            id: AgentId::new(),
            tenant: p.tenant,
            name: new.name.trim().to_string(),
            instructions: new.instructions,
            provider: new.provider,
            version: 1,
            created_at: now,
            updated_at: now,
        };
        self.store.create_agent(p.tenant, &agent).await?;
        Ok(agent)
    }

    pub async fn get(&self, p: &Principal, id: AgentId) -> Result<Agent, CoreError> {
        p.require(Action::ReadAgents)?;
        self.store
            .get_agent(p.tenant, id)
            .await?
            .ok_or(CoreError::NotFound("agent"))
    }

    pub async fn list(
        &self,
        p: &Principal,
        cursor: Option<AgentId>,
        limit: Option<u32>,
    ) -> Result<Page<Agent>, CoreError> {
        p.require(Action::ReadAgents)?;
        let limit = page::limit(limit)?;
        let items = self.store.list_agents(p.tenant, cursor, limit).await?;
        let next_cursor = (items.len() == limit as usize)
            .then(|| items.last().map(|a| a.id.to_string()))
            .flatten();
        Ok(Page { items, next_cursor })
    }
}

fn validate(new: &NewAgent) -> Result<(), CoreError> {
    validate::non_blank("name", &new.name, MAX_NAME_CHARS)?;
    validate::text("instructions", &new.instructions, MAX_INSTRUCTIONS_CHARS)?;
    match &new.provider {
        ProviderSpec::Scripted { replies } => {
            if replies.is_empty() {
                return Err(CoreError::invalid(
                    "provider.replies must hold at least one reply",
                ));
            }
            if replies.len() > MAX_SCRIPT_REPLIES {
                return Err(CoreError::invalid(format!(
                    "provider.replies holds more than {MAX_SCRIPT_REPLIES} replies"
                )));
            }
            for (i, r) in replies.iter().enumerate() {
                validate::text(
                    &format!("provider.replies[{i}].content"),
                    &r.content,
                    crate::runs::MAX_CONTENT_CHARS,
                )?;
                if r.delay_ms > MAX_SCRIPT_DELAY_MS {
                    return Err(CoreError::invalid(format!(
                        "provider.replies[{i}].delay_ms exceeds {MAX_SCRIPT_DELAY_MS}"
                    )));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ScriptedReply;

    fn agent(replies: Vec<ScriptedReply>, name: &str) -> NewAgent {
        NewAgent {
            name: name.into(),
            instructions: String::new(),
            provider: ProviderSpec::Scripted { replies },
        }
    }

    fn reply(delay_ms: u64) -> ScriptedReply {
        ScriptedReply {
            content: "ok".into(),
            delay_ms,
            complete_run: false,
        }
    }

    #[test]
    fn an_agent_needs_a_name_and_a_script() {
        assert!(validate(&agent(vec![reply(0)], "a")).is_ok());
        assert!(validate(&agent(vec![reply(0)], "  ")).is_err());
        assert!(validate(&agent(vec![], "a")).is_err());
    }

    #[test]
    fn a_delay_beyond_the_cap_is_named_in_the_error() {
        let err = validate(&agent(vec![reply(0), reply(u64::MAX)], "a"))
            .err()
            .map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains("replies[1].delay_ms")));
    }
}
