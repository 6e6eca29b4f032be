//! Who is calling and what they may do. Only the API's auth extractor builds a
//! [`Principal`] from credentials; use cases ask [`Principal::require`] before acting.

use crate::error::CoreError;
use baton_events::TenantId;
use serde::{Deserialize, Serialize};

/// A role within one tenant, from most to least powerful.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Viewer,
    Member,
    Admin,
    Owner,
}

impl Role {
    pub fn as_str(&self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Member => "member",
            Role::Admin => "admin",
            Role::Owner => "owner",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "viewer" => Some(Role::Viewer),
            "member" => Some(Role::Member),
            "admin" => Some(Role::Admin),
            "owner" => Some(Role::Owner),
            _ => None,
        }
    }
}

/// Everything a use case may be asked to do, for the authorization table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    ReadAgents,
    ManageAgents,
    ReadRuns,
    CreateRuns,
    PostMessages,
    /// Change a run's title and metadata.
    UpdateRuns,
    CancelRuns,
    /// Delete a run with everything recorded of it.
    DeleteRuns,
    /// Approve or deny tool calls, submit client tool outputs, resolve uncertain calls.
    ResolveActions,
    ReadTools,
    ManageTools,
    /// Store, list and delete the tenant's secrets (their values are never read back).
    ManageSecrets,
    /// See which encryption keys seal the tenant's secrets and checkpoints, and re-seal
    /// them under the active key (key ids only: key material never leaves the server).
    ManageEncryptionKeys,
    /// Create, list and revoke the tenant's API keys (a new key's role is at most the
    /// creator's: see [`Principal::may_grant`]).
    ManageApiKeys,
    /// Add users to the tenant, change their roles, remove them, list the members (of
    /// roles up to the caller's own: see [`Action::ManageOwners`]).
    ManageMembers,
    /// Make a member an owner, or change or remove an owner's membership.
    ManageOwners,
    /// Read the tenant's audit stream: who changed its members, keys, secrets, agents
    /// and tools, when and from where.
    ReadAudit,
    /// Read and set the tenant's egress allowlist (the hosts its calls may reach).
    ManageEgress,
    /// Read and set the tenant's retention policy (how long ended runs are kept).
    ManageRetention,
    /// List and read the tenant's schedules.
    ReadSchedules,
    /// Create, change, pause, resume and delete schedules (a schedule's runs start on
    /// behalf of whoever last created, changed or resumed it).
    ManageSchedules,
    /// Register, change, rotate the secrets of and delete webhook endpoints, and read and
    /// replay their deliveries.
    ManageWebhooks,
    /// List an MCP server's tools anew (a discovery): its answer is stored, shown, and
    /// offered to no agent until an admin enables a tool.
    DiscoverMcpTools,
    /// Register, change and delete MCP servers, and enable their discovered tools.
    ManageMcpServers,
    /// Upload files into a run's workspace (`uploads/`).
    UploadFiles,
    /// List the execution environments workspace commands may run in.
    ReadEnvironments,
    /// Define, change and delete the tenant's own execution environments.
    ManageEnvironments,
}

impl Action {
    /// The least role allowed to perform the action.
    pub fn min_role(&self) -> Role {
        match self {
            Action::ReadAgents
            | Action::ReadRuns
            | Action::ReadTools
            | Action::ReadSchedules
            | Action::ReadEnvironments => Role::Viewer,
            Action::CreateRuns
            | Action::PostMessages
            | Action::UpdateRuns
            | Action::CancelRuns
            | Action::ResolveActions
            | Action::ManageSchedules
            | Action::DiscoverMcpTools
            | Action::UploadFiles => Role::Member,
            Action::ManageAgents
            | Action::DeleteRuns
            | Action::ManageTools
            | Action::ManageSecrets
            | Action::ManageEncryptionKeys
            | Action::ManageApiKeys
            | Action::ManageMembers
            | Action::ReadAudit
            | Action::ManageEgress
            | Action::ManageRetention
            | Action::ManageWebhooks
            | Action::ManageMcpServers
            | Action::ManageEnvironments => Role::Admin,
            Action::ManageOwners => Role::Owner,
        }
    }

    fn describe(&self) -> &'static str {
        match self {
            Action::ReadAgents => "read agents",
            Action::ManageAgents => "manage agents",
            Action::ReadRuns => "read runs",
            Action::UploadFiles => "upload files to runs",
            Action::CreateRuns => "create runs",
            Action::PostMessages => "post messages",
            Action::UpdateRuns => "change a run's title and metadata",
            Action::CancelRuns => "cancel runs",
            Action::DeleteRuns => "delete runs",
            Action::ResolveActions => "resolve a run's pending actions",
            Action::ReadTools => "read tools",
            Action::ManageTools => "manage tools",
            Action::ManageSecrets => "manage secrets",
            Action::ManageEncryptionKeys => "manage the tenant's encryption keys",
            Action::ManageApiKeys => "manage API keys",
            Action::ManageMembers => "manage members",
            Action::ManageOwners => "manage owners",
            Action::ReadAudit => "read the audit stream",
            Action::ManageEgress => "manage the egress allowlist",
            Action::ManageRetention => "manage the retention policy",
            Action::ReadSchedules => "read schedules",
            Action::ManageSchedules => "manage schedules",
            Action::ManageWebhooks => "manage webhooks",
            Action::DiscoverMcpTools => "discover MCP servers' tools",
            Action::ManageMcpServers => "manage MCP servers",
            Action::ReadEnvironments => "read execution environments",
            Action::ManageEnvironments => "manage execution environments",
        }
    }
}

/// An authenticated caller acting within one tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub tenant: TenantId,
    pub role: Role,
    /// Stable actor label recorded in event metadata: `key:<id>`, `user:<id>` (a login
    /// session) or `local`.
    pub actor: String,
    /// The address of the client's connection, for the audit stream; none when the
    /// caller is not a network client.
    pub source: Option<std::net::IpAddr>,
}

impl Principal {
    pub fn require(&self, action: Action) -> Result<(), CoreError> {
        if self.role >= action.min_role() {
            Ok(())
        } else {
            Err(CoreError::Forbidden(action.describe()))
        }
    }

    /// Whether the caller may hand out (or take back) a credential of `role`: only of a
    /// role no higher than its own, so nobody can raise their own rights through a key.
    pub fn may_grant(&self, role: Role) -> bool {
        role <= self.role
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn as_role(role: Role) -> Principal {
        Principal {
            tenant: TenantId::new(),
            role,
            actor: "test".into(),
            source: None,
        }
    }

    #[test]
    fn viewer_reads_but_does_not_write() {
        let p = as_role(Role::Viewer);
        assert!(p.require(Action::ReadRuns).is_ok());
        assert!(p.require(Action::PostMessages).is_err());
        assert!(p.require(Action::ManageAgents).is_err());
    }

    #[test]
    fn member_drives_runs_but_does_not_manage_agents() {
        let p = as_role(Role::Member);
        assert!(p.require(Action::CreateRuns).is_ok());
        assert!(p.require(Action::CancelRuns).is_ok());
        assert!(p.require(Action::ManageAgents).is_err());
    }

    #[test]
    fn admin_and_owner_may_do_everything_here() {
        for role in [Role::Admin, Role::Owner] {
            let p = as_role(role);
            assert!(p.require(Action::ManageAgents).is_ok());
            assert!(p.require(Action::PostMessages).is_ok());
            assert!(p.require(Action::ManageApiKeys).is_ok());
        }
    }

    #[test]
    fn only_admins_and_owners_manage_api_keys() {
        for role in [Role::Viewer, Role::Member] {
            let err = as_role(role).require(Action::ManageApiKeys);
            assert!(
                matches!(err, Err(CoreError::Forbidden("manage API keys"))),
                "{role:?}: {err:?}"
            );
        }
        assert_eq!(Action::ManageApiKeys.min_role(), Role::Admin);
    }

    #[test]
    fn admins_manage_members_and_only_owners_manage_owners() {
        for role in [Role::Viewer, Role::Member] {
            assert!(as_role(role).require(Action::ManageMembers).is_err());
        }
        assert!(as_role(Role::Admin).require(Action::ManageMembers).is_ok());
        let err = as_role(Role::Admin).require(Action::ManageOwners);
        assert!(
            matches!(err, Err(CoreError::Forbidden("manage owners"))),
            "{err:?}"
        );
        assert!(as_role(Role::Owner).require(Action::ManageOwners).is_ok());
    }

    #[test]
    fn a_role_grants_only_roles_up_to_its_own() {
        let all = [Role::Viewer, Role::Member, Role::Admin, Role::Owner];
        for caller in all {
            let p = as_role(caller);
            for role in all {
                assert_eq!(p.may_grant(role), role <= caller, "{caller:?} -> {role:?}");
            }
        }
        assert!(!as_role(Role::Admin).may_grant(Role::Owner));
        assert!(as_role(Role::Admin).may_grant(Role::Admin));
    }
}
