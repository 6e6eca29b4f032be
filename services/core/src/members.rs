//! The members of a tenant: admins add users (who must exist), change their roles and
//! remove them, up to their own role: only owners make owners or touch an owner's
//! membership, and the last owner can be neither removed nor demoted.

use crate::auth::Announcer;
use crate::error::CoreError;
use crate::model::{Action, AuditAction, AuditEntry, Member, Principal, Role};
use crate::page::{self, Page};
use crate::ports::{Clock, Control, MemberChange, UserStore};
use crate::users::{MAX_EMAIL_CHARS, normalize_email};
use crate::validate;
use serde::Deserialize;
use std::sync::Arc;
use uuid::Uuid;

/// What the tenant's last owner gets for removing or demoting itself.
pub const LAST_OWNER: &str = "the tenant's last owner can be neither removed nor demoted: \
                              make another member an owner first";

/// A user to add to the tenant.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewMember {
    /// The email of an existing user.
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
    pub clock: Arc<dyn Clock>,
    /// Tells the replicas a member left, so the streams its sessions opened here end.
    pub announcer: Announcer,
}

impl Members {
    /// Adds an existing user to the caller's tenant with `role`.
    #[tracing::instrument(name = "members.add", skip_all)]
    pub async fn add(&self, p: &Principal, new: NewMember) -> Result<Member, CoreError> {
        p.require(Action::ManageMembers)?;
        may_manage(p, new.role)?;
        let email = normalize_email(&new.email);
        validate::text("email", &email, MAX_EMAIL_CHARS)?;
        let user = self
            .store
            .find_user_by_email(&email)
            .await?
            .ok_or(CoreError::NotFound("user"))?
            .user;
        let member = Member {
            user_id: user.id,
            email: user.email,
            role: new.role,
            created_at: self.clock.now(),
        };
        let audit = AuditEntry::by(
            p,
            member.created_at,
            AuditAction::MemberAdded,
            member.user_id.to_string(),
            serde_json::json!({"email": member.email, "role": member.role}),
        );
        match self.store.add_member(p.tenant, &member, &audit).await {
            Ok(()) => Ok(member),
            Err(crate::StoreError::Conflict { .. }) => Err(CoreError::AlreadyExists(
                "the user is a member of this tenant already".into(),
            )),
            Err(e) => Err(e.into()),
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
        let next_cursor = (items.len() == limit as usize)
            .then(|| items.last().map(|m| m.email.clone()))
            .flatten();
        Ok(Page { items, next_cursor })
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
