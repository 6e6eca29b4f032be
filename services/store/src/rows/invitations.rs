//! The rows of `invitations`, alone or with the tenant's name (what an invited user sees).

use super::corrupt;
use baton_core::model::{Invitation, InvitationState, InvitationToMe};
use baton_core::{Role, StoreError, TenantId};
use chrono::{DateTime, Utc};
use uuid::Uuid;

/// Expands to the columns of `invitations` an [`InvitationRow`] reads.
macro_rules! invitation_columns {
    () => {
        "tenant_id, id, email, role, invited_by, created_at, expires_at, state, decided_at"
    };
}
pub(crate) use invitation_columns;

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct InvitationRow {
    pub tenant_id: Uuid,
    pub id: Uuid,
    pub email: String,
    pub role: String,
    pub invited_by: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub state: String,
    pub decided_at: Option<DateTime<Utc>>,
}

fn role(id: Uuid, role: &str) -> Result<Role, StoreError> {
    Role::parse(role).ok_or_else(|| corrupt(format!("invitation {id} has unknown role {role:?}")))
}

impl TryFrom<InvitationRow> for Invitation {
    type Error = StoreError;

    fn try_from(r: InvitationRow) -> Result<Self, StoreError> {
        let state = InvitationState::parse(&r.state).ok_or_else(|| {
            corrupt(format!(
                "invitation {} has unknown state {:?}",
                r.id, r.state
            ))
        })?;
        Ok(Invitation {
            role: role(r.id, &r.role)?,
            id: r.id,
            tenant_id: TenantId(r.tenant_id),
            email: r.email,
            invited_by: r.invited_by,
            created_at: r.created_at,
            expires_at: r.expires_at,
            state,
            decided_at: r.decided_at,
        })
    }
}

/// Expands to the columns of `invitations i JOIN tenants t` an [`InvitationToMeRow`] reads.
macro_rules! invitation_to_me_columns {
    () => {
        "i.id, i.tenant_id, t.name AS tenant_name, i.role, i.invited_by, i.expires_at"
    };
}
pub(crate) use invitation_to_me_columns;

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct InvitationToMeRow {
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub tenant_name: String,
    pub role: String,
    pub invited_by: String,
    pub expires_at: DateTime<Utc>,
}

impl TryFrom<InvitationToMeRow> for InvitationToMe {
    type Error = StoreError;

    fn try_from(r: InvitationToMeRow) -> Result<Self, StoreError> {
        Ok(InvitationToMe {
            role: role(r.id, &r.role)?,
            id: r.id,
            tenant_id: TenantId(r.tenant_id),
            tenant_name: r.tenant_name,
            invited_by: r.invited_by,
            expires_at: r.expires_at,
        })
    }
}
