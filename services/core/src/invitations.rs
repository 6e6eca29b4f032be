//! The invited user's side of invitations: the pending invitations to the email of a
//! logged-in user, and accepting one (which makes the membership, in the invitation's
//! tenant, with its role) or declining it. Only a session acts here: an invitation is a
//! person's, and an API key belongs to a tenant already.

use crate::error::CoreError;
use crate::model::{AuditAction, AuditEntry, InvitationToMe, Member, Session, User};
use crate::ports::{Clock, Decided, InvitationStore, UserStore};
use chrono::{DateTime, Utc};
use std::net::IpAddr;
use std::sync::Arc;
use uuid::Uuid;

/// The most invitations a user is shown.
pub const MAX_INVITATIONS_SHOWN: u32 = 1000;

/// The invitee's use cases.
#[derive(Clone)]
pub struct Invitations {
    pub store: Arc<dyn InvitationStore>,
    pub users: Arc<dyn UserStore>,
    pub clock: Arc<dyn Clock>,
}

impl Invitations {
    /// The pending invitations to the session's user.
    #[tracing::instrument(name = "invitations.mine", skip_all)]
    pub async fn mine(&self, session: &Session) -> Result<Vec<InvitationToMe>, CoreError> {
        let user = self.user(session).await?;
        Ok(self
            .store
            .invitations_to(&user.email, self.clock.now(), MAX_INVITATIONS_SHOWN)
            .await?)
    }

    /// Accepts invitation `id`: the session's user becomes a member of its tenant with its
    /// role. Someone else's, a decided or an expired invitation is `NotFound`; a member of
    /// the tenant already gets `AlreadyExists` and the invitation stays pending.
    #[tracing::instrument(name = "invitations.accept", skip_all)]
    pub async fn accept(
        &self,
        session: &Session,
        id: Uuid,
        source: Option<IpAddr>,
    ) -> Result<Member, CoreError> {
        let user = self.user(session).await?;
        let now = self.clock.now();
        let audit = entry(&user, now, source, AuditAction::MemberAdded, id);
        match self
            .store
            .accept_invitation(id, &user.email, user.id, now, &audit)
            .await?
        {
            Decided::Done(Some(member)) => Ok(member),
            Decided::Done(None) => Err(CoreError::Internal(
                "an accepted invitation made no membership".into(),
            )),
            Decided::NotFound => Err(CoreError::NotFound("invitation")),
            Decided::AlreadyMember => Err(CoreError::AlreadyExists(
                "the user is a member of this tenant already".into(),
            )),
        }
    }

    /// Declines invitation `id`.
    #[tracing::instrument(name = "invitations.decline", skip_all)]
    pub async fn decline(
        &self,
        session: &Session,
        id: Uuid,
        source: Option<IpAddr>,
    ) -> Result<(), CoreError> {
        let user = self.user(session).await?;
        let now = self.clock.now();
        let audit = entry(&user, now, source, AuditAction::InvitationDeclined, id);
        match self
            .store
            .decline_invitation(id, &user.email, now, &audit)
            .await?
        {
            Decided::Done(_) => Ok(()),
            Decided::NotFound | Decided::AlreadyMember => Err(CoreError::NotFound("invitation")),
        }
    }

    async fn user(&self, session: &Session) -> Result<User, CoreError> {
        self.users
            .get_user(session.user)
            .await?
            .ok_or(CoreError::NotFound("user"))
    }
}

/// The audit entry of `user`'s decision on `invitation`, from `source`, for the
/// invitation's tenant: its target is the user, as for every membership change.
fn entry(
    user: &User,
    at: DateTime<Utc>,
    source: Option<IpAddr>,
    action: AuditAction,
    invitation: Uuid,
) -> AuditEntry {
    AuditEntry {
        id: Uuid::now_v7(),
        at,
        actor: format!("user:{}", user.id),
        source,
        action,
        target: user.id.to_string(),
        details: serde_json::json!({"email": user.email, "invitation": invitation}),
    }
}
