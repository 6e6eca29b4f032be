//! Invitations to join a tenant: an email and the role it would have. Pending, an
//! invitation grants nothing; its user accepts it (which makes the membership) or declines
//! it while logged in, or an admin revokes it.

use crate::model::Role;
use baton_events::TenantId;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Where an invitation stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum InvitationState {
    Pending,
    Accepted,
    Declined,
    Revoked,
}

impl InvitationState {
    pub fn as_str(&self) -> &'static str {
        match self {
            InvitationState::Pending => "pending",
            InvitationState::Accepted => "accepted",
            InvitationState::Declined => "declined",
            InvitationState::Revoked => "revoked",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [
            InvitationState::Pending,
            InvitationState::Accepted,
            InvitationState::Declined,
            InvitationState::Revoked,
        ]
        .into_iter()
        .find(|state| state.as_str() == s)
    }
}

/// An invitation, as the tenant's admins see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Invitation {
    pub id: Uuid,
    pub tenant_id: TenantId,
    /// Lower case.
    pub email: String,
    /// The role the membership gets when the invitation is accepted.
    pub role: Role,
    /// Who invited: `key:<id>`, `user:<id>` or `local`.
    pub invited_by: String,
    pub created_at: DateTime<Utc>,
    /// A pending invitation can no longer be accepted after this.
    pub expires_at: DateTime<Utc>,
    pub state: InvitationState,
    /// When it was accepted, declined or revoked.
    pub decided_at: Option<DateTime<Utc>>,
}

/// A pending invitation, as the invited user sees it: which tenant, which role.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct InvitationToMe {
    pub id: Uuid,
    pub tenant_id: TenantId,
    /// The tenant's name.
    pub tenant_name: String,
    pub role: Role,
    pub invited_by: String,
    pub expires_at: DateTime<Utc>,
}
