//! The audit stream: every change to what a tenant is made of (its members, API keys,
//! secrets, agents and tools, the encryption of its records), and every outbound call its
//! runs were refused, is recorded with who made it,
//! from where and when, in a per-tenant stream that the tenant's admins read.
//!
//! An entry is written by the store in the same transaction as the change it records: each
//! port method that makes such a change takes its [`AuditEntry`], so a change is never
//! stored without its entry, and a change that is refused or finds nothing to do (a stale
//! role, a key revoked already) leaves no entry. Entries are never updated or deleted
//! (on Postgres the policies let the application insert and read them, nothing else).
//!
//! An entry names its target (an id, a secret's name) and carries small `details` (a role,
//! a version, a key id); never a secret's value, a token or a password.

use crate::model::Principal;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use uuid::Uuid;

/// The actor of changes made with the `baton` command line on the server's machine.
pub const OPERATOR: &str = "operator";

/// The actor of what a run's engine records on its own (a call it refused to make).
pub const ENGINE: &str = "engine";

/// The actor of what the retention job deletes.
pub const RETENTION: &str = "retention";

/// The actor of what the schedules job does on its own (a schedule pausing itself).
pub const SCHEDULER: &str = "scheduler";

/// The actor of what the webhook deliverer does on its own (disabling an endpoint).
pub const WEBHOOKS: &str = "webhooks";

/// What changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
pub enum AuditAction {
    #[serde(rename = "member.added")]
    MemberAdded,
    #[serde(rename = "member.role_changed")]
    MemberRoleChanged,
    #[serde(rename = "member.removed")]
    MemberRemoved,
    /// An email was invited to the tenant.
    #[serde(rename = "member.invited")]
    MemberInvited,
    /// An admin revoked a pending invitation.
    #[serde(rename = "member.invitation_revoked")]
    InvitationRevoked,
    /// The invited user declined.
    #[serde(rename = "member.invitation_declined")]
    InvitationDeclined,
    #[serde(rename = "api_key.created")]
    ApiKeyCreated,
    #[serde(rename = "api_key.revoked")]
    ApiKeyRevoked,
    /// A secret stored, new or replacing the value of one of that name.
    #[serde(rename = "secret.put")]
    SecretPut,
    #[serde(rename = "secret.deleted")]
    SecretDeleted,
    #[serde(rename = "agent.created")]
    AgentCreated,
    /// A new version of an agent.
    #[serde(rename = "agent.updated")]
    AgentUpdated,
    /// An agent archived: no new runs.
    #[serde(rename = "agent.archived")]
    AgentArchived,
    /// An archived agent restored.
    #[serde(rename = "agent.restored")]
    AgentRestored,
    #[serde(rename = "tool.created")]
    ToolCreated,
    /// A tool archived: no new agent version may name it.
    #[serde(rename = "tool.archived")]
    ToolArchived,
    /// An archived tool restored.
    #[serde(rename = "tool.restored")]
    ToolRestored,
    /// A reseal of the tenant's records under the active encryption key began.
    #[serde(rename = "encryption.reseal_started")]
    ResealStarted,
    /// That reseal ended (done, stopped by a shutdown, or failed).
    #[serde(rename = "encryption.reseal_ended")]
    ResealEnded,
    /// A run's call to a URL the egress policy refuses was not made.
    #[serde(rename = "egress.denied")]
    EgressDenied,
    /// The tenant's egress allowlist was set.
    #[serde(rename = "egress.allowlist_set")]
    EgressAllowlistSet,
    /// A run deleted with everything recorded of it.
    #[serde(rename = "run.deleted")]
    RunDeleted,
    /// The tenant's retention policy was set.
    #[serde(rename = "retention.set")]
    RetentionSet,
    /// A tool's new version stored.
    #[serde(rename = "tool.updated")]
    ToolUpdated,
    /// An archived tool deleted with every version of it.
    #[serde(rename = "tool.deleted")]
    ToolDeleted,
    /// An archived agent deleted with every version of it.
    #[serde(rename = "agent.deleted")]
    AgentDeleted,
    #[serde(rename = "schedule.created")]
    ScheduleCreated,
    /// A schedule's definition replaced.
    #[serde(rename = "schedule.updated")]
    ScheduleUpdated,
    /// Paused by a member, or by the scheduler with a reason.
    #[serde(rename = "schedule.paused")]
    SchedulePaused,
    #[serde(rename = "schedule.resumed")]
    ScheduleResumed,
    #[serde(rename = "schedule.deleted")]
    ScheduleDeleted,
    /// A member started a run of a schedule now.
    #[serde(rename = "schedule.run_now")]
    ScheduleRunNow,
    #[serde(rename = "webhook.created")]
    WebhookCreated,
    /// An endpoint's URL, description or events replaced.
    #[serde(rename = "webhook.updated")]
    WebhookUpdated,
    #[serde(rename = "webhook.deleted")]
    WebhookDeleted,
    #[serde(rename = "webhook.secret_rotated")]
    WebhookSecretRotated,
    /// An endpoint enabled again by a member.
    #[serde(rename = "webhook.enabled")]
    WebhookEnabled,
    /// An endpoint disabled by the deliverer after failing too often in a row.
    #[serde(rename = "webhook.disabled")]
    WebhookDisabled,
    /// A delivery made pending again by a member.
    #[serde(rename = "webhook.replayed")]
    WebhookReplayed,
    #[serde(rename = "mcp_server.created")]
    McpServerCreated,
    /// A server's URL, headers or timeout replaced.
    #[serde(rename = "mcp_server.updated")]
    McpServerUpdated,
    #[serde(rename = "mcp_server.deleted")]
    McpServerDeleted,
    /// A server's tools listed and stored as its next discovery.
    #[serde(rename = "mcp_server.discovered")]
    McpServerDiscovered,
    /// A discovered tool enabled, or its changed definition accepted.
    #[serde(rename = "mcp_server.tool_enabled")]
    McpToolEnabled,
    /// A tenant's environment defined or replaced.
    #[serde(rename = "environment.set")]
    EnvironmentSet,
    #[serde(rename = "environment.deleted")]
    EnvironmentDeleted,
}

impl AuditAction {
    pub const ALL: [AuditAction; 46] = [
        AuditAction::MemberAdded,
        AuditAction::MemberRoleChanged,
        AuditAction::MemberRemoved,
        AuditAction::MemberInvited,
        AuditAction::InvitationRevoked,
        AuditAction::InvitationDeclined,
        AuditAction::ApiKeyCreated,
        AuditAction::ApiKeyRevoked,
        AuditAction::SecretPut,
        AuditAction::SecretDeleted,
        AuditAction::AgentCreated,
        AuditAction::AgentUpdated,
        AuditAction::AgentArchived,
        AuditAction::AgentRestored,
        AuditAction::ToolCreated,
        AuditAction::ToolArchived,
        AuditAction::ToolRestored,
        AuditAction::ResealStarted,
        AuditAction::ResealEnded,
        AuditAction::EgressDenied,
        AuditAction::EgressAllowlistSet,
        AuditAction::RunDeleted,
        AuditAction::RetentionSet,
        AuditAction::ToolUpdated,
        AuditAction::ToolDeleted,
        AuditAction::AgentDeleted,
        AuditAction::ScheduleCreated,
        AuditAction::ScheduleUpdated,
        AuditAction::SchedulePaused,
        AuditAction::ScheduleResumed,
        AuditAction::ScheduleDeleted,
        AuditAction::ScheduleRunNow,
        AuditAction::WebhookCreated,
        AuditAction::WebhookUpdated,
        AuditAction::WebhookDeleted,
        AuditAction::WebhookSecretRotated,
        AuditAction::WebhookEnabled,
        AuditAction::WebhookDisabled,
        AuditAction::WebhookReplayed,
        AuditAction::McpServerCreated,
        AuditAction::McpServerUpdated,
        AuditAction::McpServerDeleted,
        AuditAction::McpServerDiscovered,
        AuditAction::McpToolEnabled,
        AuditAction::EnvironmentSet,
        AuditAction::EnvironmentDeleted,
    ];

    /// The name stored and shown (`member.added`).
    pub fn as_str(&self) -> &'static str {
        match self {
            AuditAction::MemberAdded => "member.added",
            AuditAction::MemberRoleChanged => "member.role_changed",
            AuditAction::MemberRemoved => "member.removed",
            AuditAction::MemberInvited => "member.invited",
            AuditAction::InvitationRevoked => "member.invitation_revoked",
            AuditAction::InvitationDeclined => "member.invitation_declined",
            AuditAction::ApiKeyCreated => "api_key.created",
            AuditAction::ApiKeyRevoked => "api_key.revoked",
            AuditAction::SecretPut => "secret.put",
            AuditAction::SecretDeleted => "secret.deleted",
            AuditAction::AgentCreated => "agent.created",
            AuditAction::AgentUpdated => "agent.updated",
            AuditAction::AgentArchived => "agent.archived",
            AuditAction::AgentRestored => "agent.restored",
            AuditAction::ToolCreated => "tool.created",
            AuditAction::ToolArchived => "tool.archived",
            AuditAction::ToolRestored => "tool.restored",
            AuditAction::ResealStarted => "encryption.reseal_started",
            AuditAction::ResealEnded => "encryption.reseal_ended",
            AuditAction::EgressDenied => "egress.denied",
            AuditAction::EgressAllowlistSet => "egress.allowlist_set",
            AuditAction::RunDeleted => "run.deleted",
            AuditAction::RetentionSet => "retention.set",
            AuditAction::ToolUpdated => "tool.updated",
            AuditAction::ToolDeleted => "tool.deleted",
            AuditAction::AgentDeleted => "agent.deleted",
            AuditAction::ScheduleCreated => "schedule.created",
            AuditAction::ScheduleUpdated => "schedule.updated",
            AuditAction::SchedulePaused => "schedule.paused",
            AuditAction::ScheduleResumed => "schedule.resumed",
            AuditAction::ScheduleDeleted => "schedule.deleted",
            AuditAction::ScheduleRunNow => "schedule.run_now",
            AuditAction::WebhookCreated => "webhook.created",
            AuditAction::WebhookUpdated => "webhook.updated",
            AuditAction::WebhookDeleted => "webhook.deleted",
            AuditAction::WebhookSecretRotated => "webhook.secret_rotated",
            AuditAction::WebhookEnabled => "webhook.enabled",
            AuditAction::WebhookDisabled => "webhook.disabled",
            AuditAction::WebhookReplayed => "webhook.replayed",
            AuditAction::McpServerCreated => "mcp_server.created",
            AuditAction::McpServerUpdated => "mcp_server.updated",
            AuditAction::McpServerDeleted => "mcp_server.deleted",
            AuditAction::McpServerDiscovered => "mcp_server.discovered",
            AuditAction::McpToolEnabled => "mcp_server.tool_enabled",
            AuditAction::EnvironmentSet => "environment.set",
            AuditAction::EnvironmentDeleted => "environment.deleted",
        }
    }

    pub fn parse(s: &str) -> Option<AuditAction> {
        AuditAction::ALL.into_iter().find(|a| a.as_str() == s)
    }
}

/// One change, as the audit stream records it.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct AuditEntry {
    /// A UUIDv7: entries sort by it in the order they were made (to the millisecond
    /// across replicas).
    pub id: Uuid,
    pub at: DateTime<Utc>,
    /// Who: `key:<id>` (an API key), `user:<id>` (a login session), `local` (the embedded
    /// tier's local owner), `operator` (the `baton` command line), `engine` (a run's
    /// engine, for a call it refused), `retention`, `scheduler` or `webhooks` (the background jobs).
    pub actor: String,
    /// From where: the address of the client's connection (behind a proxy, the
    /// proxy's); none for the command line.
    #[schema(value_type = Option<String>)]
    pub source: Option<IpAddr>,
    pub action: AuditAction,
    /// What it changed: the member's user id, the key's id, the secret's name, the
    /// agent's or tool's id, the active key's id for a reseal.
    pub target: String,
    /// A few facts about the change (a role, a version, a key id); never a value.
    #[schema(value_type = Object)]
    pub details: serde_json::Value,
}

impl AuditEntry {
    /// A change `p` makes at `at`.
    pub fn by(
        p: &Principal,
        at: DateTime<Utc>,
        action: AuditAction,
        target: impl Into<String>,
        details: serde_json::Value,
    ) -> AuditEntry {
        let mut entry = Self::unattended(&p.actor, at, action, target, details);
        entry.source = p.source;
        entry
    }

    /// Something a run's engine did on its own, `run` named in the details.
    pub fn engine(
        at: DateTime<Utc>,
        action: AuditAction,
        target: impl Into<String>,
        details: serde_json::Value,
    ) -> AuditEntry {
        Self::unattended(ENGINE, at, action, target, details)
    }

    /// Something the retention job did: a run deleted past its tenant's or agent's policy.
    pub fn retention(
        at: DateTime<Utc>,
        action: AuditAction,
        target: impl Into<String>,
        details: serde_json::Value,
    ) -> AuditEntry {
        Self::unattended(RETENTION, at, action, target, details)
    }

    /// Something the schedules job did: a schedule paused with the reason.
    pub fn scheduler(
        at: DateTime<Utc>,
        action: AuditAction,
        target: impl Into<String>,
        details: serde_json::Value,
    ) -> AuditEntry {
        Self::unattended(SCHEDULER, at, action, target, details)
    }

    /// Something the webhook deliverer did: an endpoint disabled with the reason.
    pub fn webhooks(
        at: DateTime<Utc>,
        action: AuditAction,
        target: impl Into<String>,
        details: serde_json::Value,
    ) -> AuditEntry {
        Self::unattended(WEBHOOKS, at, action, target, details)
    }

    /// A change made with the `baton` command line.
    pub fn operator(
        at: DateTime<Utc>,
        action: AuditAction,
        target: impl Into<String>,
        details: serde_json::Value,
    ) -> AuditEntry {
        Self::unattended(OPERATOR, at, action, target, details)
    }

    /// An entry by `actor`, with no client address.
    fn unattended(
        actor: &str,
        at: DateTime<Utc>,
        action: AuditAction,
        target: impl Into<String>,
        details: serde_json::Value,
    ) -> AuditEntry {
        AuditEntry {
            id: Uuid::now_v7(),
            at,
            actor: actor.to_owned(),
            source: None,
            action,
            target: target.into(),
            details,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn action_names_round_trip_and_match_serde() {
        for action in AuditAction::ALL {
            assert_eq!(AuditAction::parse(action.as_str()), Some(action));
            let json = serde_json::to_value(action).expect("serializes");
            assert_eq!(json, serde_json::json!(action.as_str()));
            let back: AuditAction = serde_json::from_value(json).expect("deserializes");
            assert_eq!(back, action);
        }
        assert_eq!(AuditAction::parse("secret.value"), None);
    }

    #[test]
    fn an_entry_takes_who_and_where_from_the_principal() {
        let p = Principal {
            tenant: baton_events::TenantId::new(),
            role: crate::Role::Admin,
            actor: "key:1".into(),
            source: Some("127.0.0.1".parse().expect("address")),
        };
        let e = AuditEntry::by(
            &p,
            Utc::now(),
            AuditAction::SecretPut,
            "token",
            serde_json::json!({"key_id": "k1"}),
        );
        assert_eq!(e.actor, "key:1");
        assert_eq!(e.source, p.source);
        let op = AuditEntry::operator(
            Utc::now(),
            AuditAction::MemberAdded,
            "u",
            serde_json::json!({}),
        );
        assert_eq!((op.actor.as_str(), op.source), (OPERATOR, None));
    }
}
