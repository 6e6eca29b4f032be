//! Agent use cases: create, update, get, list. Agents are versioned rows, not streams:
//! an update stores a new version and a run keeps the version it started with.

use crate::egress_allowlists::EgressAllowlists;
use crate::error::{CoreError, StoreError};
use crate::model::{Action, Principal};
use crate::model::{Agent, AgentLimits, OpenAiSpec, ProviderSpec, ScriptedReply};
use crate::model::{AuditAction, AuditEntry};
use crate::page::{self, Page};
use crate::ports::{AgentStore, Clock, ToolStore};
use crate::validate;
use baton_events::{AgentId, TenantId, ToolId};
use serde::Deserialize;
use serde_json::json;
use std::sync::Arc;

pub const MAX_NAME_CHARS: usize = 200;
pub const MAX_INSTRUCTIONS_CHARS: usize = 100_000;
pub const MAX_SCRIPT_REPLIES: usize = 1_000;
pub const MAX_SCRIPT_DELAY_MS: u64 = 10 * 60 * 1000;
pub const MAX_AGENT_TOOLS: usize = 128;
pub const MAX_STEPS: u32 = 100;
pub const MAX_TOOL_CALLS: u32 = 1_000;
/// Highest `limits.max_queued_messages`.
pub const MAX_QUEUED_MESSAGES: u32 = 1_000;
/// Highest `limits.max_failed_turns` (0 turns the rule off).
pub const MAX_FAILED_TURNS: u32 = 100;
pub const MAX_TURN_TIMEOUT_MS: u64 = 24 * 60 * 60 * 1000;
pub const MAX_REQUEST_TIMEOUT_MS: u64 = 10 * 60 * 1000;
pub const MAX_RETRIES: u32 = 10;

/// An agent definition as a client gives it (create, or the whole of an update).
#[derive(Debug, Clone, Deserialize)]
pub struct NewAgent {
    pub name: String,
    pub instructions: String,
    pub provider: ProviderSpec,
    #[serde(default)]
    pub tools: Vec<ToolId>,
    #[serde(default)]
    pub limits: AgentLimits,
}

#[derive(Clone)]
pub struct Agents {
    pub store: Arc<dyn AgentStore>,
    pub tools: Arc<dyn ToolStore>,
    pub clock: Arc<dyn Clock>,
    /// What a model provider's base URL may reach: the installation's policy and the
    /// tenant's allowlist.
    pub egress: EgressAllowlists,
}

impl Agents {
    #[tracing::instrument(name = "agents.create", skip_all)]
    pub async fn create(&self, p: &Principal, new: NewAgent) -> Result<Agent, CoreError> {
        p.require(Action::ManageAgents)?;
        validate(&new)?;
        self.check_egress(p.tenant, &new).await?;
        self.check_tools(p.tenant, &new.tools).await?;
        let now = self.clock.now();
        let agent = Agent {
            id: AgentId::new(),
            tenant: p.tenant,
            name: new.name.trim().to_string(),
            instructions: new.instructions,
            provider: new.provider,
            tools: new.tools,
            limits: new.limits,
            version: 1,
            created_at: now,
            updated_at: now,
            archived_at: None,
        };
        let audit = AuditEntry::by(
            p,
            now,
            AuditAction::AgentCreated,
            agent.id.to_string(),
            json!({"name": agent.name, "version": agent.version}),
        );
        self.store.create_agent(p.tenant, &agent, &audit).await?;
        Ok(agent)
    }

    /// Replaces the definition with a new version; runs already started keep theirs.
    #[tracing::instrument(name = "agents.update", skip_all)]
    pub async fn update(
        &self,
        p: &Principal,
        id: AgentId,
        new: NewAgent,
    ) -> Result<Agent, CoreError> {
        p.require(Action::ManageAgents)?;
        validate(&new)?;
        self.check_egress(p.tenant, &new).await?;
        self.check_tools(p.tenant, &new.tools).await?;
        let current = self.get(p, id).await?;
        if current.archived_at.is_some() {
            return Err(archived(id));
        }
        let agent = Agent {
            name: new.name.trim().to_string(),
            instructions: new.instructions,
            provider: new.provider,
            tools: new.tools,
            limits: new.limits,
            version: current.version + 1,
            updated_at: self.clock.now(),
            ..current
        };
        let audit = AuditEntry::by(
            p,
            agent.updated_at,
            AuditAction::AgentUpdated,
            agent.id.to_string(),
            json!({"name": agent.name, "version": agent.version}),
        );
        match self.store.update_agent(p.tenant, &agent, &audit).await {
            Ok(()) => Ok(agent),
            // Archived since it was read: say so rather than "conflict".
            Err(StoreError::Conflict { .. }) => match self.get(p, id).await? {
                a if a.archived_at.is_some() => Err(archived(id)),
                _ => Err(CoreError::Conflict),
            },
            Err(e) => Err(e.into()),
        }
    }

    #[tracing::instrument(name = "agents.get", skip_all)]
    pub async fn get(&self, p: &Principal, id: AgentId) -> Result<Agent, CoreError> {
        p.require(Action::ReadAgents)?;
        self.store
            .get_agent(p.tenant, id)
            .await?
            .ok_or(CoreError::NotFound("agent"))
    }

    /// Archives the agent (no new runs; its runs go on), or restores it; the agent as it
    /// is after. Archiving an archived agent (or restoring one in use) changes nothing.
    #[tracing::instrument(name = "agents.set_archived", skip_all)]
    pub async fn set_archived(
        &self,
        p: &Principal,
        id: AgentId,
        archive: bool,
    ) -> Result<Agent, CoreError> {
        p.require(Action::ManageAgents)?;
        let now = self.clock.now();
        let action = match archive {
            true => AuditAction::AgentArchived,
            false => AuditAction::AgentRestored,
        };
        let audit = AuditEntry::by(p, now, action, id.to_string(), json!({}));
        self.store
            .set_agent_archived(p.tenant, id, archive.then_some(now), &audit)
            .await?
            .ok_or(CoreError::NotFound("agent"))
    }

    /// Deletes an archived agent with every version of it. Refused for an agent not
    /// archived (`wrong_state`: archiving first stops new runs) and while a run not ended
    /// yet uses it (`in_use`). Ended runs of it stay, readable as before.
    #[tracing::instrument(name = "agents.delete", skip_all)]
    pub async fn delete(&self, p: &Principal, id: AgentId) -> Result<(), CoreError> {
        p.require(Action::ManageAgents)?;
        let agent = self.get(p, id).await?;
        if agent.archived_at.is_none() {
            return Err(CoreError::WrongState(format!(
                "agent {id} is not archived: archive it first, so it takes no new runs"
            )));
        }
        let audit = AuditEntry::by(
            p,
            self.clock.now(),
            AuditAction::AgentDeleted,
            id.to_string(),
            json!({"name": agent.name, "version": agent.version}),
        );
        if self.store.delete_agent(p.tenant, id, &audit).await? {
            return Ok(());
        }
        let live: u64 = self
            .store
            .versions_in_use(p.tenant)
            .await?
            .iter()
            .filter(|(agent, _, _)| *agent == id)
            .map(|(_, _, n)| n)
            .sum();
        match live {
            0 => Err(CoreError::Conflict),
            n => Err(CoreError::InUse(format!(
                "agent {id} has {n} runs not ended yet: let them end or cancel them first"
            ))),
        }
    }

    /// A page of the agents in use, or of the archived ones.
    #[tracing::instrument(name = "agents.list", skip_all)]
    pub async fn list(
        &self,
        p: &Principal,
        archived: bool,
        cursor: Option<AgentId>,
        limit: Option<u32>,
    ) -> Result<Page<Agent>, CoreError> {
        p.require(Action::ReadAgents)?;
        let limit = page::limit(limit)?;
        let items = self
            .store
            .list_agents(p.tenant, archived, cursor, limit)
            .await?;
        Ok(Page::of(items, limit, |a| a.id.to_string()))
    }

    /// A provider's base URL the egress policy or the tenant's allowlist refuses is refused
    /// here, at definition.
    async fn check_egress(&self, tenant: TenantId, new: &NewAgent) -> Result<(), CoreError> {
        if let ProviderSpec::Openai(spec) = &new.provider {
            let url = validate::http_url("provider.base_url", &spec.base_url)?;
            self.egress
                .check_definition(tenant, "provider.base_url", &url)
                .await?;
        }
        Ok(())
    }

    /// Every attached tool exists in the caller's tenant (another tenant's id is as
    /// unknown as a made-up one).
    async fn check_tools(&self, tenant: TenantId, tools: &[ToolId]) -> Result<(), CoreError> {
        for (i, id) in tools.iter().enumerate() {
            if tools[..i].contains(id) {
                return Err(CoreError::invalid(format!("tools lists {id} twice")));
            }
            match self.tools.get_tool(tenant, *id).await? {
                None => return Err(CoreError::invalid(format!("tools[{i}]: no tool {id}"))),
                Some(t) if t.archived_at.is_some() => {
                    return Err(CoreError::WrongState(format!(
                        "tools[{i}]: tool {id} ({}) is archived: no new agent version may \
                         name it (restore it first)",
                        t.name
                    )));
                }
                Some(_) => {}
            }
        }
        Ok(())
    }
}

fn validate(new: &NewAgent) -> Result<(), CoreError> {
    validate::non_blank("name", &new.name, MAX_NAME_CHARS)?;
    validate::text("instructions", &new.instructions, MAX_INSTRUCTIONS_CHARS)?;
    match &new.provider {
        ProviderSpec::Scripted { replies } => validate_script(replies)?,
        ProviderSpec::Openai(spec) => validate_openai(spec)?,
    }
    if new.tools.len() > MAX_AGENT_TOOLS {
        return Err(CoreError::invalid(format!(
            "tools holds more than {MAX_AGENT_TOOLS} tools"
        )));
    }
    validate_limits(&new.limits)
}

fn validate_script(replies: &[ScriptedReply]) -> Result<(), CoreError> {
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
        for (j, c) in r.tool_calls.iter().enumerate() {
            validate::non_blank(
                &format!("provider.replies[{i}].tool_calls[{j}].name"),
                &c.name,
                crate::tools::MAX_TOOL_NAME_CHARS,
            )?;
            validate::json(
                &format!("provider.replies[{i}].tool_calls[{j}].arguments"),
                &c.arguments,
            )?;
        }
    }
    Ok(())
}

fn validate_openai(spec: &OpenAiSpec) -> Result<(), CoreError> {
    let base = validate::http_url("provider.base_url", &spec.base_url)?;
    if base.query().is_some() || base.fragment().is_some() {
        return Err(CoreError::invalid(
            "provider.base_url must not carry a query or a fragment: paths are appended to it",
        ));
    }
    validate::non_blank("provider.model", &spec.model, MAX_NAME_CHARS)?;
    if let Some(secret) = &spec.api_key_secret {
        crate::tools::check_name("provider.api_key_secret", secret)?;
    }
    if spec.request_timeout_ms == 0 || spec.request_timeout_ms > MAX_REQUEST_TIMEOUT_MS {
        return Err(CoreError::invalid(format!(
            "provider.request_timeout_ms must be between 1 and {MAX_REQUEST_TIMEOUT_MS}"
        )));
    }
    if spec.max_retries > MAX_RETRIES {
        return Err(CoreError::invalid(format!(
            "provider.max_retries must be at most {MAX_RETRIES}"
        )));
    }
    if spec.retry_budget_ms > MAX_TURN_TIMEOUT_MS {
        return Err(CoreError::invalid(format!(
            "provider.retry_budget_ms must be at most {MAX_TURN_TIMEOUT_MS}"
        )));
    }
    if let Some(t) = spec.temperature
        && !(0.0..=2.0).contains(&t)
    {
        return Err(CoreError::invalid(
            "provider.temperature must be between 0 and 2",
        ));
    }
    Ok(())
}

/// What using an archived agent answers.
pub fn archived(id: AgentId) -> CoreError {
    CoreError::WrongState(format!(
        "agent {id} is archived: it takes no new runs and no new versions (restore it first)"
    ))
}

fn validate_limits(l: &AgentLimits) -> Result<(), CoreError> {
    let range = |field: &str, v: u64, max: u64| {
        if v == 0 || v > max {
            Err(CoreError::invalid(format!(
                "limits.{field} must be between 1 and {max}, got {v}"
            )))
        } else {
            Ok(())
        }
    };
    range("max_steps", l.max_steps.into(), MAX_STEPS.into())?;
    range(
        "max_tool_calls",
        l.max_tool_calls.into(),
        MAX_TOOL_CALLS.into(),
    )?;
    range("turn_timeout_ms", l.turn_timeout_ms, MAX_TURN_TIMEOUT_MS)?;
    if let Some(t) = l.max_output_tokens {
        range("max_output_tokens", t.into(), 1_000_000)?;
    }
    range(
        "max_queued_messages",
        l.max_queued_messages.into(),
        MAX_QUEUED_MESSAGES.into(),
    )?;
    crate::retention::check_days("limits.retention_days", l.retention_days)?;
    if l.max_failed_turns > MAX_FAILED_TURNS {
        return Err(CoreError::invalid(format!(
            "limits.max_failed_turns must be between 0 and {MAX_FAILED_TURNS}, got {}",
            l.max_failed_turns
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(replies: Vec<ScriptedReply>, name: &str) -> NewAgent {
        NewAgent {
            name: name.into(),
            instructions: String::new(),
            provider: ProviderSpec::Scripted { replies },
            tools: Vec::new(),
            limits: AgentLimits::default(),
        }
    }

    fn reply(delay_ms: u64) -> ScriptedReply {
        ScriptedReply {
            content: "ok".into(),
            delay_ms,
            complete_run: false,
            tool_calls: Vec::new(),
        }
    }

    #[test]
    fn an_agent_needs_a_name_and_a_script() {
        assert!(validate(&agent(vec![reply(0)], "a")).is_ok());
        assert!(validate(&agent(vec![reply(0)], "  ")).is_err());
        assert!(validate(&agent(vec![], "a")).is_err());
    }

    #[test]
    fn a_nul_in_scripted_arguments_is_named_in_the_error() {
        let mut r = reply(0);
        r.tool_calls.push(crate::model::ScriptedToolCall {
            name: "lookup".into(),
            arguments: serde_json::json!({"q": "\u{0}"}),
        });
        let err = validate(&agent(vec![reply(0), r], "a"))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("replies[1].tool_calls[0].arguments must not contain NUL"),
            "{err}"
        );
    }

    #[test]
    fn a_delay_beyond_the_cap_is_named_in_the_error() {
        let err = validate(&agent(vec![reply(0), reply(u64::MAX)], "a"))
            .err()
            .map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains("replies[1].delay_ms")));
    }

    #[test]
    fn limits_out_of_range_are_named() {
        let mut a = agent(vec![reply(0)], "a");
        a.limits.max_steps = 0;
        let err = validate(&a)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("limits.max_steps"), "{err}");
        a.limits = AgentLimits {
            turn_timeout_ms: MAX_TURN_TIMEOUT_MS + 1,
            ..AgentLimits::default()
        };
        let err = validate(&a)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("limits.turn_timeout_ms"), "{err}");
    }

    #[test]
    fn an_openai_provider_needs_an_http_url_and_a_model() {
        let spec = |base_url: &str, model: &str| OpenAiSpec {
            base_url: base_url.into(),
            model: model.into(),
            api_key_secret: Some("openai_key".into()),
            request_timeout_ms: 1000,
            max_retries: 2,
            retry_budget_ms: 5000,
            stream: true,
            temperature: None,
        };
        assert!(validate_openai(&spec("http://127.0.0.1:8000/v1", "m")).is_ok());
        for (url, model, field) in [
            ("ftp://x/v1", "m", "provider.base_url"),
            ("not a url", "m", "provider.base_url"),
            ("https://api.openai.com/v1", " ", "provider.model"),
        ] {
            let err = validate_openai(&spec(url, model))
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(err.contains(field), "{url} {model}: {err}");
        }
    }
}
