//! Users, memberships and login sessions.

use crate::error::StoreError;
use crate::model::{AuditEntry, Member, Role, Session, TenantRole, User};
use async_trait::async_trait;
use baton_events::TenantId;
use chrono::{DateTime, Utc};

/// A user as stored, with what logging in checks: the argon2id hash of the password.
#[derive(Clone, PartialEq, Eq)]
pub struct UserCredentials {
    pub user: User,
    /// The PHC string (`$argon2id$v=19$m=…,t=…,p=…$salt$hash`).
    pub password_hash: String,
}

impl std::fmt::Debug for UserCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserCredentials")
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

/// What a change of a membership (a new role, a removal) came to. The store decides the
/// last-owner rule in the same transaction as the write, so two owners demoting each other
/// at once cannot leave a tenant without one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberChange {
    /// Written.
    Done,
    /// The user is not a member of the tenant.
    NotFound,
    /// The member's role is no longer the one the change was decided against (another
    /// change came first): nothing was written.
    Stale,
    /// The member is the tenant's last owner, and the change would leave it with none:
    /// nothing was written.
    LastOwner,
}

/// Users, their memberships in tenants and their login sessions. Users and sessions
/// belong to no tenant: a user may be a member of several. Finding a user by email, a
/// session by its hash and a user's memberships are the lookups not scoped by a tenant
/// (they are how a login finds its tenants); everything about a tenant's members takes
/// the tenant first.
#[async_trait]
pub trait UserStore: Send + Sync {
    /// Stores a user with its password hash. A taken email or id is `Conflict`.
    async fn create_user(&self, user: &User, password_hash: &str) -> Result<(), StoreError>;
    /// The user with exactly this (normalized) email, and its password hash.
    async fn find_user_by_email(&self, email: &str) -> Result<Option<UserCredentials>, StoreError>;
    async fn get_user(&self, id: uuid::Uuid) -> Result<Option<User>, StoreError>;
    /// Makes the user a member of the tenant with `member.role`. An existing membership
    /// is `Conflict`; an unknown tenant or user is `NotFound`.
    async fn add_member(
        &self,
        tenant: TenantId,
        member: &Member,
        audit: &AuditEntry,
    ) -> Result<(), StoreError>;
    /// The tenant's membership of the user; `None` when it is not one (or the tenant is
    /// another's).
    async fn get_member(
        &self,
        tenant: TenantId,
        user: uuid::Uuid,
    ) -> Result<Option<Member>, StoreError>;
    /// The tenant's members in email order (byte-wise), after `after` when given, at
    /// most `limit`.
    async fn list_members(
        &self,
        tenant: TenantId,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Member>, StoreError>;
    /// Gives the member the role `to` if its role is still `from`. Demoting an owner
    /// (`from` is owner, `to` is not) is refused as [`MemberChange::LastOwner`] when no
    /// other member of the tenant is an owner.
    async fn change_member_role(
        &self,
        tenant: TenantId,
        user: uuid::Uuid,
        from: Role,
        to: Role,
        audit: &AuditEntry,
    ) -> Result<MemberChange, StoreError>;
    /// Removes the membership if its role is still `from`; removing the last owner is
    /// refused as [`MemberChange::LastOwner`].
    async fn remove_member(
        &self,
        tenant: TenantId,
        user: uuid::Uuid,
        from: Role,
        audit: &AuditEntry,
    ) -> Result<MemberChange, StoreError>;
    /// The user's memberships with their tenants' names, in tenant id order, at most
    /// `limit`.
    async fn memberships_of(
        &self,
        user: uuid::Uuid,
        limit: u32,
    ) -> Result<Vec<TenantRole>, StoreError>;
    /// Stores a session whose token hashes to `hash`, and deletes the user's sessions
    /// that expired before `session.created_at` (nothing can use them any more). A
    /// reused hash is `Conflict`, an unknown user `NotFound`.
    async fn create_session(&self, session: &Session, hash: &[u8]) -> Result<(), StoreError>;
    /// The session whose token hashes to `hash`, whatever its state; callers check
    /// expiry and revocation.
    async fn lookup_session(&self, hash: &[u8]) -> Result<Option<Session>, StoreError>;
    /// Marks the session revoked at `at` unless it already is. Returns whether this call
    /// revoked it. Authentication reads the session on every request, so it fails at once.
    async fn revoke_session(&self, id: uuid::Uuid, at: DateTime<Utc>) -> Result<bool, StoreError>;
}
