//! Invitations to tenants.

use crate::error::StoreError;
use crate::model::{AuditEntry, Invitation, InvitationToMe, Member};
use async_trait::async_trait;
use baton_events::TenantId;
use chrono::{DateTime, Utc};
use uuid::Uuid;

/// What deciding an invitation came to. Decided in the transaction that writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decided {
    /// Written; for an acceptance, the new membership.
    Done(Option<Member>),
    /// No pending, unexpired invitation of that id for that email.
    NotFound,
    /// The user is a member of the tenant already: nothing was written.
    AlreadyMember,
}

/// Invitations, stored per tenant; the invited user finds them by email, across tenants.
#[async_trait]
pub trait InvitationStore: Send + Sync {
    /// Stores a pending invitation. One pending already for that email in the tenant is
    /// `Conflict`; an unknown tenant `NotFound`.
    async fn create_invitation(
        &self,
        tenant: TenantId,
        invitation: &Invitation,
        audit: &AuditEntry,
    ) -> Result<(), StoreError>;

    /// The tenant's invitations, newest first (by id), older than `before` when given.
    async fn list_invitations(
        &self,
        tenant: TenantId,
        before: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<Invitation>, StoreError>;

    /// The tenant's invitation `id`, whatever its state.
    async fn get_invitation(
        &self,
        tenant: TenantId,
        id: Uuid,
    ) -> Result<Option<Invitation>, StoreError>;

    /// Revokes the tenant's invitation if it is pending; returns whether it was.
    async fn revoke_invitation(
        &self,
        tenant: TenantId,
        id: Uuid,
        at: DateTime<Utc>,
        audit: &AuditEntry,
    ) -> Result<bool, StoreError>;

    /// The pending invitations to `email` that have not expired at `now`, in every
    /// tenant, with the tenants' names, at most `limit`.
    async fn invitations_to(
        &self,
        email: &str,
        now: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<InvitationToMe>, StoreError>;

    /// Accepts the pending, unexpired invitation `id` to `email` for the user `user`: in one
    /// transaction marks it accepted, makes the membership (`member.created_at` is `at`)
    /// and writes `audit` in the invitation's tenant, with the invitation's `role` added to
    /// its details (only the store reads the invitation before deciding).
    async fn accept_invitation(
        &self,
        id: Uuid,
        email: &str,
        user: Uuid,
        at: DateTime<Utc>,
        audit: &AuditEntry,
    ) -> Result<Decided, StoreError>;

    /// Declines the pending invitation `id` to `email`, writing `audit` in its tenant.
    async fn decline_invitation(
        &self,
        id: Uuid,
        email: &str,
        at: DateTime<Utc>,
        audit: &AuditEntry,
    ) -> Result<Decided, StoreError>;
}
