//! The members of a tenant: admins invite emails (a user joins by accepting, see
//! [`crate::invitations`]), change members' roles and remove them, up to their own role:
//! only owners invite or make owners or touch an owner's membership, and the last owner
//! can be neither removed nor demoted.

use crate::auth::Announcer;
use crate::error::CoreError;
use crate::model::{
    Action, AuditAction, AuditEntry, Invitation, InvitationState, Member, Principal, Role,
};
use crate::page::{self, Page};
use crate::ports::{Clock, Control, InvitationStore, MemberChange, UserStore};
use crate::users::{MAX_EMAIL_CHARS, check_email, normalize_email};
use crate::validate;
use chrono::TimeDelta;
use serde::Deserialize;
use std::sync::Arc;
use uuid::Uuid;

/// What the tenant's last owner gets for removing or demoting itself.
pub const LAST_OWNER: &str = "the tenant's last owner can be neither removed nor demoted: \
                              make another member an owner first";

/// How long an invitation may be accepted.
pub const INVITATION_LIFETIME: TimeDelta = TimeDelta::days(7);

/// A user to invite to the tenant.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewMember {
    /// The email to invite (whether or not an account has it yet).
    pub email: String,
    /// The member's role: `owner` only when the caller is an owner.
    pub role: Role,
}

/// A member's new role.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MemberRole {
    pub role: Role,
}

/// The membership use cases of one tenant (admins; owners for owner memberships).
#[derive(Clone)]
pub struct Members {
    pub store: Arc<dyn UserStore>,
    pub invitations: Arc<dyn InvitationStore>,
    pub clock: Arc<dyn Clock>,
    /// Tells the replicas a member left, so the streams its sessions opened here end.
    pub announcer: Announcer,
}

impl Members {
    /// Invites `new.email` to the caller's tenant with `new.role`. Answers the same
    /// whether or not an account has that email, so it says nothing about accounts; the
    /// invitation grants nothing until its user accepts it ([`crate::invitations`]). One
    /// pending already for the email is `AlreadyExists`.
    #[tracing::instrument(name = "members.invite", skip_all)]
    pub async fn invite(&self, p: &Principal, new: NewMember) -> Result<Invitation, CoreError> {
        p.require(Action::ManageMembers)?;
        may_manage(p, new.role)?;
        let email = normalize_email(&new.email);
        check_email(&email)?;
        let now = self.clock.now();
        let invitation = Invitation {
            id: Uuid::now_v7(),
            tenant_id: p.tenant,
            email,
            role: new.role,
            invited_by: p.actor.clone(),
            created_at: now,
            expires_at: now + INVITATION_LIFETIME,
            state: InvitationState::Pending,
            decided_at: None,
        };
        let audit = AuditEntry::by(
            p,
            now,
            AuditAction::MemberInvited,
            invitation.id.to_string(),
            serde_json::json!({"email": invitation.email, "role": invitation.role}),
        );
        match self
            .invitations
            .create_invitation(p.tenant, &invitation, &audit)
            .await
        {
            Ok(()) => Ok(invitation),
            Err(crate::StoreError::Conflict { .. }) => Err(CoreError::AlreadyExists(
                "an invitation to this email is pending already: revoke it to invite again".into(),
            )),
            Err(e) => Err(e.into()),
        }
    }

    /// The tenant's invitations, newest first, whatever their state.
    #[tracing::instrument(name = "members.invitations", skip_all)]
    pub async fn invitations(
        &self,
        p: &Principal,
        before: Option<Uuid>,
        limit: Option<u32>,
    ) -> Result<Page<Invitation>, CoreError> {
        p.require(Action::ManageMembers)?;
        let limit = page::limit(limit)?;
        let items = self
            .invitations
            .list_invitations(p.tenant, before, limit)
            .await?;
        Ok(Page::of(items, limit, |i| i.id.to_string()))
    }

    /// Revokes a pending invitation of the tenant. One that was decided (or revoked)
    /// already is `WrongState`; another tenant's, or none, `NotFound`.
    #[tracing::instrument(name = "members.revoke_invitation", skip_all)]
    pub async fn revoke_invitation(&self, p: &Principal, id: Uuid) -> Result<(), CoreError> {
        p.require(Action::ManageMembers)?;
        let now = self.clock.now();
        let audit = AuditEntry::by(
            p,
            now,
            AuditAction::InvitationRevoked,
            id.to_string(),
            serde_json::json!({}),
        );
        if self
            .invitations
            .revoke_invitation(p.tenant, id, now, &audit)
            .await?
        {
            return Ok(());
        }
        match self.invitations.get_invitation(p.tenant, id).await? {
            Some(i) => Err(CoreError::WrongState(format!(
                "the invitation is {} already",
                i.state.as_str()
            ))),
            None => Err(CoreError::NotFound("invitation")),
        }
    }

    /// The tenant's members in email order.
    #[tracing::instrument(name = "members.list", skip_all)]
    pub async fn list(
        &self,
        p: &Principal,
        after: Option<&str>,
        limit: Option<u32>,
    ) -> Result<Page<Member>, CoreError> {
        p.require(Action::ManageMembers)?;
        let limit = page::limit(limit)?;
        // The cursor is an email the client passes back: no database need see what no
        // email can be.
        if let Some(after) = after {
            validate::text("cursor", after, MAX_EMAIL_CHARS)?;
        }
        let items = self.store.list_members(p.tenant, after, limit).await?;
        Ok(Page::of(items, limit, |m| m.email.clone()))
    }

    /// Gives a member another role. Both the member's role and the new one must be
    /// within the caller's reach; demoting the last owner is `WrongState`.
    #[tracing::instrument(name = "members.set_role", skip_all)]
    pub async fn set_role(
        &self,
        p: &Principal,
        user: Uuid,
        role: Role,
    ) -> Result<Member, CoreError> {
        p.require(Action::ManageMembers)?;
        let current = self.member(p, user).await?;
        may_manage(p, current.role)?;
        may_manage(p, role)?;
        if current.role == role {
            return Ok(current);
        }
        let audit = AuditEntry::by(
            p,
            self.clock.now(),
            AuditAction::MemberRoleChanged,
            user.to_string(),
            serde_json::json!({"email": current.email, "from": current.role, "to": role}),
        );
        let outcome = self
            .store
            .change_member_role(p.tenant, user, current.role, role, &audit)
            .await?;
        settled(outcome)?;
        Ok(Member { role, ..current })
    }

    /// Removes a member from the tenant. Removing the last owner is `WrongState`.
    #[tracing::instrument(name = "members.remove", skip_all)]
    pub async fn remove(&self, p: &Principal, user: Uuid) -> Result<(), CoreError> {
        p.require(Action::ManageMembers)?;
        let current = self.member(p, user).await?;
        may_manage(p, current.role)?;
        let audit = AuditEntry::by(
            p,
            self.clock.now(),
            AuditAction::MemberRemoved,
            user.to_string(),
            serde_json::json!({"email": current.email, "role": current.role}),
        );
        settled(
            self.store
                .remove_member(p.tenant, user, current.role, &audit)
                .await?,
        )?;
        self.announcer
            .announce(Control::MemberRemoved {
                tenant: p.tenant,
                user,
            })
            .await;
        Ok(())
    }

    /// The caller's tenant's membership of `user`; another tenant's is `NotFound`.
    async fn member(&self, p: &Principal, user: Uuid) -> Result<Member, CoreError> {
        self.store
            .get_member(p.tenant, user)
            .await?
            .ok_or(CoreError::NotFound("member"))
    }
}

/// Whether the caller may act on a membership of `role` (give it, change it, remove it):
/// owner memberships need an owner, and no caller reaches above its own role.
fn may_manage(p: &Principal, role: Role) -> Result<(), CoreError> {
    if role == Role::Owner {
        p.require(Action::ManageOwners)?;
    }
    if p.may_grant(role) {
        Ok(())
    } else {
        Err(CoreError::Forbidden(
            "manage a membership of a role above its own",
        ))
    }
}

fn settled(outcome: MemberChange) -> Result<(), CoreError> {
    match outcome {
        MemberChange::Done => Ok(()),
        MemberChange::NotFound => Err(CoreError::NotFound("member")),
        MemberChange::Stale => Err(CoreError::Conflict),
        MemberChange::LastOwner => Err(CoreError::WrongState(LAST_OWNER.into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_events::TenantId;

    fn principal(role: Role) -> Principal {
        Principal {
            tenant: TenantId::new(),
            role,
            actor: "test".into(),
            source: None,
        }
    }

    #[test]
    fn owner_memberships_need_an_owner() {
        for role in [Role::Viewer, Role::Member, Role::Admin] {
            assert!(
                may_manage(&principal(Role::Admin), role).is_ok(),
                "{role:?}"
            );
        }
        let err = may_manage(&principal(Role::Admin), Role::Owner);
        assert!(
            matches!(err, Err(CoreError::Forbidden("manage owners"))),
            "{err:?}"
        );
        assert!(may_manage(&principal(Role::Owner), Role::Owner).is_ok());
        assert!(may_manage(&principal(Role::Member), Role::Admin).is_err());
    }

    #[test]
    fn store_outcomes_become_core_errors() {
        assert!(settled(MemberChange::Done).is_ok());
        assert!(matches!(
            settled(MemberChange::NotFound),
            Err(CoreError::NotFound("member"))
        ));
        assert!(matches!(
            settled(MemberChange::Stale),
            Err(CoreError::Conflict)
        ));
        match settled(MemberChange::LastOwner) {
            Err(CoreError::WrongState(m)) => assert_eq!(m, LAST_OWNER),
            other => panic!("{other:?}"),
        }
    }
}
