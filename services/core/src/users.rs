//! Users, login sessions and tenant memberships.
//!
//! A user has an email (trimmed and lower-cased, unique) and an argon2id password hash
//! ([`Passwords`]). Logging in ([`Users::login`]) checks the password and issues a session
//! token (`bs_` and 64 hex digits, [`crate::keys`]) that expires after the configured
//! lifetime and is revoked by logging out; like an API key, only its SHA-256 is stored.
//! A failed login answers the same for an unknown email and a wrong password, and takes
//! as long: an unknown email is checked against a dummy hash of the same parameters.
//!
//! A user acts in a tenant through a membership, with the membership's role
//! ([`Users::principal`]); a user may belong to several tenants. Admins manage a tenant's
//! members ([`Members`]) up to their own role: only owners make owners or touch an owner's
//! membership, and the last owner can be neither removed nor demoted.

use crate::audit::{AuditAction, AuditEntry};
use crate::auth::{Action, Principal, Role};
use crate::error::CoreError;
use crate::keys;
use crate::page::{self, Page};
use crate::ports::{Clock, MemberChange, UserStore};
use crate::validate;
use argon2::password_hash::PasswordVerifier;
use argon2::{Algorithm, Argon2, Params, PasswordHasher, Version};
use base64::Engine;
use baton_events::TenantId;
use chrono::{DateTime, TimeDelta, Utc};
use rand::RngCore;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use thiserror::Error;
use tokio::sync::Semaphore;
use uuid::Uuid;

/// Longest email, in characters (the longest a mail path allows).
pub const MAX_EMAIL_CHARS: usize = 254;
/// Shortest password a new user may have, in characters.
pub const MIN_PASSWORD_CHARS: usize = 12;
/// Longest password, in characters: longer input is refused before any hashing.
pub const MAX_PASSWORD_CHARS: usize = 1024;
/// The most memberships `GET /v1/me` lists.
pub const MAX_MEMBERSHIPS_SHOWN: u32 = 1000;

/// What the tenant's last owner gets for removing or demoting itself.
pub const LAST_OWNER: &str = "the tenant's last owner can be neither removed nor demoted: \
                              make another member an owner first";

/// A user, as any answer may show it: never its password hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct User {
    pub id: Uuid,
    /// Lower case, unique.
    pub email: String,
    pub created_at: DateTime<Utc>,
}

/// A user's membership of a tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Member {
    pub user_id: Uuid,
    pub email: String,
    pub role: Role,
    /// When the user was added to the tenant.
    pub created_at: DateTime<Utc>,
}

/// A tenant the user belongs to, and its role there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct TenantRole {
    pub tenant_id: TenantId,
    pub name: String,
    pub role: Role,
}

/// A login session as stored (its token is not: only the token's hash).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub id: Uuid,
    pub user: Uuid,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// A login as a client sends it.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Login {
    pub email: String,
    pub password: String,
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Login").finish_non_exhaustive()
    }
}

/// A successful login: the session token, shown this once.
#[derive(Serialize, utoipa::ToSchema)]
pub struct LoggedIn {
    /// The bearer token (`bs_` and 64 hex digits) of the new session. Only its hash is
    /// stored: it cannot be shown again.
    pub token: String,
    /// When the session ends, unless logged out before.
    pub expires_at: DateTime<Utc>,
    pub user: User,
}

impl std::fmt::Debug for LoggedIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoggedIn")
            .field("expires_at", &self.expires_at)
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

/// Why a login failed.
#[derive(Debug, Error)]
pub enum LoginError {
    /// Unknown email, wrong password, or input no account can have: one answer for all,
    /// so a failure tells nothing about which accounts exist.
    #[error("the email or password is not valid")]
    InvalidCredentials,
    #[error(transparent)]
    Core(#[from] CoreError),
}

/// Why a session token does not authenticate a request in a tenant.
#[derive(Debug, Error)]
pub enum SessionError {
    #[error("the session token is not valid")]
    Unknown,
    #[error("the session has ended: log in again")]
    Revoked,
    #[error("the session has expired: log in again")]
    Expired,
    /// Also for a tenant that does not exist: the two are not told apart.
    #[error("the user is not a member of the tenant named by the Baton-Tenant header")]
    NotMember,
    #[error("the user is not a member of any tenant")]
    NoTenant,
    #[error("the user is a member of several tenants: name one with the Baton-Tenant header")]
    TenantNeeded,
    #[error(transparent)]
    Core(#[from] CoreError),
}

impl From<crate::StoreError> for SessionError {
    fn from(e: crate::StoreError) -> Self {
        SessionError::Core(e.into())
    }
}

/// The argon2id cost parameters of new password hashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PasswordParams {
    /// Memory, in KiB.
    pub memory_kib: u32,
    /// Passes over the memory.
    pub iterations: u32,
    /// Lanes.
    pub parallelism: u32,
}

impl PasswordParams {
    /// OWASP's recommendation for argon2id (Password Storage Cheat Sheet): 19 MiB,
    /// two passes, one lane.
    pub const OWASP: PasswordParams = PasswordParams {
        memory_kib: 19_456,
        iterations: 2,
        parallelism: 1,
    };

    /// The parameters as argon2 takes them; an error says what argon2 refuses.
    pub fn argon2(&self) -> Result<Params, String> {
        Params::new(self.memory_kib, self.iterations, self.parallelism, None)
            .map_err(|e| e.to_string())
    }
}

impl Default for PasswordParams {
    fn default() -> Self {
        Self::OWASP
    }
}

/// Hashes and verifies passwords with argon2id, off the async threads
/// (`spawn_blocking`), at most one per CPU at a time: each hash holds its memory cost
/// while it runs, so a burst of logins queues rather than exhausting memory.
#[derive(Clone)]
pub struct Passwords {
    params: Params,
    /// A PHC string of the same parameters that no password matches, verified instead of
    /// a real hash when the email is unknown, so both failures cost the same.
    dummy: Arc<str>,
    permits: Arc<Semaphore>,
}

impl std::fmt::Debug for Passwords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Passwords")
            .field("params", &self.params)
            .finish_non_exhaustive()
    }
}

impl Passwords {
    pub fn new(params: PasswordParams) -> Result<Self, CoreError> {
        let argon2 = params
            .argon2()
            .map_err(|e| CoreError::invalid(format!("argon2 parameters: {e}")))?;
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        Ok(Passwords {
            dummy: dummy_hash(&params).into(),
            params: argon2,
            permits: Arc::new(Semaphore::new(cpus)),
        })
    }

    /// The PHC string of a new argon2id hash of `password` with a random salt.
    pub async fn hash(&self, password: &str) -> Result<String, CoreError> {
        let argon2 = Argon2::new(Algorithm::Argon2id, Version::V0x13, self.params.clone());
        let password = password.to_owned();
        self.blocking(move || {
            argon2
                .hash_password(password.as_bytes())
                .map(|h| h.to_string())
                .map_err(|e| CoreError::Internal(format!("hashing a password: {e}")))
        })
        .await?
    }

    /// Whether `password` matches `hash`. Without a hash (an unknown user), or with one
    /// that does not parse, the dummy hash is verified instead and the answer is false:
    /// the time spent is that of a real verification.
    pub async fn verify(&self, password: &str, hash: Option<&str>) -> Result<bool, CoreError> {
        let parsed = hash.filter(|h| argon2::PasswordHash::new(h).is_ok());
        let real = parsed.is_some();
        let hash = parsed.map_or_else(|| self.dummy.to_string(), str::to_owned);
        let password = password.to_owned();
        let matches = self
            .blocking(move || {
                // The hash names its own algorithm and parameters.
                Argon2::default()
                    .verify_password(password.as_bytes(), hash.as_str())
                    .is_ok()
            })
            .await?;
        Ok(real && matches)
    }

    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, CoreError> {
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| CoreError::Internal("the password hashing queue is closed".into()))?;
        tokio::task::spawn_blocking(work)
            .await
            .map_err(|e| CoreError::Internal(format!("a password hashing task failed: {e}")))
    }
}

/// An argon2id PHC string of `params` with a random salt and a random output: parsing and
/// verifying it costs what a real hash of those parameters costs, and nothing matches it.
fn dummy_hash(params: &PasswordParams) -> String {
    let mut salt = [0u8; 16];
    let mut output = [0u8; 32];
    rand::rng().fill_bytes(&mut salt);
    rand::rng().fill_bytes(&mut output);
    let b64 = base64::engine::general_purpose::STANDARD_NO_PAD;
    format!(
        "$argon2id$v=19$m={},t={},p={}${}${}",
        params.memory_kib,
        params.iterations,
        params.parallelism,
        b64.encode(salt),
        b64.encode(output)
    )
}

/// An email as stored and looked up: trimmed and lower-cased.
pub fn normalize_email(email: &str) -> String {
    email.trim().to_lowercase()
}

/// Whether a normalized email could belong to an account: what [`check_email`] accepts.
fn plausible_email(email: &str) -> bool {
    check_email(email).is_ok()
}

/// A normalized email a new user may have: one `@` between a non-empty local part and a
/// domain, no spaces or control characters, at most [`MAX_EMAIL_CHARS`] characters.
pub fn check_email(email: &str) -> Result<(), CoreError> {
    validate::non_blank("email", email, MAX_EMAIL_CHARS)?;
    let shaped = email.split_once('@').is_some_and(|(local, domain)| {
        !local.is_empty() && !domain.is_empty() && !domain.contains('@')
    }) && !email.chars().any(|c| c.is_whitespace() || c.is_control());
    if !shaped {
        return Err(CoreError::invalid("email is not an email address"));
    }
    Ok(())
}

/// A new password: [`MIN_PASSWORD_CHARS`] to [`MAX_PASSWORD_CHARS`] characters. Any
/// characters are allowed; the message never repeats the password.
pub fn check_password(password: &str) -> Result<(), CoreError> {
    let n = password.chars().count();
    if n < MIN_PASSWORD_CHARS {
        return Err(CoreError::invalid(format!(
            "the password must be at least {MIN_PASSWORD_CHARS} characters"
        )));
    }
    if n > MAX_PASSWORD_CHARS {
        return Err(CoreError::invalid(format!(
            "the password must be at most {MAX_PASSWORD_CHARS} characters"
        )));
    }
    Ok(())
}

/// The user, login and session use cases.
#[derive(Clone)]
pub struct Users {
    pub store: Arc<dyn UserStore>,
    pub passwords: Passwords,
    pub clock: Arc<dyn Clock>,
    /// How long a session lasts from its login.
    pub session_lifetime: TimeDelta,
}

impl Users {
    /// Creates a user (for `baton admin create-user`). A taken email is `AlreadyExists`.
    #[tracing::instrument(name = "users.create", skip_all)]
    pub async fn create_user(&self, email: &str, password: &str) -> Result<User, CoreError> {
        let email = normalize_email(email);
        check_email(&email)?;
        check_password(password)?;
        let hash = self.passwords.hash(password).await?;
        let user = User {
            id: Uuid::now_v7(),
            email,
            created_at: self.clock.now(),
        };
        match self.store.create_user(&user, &hash).await {
            Ok(()) => Ok(user),
            Err(crate::StoreError::Conflict { .. }) => Err(CoreError::AlreadyExists(
                "a user with this email exists already".into(),
            )),
            Err(e) => Err(e.into()),
        }
    }

    /// Checks the email and password and opens a session. Every failure is
    /// [`LoginError::InvalidCredentials`]; an unknown email costs a password verification
    /// all the same.
    #[tracing::instrument(name = "users.login", skip_all)]
    pub async fn login(&self, email: &str, password: &str) -> Result<LoggedIn, LoginError> {
        let email = normalize_email(email);
        // Input no account can have fails at once: how fast says nothing about accounts.
        if !plausible_email(&email) || password.chars().count() > MAX_PASSWORD_CHARS {
            return Err(LoginError::InvalidCredentials);
        }
        let found = self
            .store
            .find_user_by_email(&email)
            .await
            .map_err(CoreError::from)?;
        let hash = found.as_ref().map(|c| c.password_hash.as_str());
        let matches = self.passwords.verify(password, hash).await?;
        let Some(found) = found.filter(|_| matches) else {
            return Err(LoginError::InvalidCredentials);
        };
        let issued = keys::issue_session_token();
        let now = self.clock.now();
        let session = Session {
            id: Uuid::now_v7(),
            user: found.user.id,
            created_at: now,
            expires_at: now + self.session_lifetime,
            revoked_at: None,
        };
        self.store
            .create_session(&session, &issued.hash)
            .await
            .map_err(CoreError::from)?;
        tracing::info!(user_id = %found.user.id, session_id = %session.id, "logged in");
        Ok(LoggedIn {
            token: issued.token,
            expires_at: session.expires_at,
            user: found.user,
        })
    }

    /// The live session of a well-formed session token: read from the database on every
    /// request, so a logout or an expiry takes effect at once on every replica.
    pub async fn session(&self, token: &str) -> Result<Session, SessionError> {
        let session = self
            .store
            .lookup_session(&keys::hash_token(token))
            .await?
            .ok_or(SessionError::Unknown)?;
        if session.revoked_at.is_some() {
            return Err(SessionError::Revoked);
        }
        if session.expires_at <= self.clock.now() {
            return Err(SessionError::Expired);
        }
        Ok(session)
    }

    /// The principal of a session's user in `tenant` (the `Baton-Tenant` header), with its
    /// membership's role, calling from `source`. Without a tenant, the user's only tenant;
    /// a user of several must name one.
    pub async fn principal(
        &self,
        session: &Session,
        tenant: Option<TenantId>,
        source: Option<std::net::IpAddr>,
    ) -> Result<Principal, SessionError> {
        let (tenant, role) = match tenant {
            Some(tenant) => {
                let member = self
                    .store
                    .get_member(tenant, session.user)
                    .await?
                    .ok_or(SessionError::NotMember)?;
                (tenant, member.role)
            }
            None => {
                let mut all = self.store.memberships_of(session.user, 2).await?;
                match (all.pop(), all.is_empty()) {
                    (Some(only), true) => (only.tenant_id, only.role),
                    (Some(_), false) => return Err(SessionError::TenantNeeded),
                    (None, _) => return Err(SessionError::NoTenant),
                }
            }
        };
        Ok(Principal {
            tenant,
            role,
            actor: format!("user:{}", session.user),
            source,
        })
    }

    /// Ends the session (logout). Ending it again changes nothing.
    #[tracing::instrument(name = "users.logout", skip_all)]
    pub async fn logout(&self, session: &Session) -> Result<(), CoreError> {
        self.store
            .revoke_session(session.id, self.clock.now())
            .await?;
        tracing::info!(user_id = %session.user, session_id = %session.id, "logged out");
        Ok(())
    }

    /// The user, for `GET /v1/me`.
    pub async fn user(&self, id: Uuid) -> Result<User, CoreError> {
        self.store
            .get_user(id)
            .await?
            .ok_or(CoreError::NotFound("user"))
    }

    /// The user's tenants and roles, for `GET /v1/me`.
    pub async fn memberships(&self, user: Uuid) -> Result<Vec<TenantRole>, CoreError> {
        Ok(self
            .store
            .memberships_of(user, MAX_MEMBERSHIPS_SHOWN)
            .await?)
    }
}

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
        )
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

    /// Small parameters: these tests check behaviour, not cost.
    fn passwords() -> Passwords {
        Passwords::new(PasswordParams {
            memory_kib: 64,
            iterations: 1,
            parallelism: 1,
        })
        .expect("valid parameters")
    }

    #[tokio::test]
    async fn a_hash_verifies_its_password_only() {
        let p = passwords();
        let hash = p.hash("correct horse battery").await.expect("hash");
        assert!(hash.starts_with("$argon2id$v=19$m=64,t=1,p=1$"), "{hash}");
        assert!(!hash.contains("correct horse"));
        assert!(
            p.verify("correct horse battery", Some(&hash))
                .await
                .expect("verify")
        );
        assert!(
            !p.verify("correct horse batterY", Some(&hash))
                .await
                .expect("verify")
        );
        assert_ne!(
            hash,
            p.hash("correct horse battery").await.expect("hash"),
            "salted"
        );
    }

    #[tokio::test]
    async fn without_a_usable_hash_the_dummy_is_verified_and_nothing_matches() {
        let p = passwords();
        assert!(argon2::PasswordHash::new(&p.dummy).is_ok(), "{}", p.dummy);
        assert!(p.dummy.starts_with("$argon2id$v=19$m=64,t=1,p=1$"));
        for hash in [None, Some("not a hash"), Some("")] {
            assert!(!p.verify("anything at all", hash).await.expect("verify"));
        }
    }

    #[test]
    fn owasp_parameters_are_the_default_and_argon2_refuses_nonsense() {
        assert_eq!(PasswordParams::default(), PasswordParams::OWASP);
        assert!(PasswordParams::OWASP.argon2().is_ok());
        let bad = PasswordParams {
            memory_kib: 4,
            iterations: 1,
            parallelism: 1,
        };
        assert!(bad.argon2().is_err());
        assert!(Passwords::new(bad).is_err());
    }

    #[test]
    fn emails_are_normalized_and_checked() {
        assert_eq!(normalize_email("  Ada@Example.COM "), "ada@example.com");
        for ok in ["ada@example.com", "a+b@x"] {
            assert!(check_email(ok).is_ok(), "{ok}");
        }
        let long = format!("{}@example.com", "a".repeat(MAX_EMAIL_CHARS));
        for bad in [
            "",
            "ada",
            "@example.com",
            "ada@",
            "a@b@c",
            "a b@c",
            "a\0@b",
            &long,
        ] {
            assert!(check_email(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn passwords_have_bounds_and_errors_never_repeat_them() {
        let short = "s3cret";
        let err = check_password(short).expect_err("too short").to_string();
        assert!(err.contains("at least 12") && !err.contains(short), "{err}");
        assert!(check_password(&"x".repeat(MIN_PASSWORD_CHARS)).is_ok());
        assert!(check_password(&"x".repeat(MAX_PASSWORD_CHARS + 1)).is_err());
    }

    #[test]
    fn secrets_stay_out_of_debug_output() {
        let login = Login {
            email: "ada@example.com".into(),
            password: "hunter2hunter2".into(),
        };
        assert!(!format!("{login:?}").contains("hunter2"));
        let done = LoggedIn {
            token: keys::issue_session_token().token,
            expires_at: Utc::now(),
            user: User {
                id: Uuid::now_v7(),
                email: "ada@example.com".into(),
                created_at: Utc::now(),
            },
        };
        assert!(!format!("{done:?}").contains(&done.token));
    }

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
