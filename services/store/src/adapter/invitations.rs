//! `InvitationStore`: a tenant's invitations, on the `app` pool. An admin's writes and
//! reads are scoped to the tenant. The invited user finds invitations by email across
//! tenants, and accepts or declines one by id: those run cross-tenant
//! (`Scope::CrossTenant`) to find the invitation, locked, then write in its tenant, the
//! membership, the invitation's new state and the audit entry in one transaction.

use super::Result;
use super::audit::insert_entry;
use super::reads::commit;
use crate::backend::Backend;
use crate::plan::micros;
use crate::pools::{PoolKind, Scope};
use crate::query::Query;
use crate::rows::invitations::{
    InvitationRow, InvitationToMeRow, invitation_columns, invitation_to_me_columns,
};
use crate::store::Store;
use async_trait::async_trait;
use baton_core::model::{AuditEntry, Invitation, InvitationToMe, Member};
use baton_core::ports::{Decided, InvitationStore};
use baton_events::TenantId;
use chrono::{DateTime, Utc};
use sqlx::Transaction;
use uuid::Uuid;

/// The `SELECT` of every column an [`InvitationRow`] reads, from `invitations`.
const SELECT_INVITATIONS: &str = concat!("SELECT ", invitation_columns!(), " FROM invitations");

/// The pending, unexpired invitations to `$1` at `$2`, with their tenants' names.
const INVITATIONS_TO: &str = concat!(
    "SELECT ",
    invitation_to_me_columns!(),
    " FROM invitations i JOIN tenants t ON t.id = i.tenant_id \
     WHERE i.email = $1 AND i.state = 'pending' AND i.expires_at > $2 \
     ORDER BY i.id LIMIT $3"
);

/// Invitation `$1` to `$2` if it is pending and unexpired at `$3`.
const PENDING_INVITATION: &str = concat!(
    "SELECT ",
    invitation_columns!(),
    " FROM invitations WHERE id = $1 AND email = $2 AND state = 'pending' AND expires_at > $3"
);

#[async_trait]
impl<B: Backend> InvitationStore for Store<B> {
    /// A pending invitation to the email already is `Conflict { expected: 0, actual: 0 }`;
    /// an unknown tenant `NotFound`.
    #[tracing::instrument(name = "store.create_invitation", skip_all)]
    async fn create_invitation(
        &self,
        tenant: TenantId,
        invitation: &Invitation,
        audit: &AuditEntry,
    ) -> Result<()> {
        let mut change = self.audited(tenant, audit).await?;
        Query::new(concat!(
            "INSERT INTO invitations (",
            invitation_columns!(),
            ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
        ))
        .bind(tenant.as_uuid())
        .bind(invitation.id)
        .bind(&invitation.email)
        .bind(invitation.role.as_str())
        .bind(&invitation.invited_by)
        .bind(micros(invitation.created_at))
        .bind(micros(invitation.expires_at))
        .bind(invitation.state.as_str())
        .bind(invitation.decided_at.map(micros))
        .execute(&mut change.tx)
        .await?;
        change.commit().await
    }

    /// Ids are UUIDv7: id order is creation order.
    #[tracing::instrument(name = "store.list_invitations", skip_all)]
    async fn list_invitations(
        &self,
        tenant: TenantId,
        before: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<Invitation>> {
        self.newest_first::<InvitationRow, _>(tenant, SELECT_INVITATIONS, None, "", before, limit)
            .await
    }

    #[tracing::instrument(name = "store.get_invitation", skip_all)]
    async fn get_invitation(&self, tenant: TenantId, id: Uuid) -> Result<Option<Invitation>> {
        self.one_by_id::<InvitationRow, _>(tenant, SELECT_INVITATIONS, id)
            .await
    }

    #[tracing::instrument(name = "store.revoke_invitation", skip_all)]
    async fn revoke_invitation(
        &self,
        tenant: TenantId,
        id: Uuid,
        at: DateTime<Utc>,
        audit: &AuditEntry,
    ) -> Result<bool> {
        let mut change = self.audited(tenant, audit).await?;
        let revoked = Query::new(
            "UPDATE invitations SET state = 'revoked', decided_at = $3 \
             WHERE tenant_id = $1 AND id = $2 AND state = 'pending'",
        )
        .bind(tenant.as_uuid())
        .bind(id)
        .bind(micros(at))
        .execute(&mut change.tx)
        .await?
            > 0;
        change.commit_if(revoked).await?;
        Ok(revoked)
    }

    #[tracing::instrument(name = "store.invitations_to", skip_all)]
    async fn invitations_to(
        &self,
        email: &str,
        now: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<InvitationToMe>> {
        let q = Query::new(INVITATIONS_TO)
            .bind(email)
            .bind(micros(now))
            .bind(i64::from(limit));
        self.read_all::<InvitationToMeRow, _>(PoolKind::App, Scope::CrossTenant, q)
            .await
    }

    /// A membership the user has already is `AlreadyMember`, and nothing is written.
    #[tracing::instrument(name = "store.accept_invitation", skip_all)]
    async fn accept_invitation(
        &self,
        id: Uuid,
        email: &str,
        user: Uuid,
        at: DateTime<Utc>,
        audit: &AuditEntry,
    ) -> Result<Decided> {
        let Some((mut tx, invitation)) = self.pending(id, email, at).await? else {
            return Ok(Decided::NotFound);
        };
        let tenant = invitation.tenant_id;
        let member = Member {
            user_id: user,
            email: invitation.email.clone(),
            role: invitation.role,
            created_at: micros(at),
        };
        let inserted = Query::new(
            "INSERT INTO memberships (tenant_id, user_id, role, created_at) \
             VALUES ($1, $2, $3, $4)",
        )
        .bind(tenant.as_uuid())
        .bind(user)
        .bind(member.role.as_str())
        .bind(member.created_at)
        .execute(&mut tx)
        .await;
        match inserted {
            Ok(_) => {}
            Err(baton_core::StoreError::Conflict { .. }) => {
                let _ = tx.rollback().await;
                return Ok(Decided::AlreadyMember);
            }
            Err(e) => return Err(e),
        }
        let mut audit = audit.clone();
        if let Some(details) = audit.details.as_object_mut() {
            details.insert("role".into(), member.role.as_str().into());
        }
        self.decide(tx, &invitation, "accepted", at, &audit).await?;
        Ok(Decided::Done(Some(member)))
    }

    #[tracing::instrument(name = "store.decline_invitation", skip_all)]
    async fn decline_invitation(
        &self,
        id: Uuid,
        email: &str,
        at: DateTime<Utc>,
        audit: &AuditEntry,
    ) -> Result<Decided> {
        let Some((tx, invitation)) = self.pending(id, email, at).await? else {
            return Ok(Decided::NotFound);
        };
        self.decide(tx, &invitation, "declined", at, audit).await?;
        Ok(Decided::Done(None))
    }
}

impl<B: Backend> Store<B> {
    /// A write transaction holding the pending, unexpired invitation `id` to `email`
    /// (locked), scoped to its tenant from then on; `None` when there is none.
    async fn pending(
        &self,
        id: Uuid,
        email: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<(Transaction<'static, B>, Invitation)>> {
        let mut tx = self.pools.write(PoolKind::App, Scope::CrossTenant).await?;
        let row: Option<InvitationRow> = Query::new(PENDING_INVITATION)
            .suffix(B::LOCK_ROWS)
            .bind(id)
            .bind(email)
            .bind(micros(now))
            .fetch_optional(&mut tx)
            .await?;
        let Some(row) = row else {
            let _ = tx.rollback().await;
            return Ok(None);
        };
        let invitation = Invitation::try_from(row)?;
        self.pools
            .rescope(&mut tx, Scope::Tenant(invitation.tenant_id))
            .await?;
        Ok(Some((tx, invitation)))
    }

    /// Marks the invitation `state` at `at`, writes `audit` in its tenant and commits.
    async fn decide(
        &self,
        mut tx: Transaction<'static, B>,
        invitation: &Invitation,
        state: &'static str,
        at: DateTime<Utc>,
        audit: &AuditEntry,
    ) -> Result<()> {
        Query::new(
            "UPDATE invitations SET state = $1, decided_at = $2 \
             WHERE tenant_id = $3 AND id = $4",
        )
        .bind(state)
        .bind(micros(at))
        .bind(invitation.tenant_id.as_uuid())
        .bind(invitation.id)
        .execute(&mut tx)
        .await?;
        insert_entry(&mut tx, invitation.tenant_id, audit).await?;
        commit(tx).await
    }
}
