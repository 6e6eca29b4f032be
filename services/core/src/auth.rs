//! Authentication: who presents which credentials, and the [`Principal`] they act as. A
//! bearer API key (`bk_…`), a login session token (`bs_…`, also kept in a browser's
//! cookie) or, in the embedded tier on loopback with auth off, no credentials at all (the
//! local owner of the default tenant). A stream ticket (`bt_…`,
//! [`crate::stream_tickets`]) acts as whichever of these asked for it: [`Authenticator::issuer`].
//!
//! A key or session is read from the database on every request, so a revoked or expired
//! one fails at once on every replica. The same read brings a key's last recorded use;
//! when that is over a minute old the use is recorded on a task of the [`Authenticator`]'s
//! tracker, off the request's path, at most one write per key at a time.
//!
//! A session acts in one of its user's tenants with the membership's role: the tenant the
//! request names, or the user's only tenant without one. Keys and the local owner act in
//! their own tenant; a request naming another is refused.

use crate::crypto::tokens;
use crate::error::{CoreError, StoreError};
use crate::model::{ApiKeyRecord, IssuedBy, Principal, Role, Session, TenantRole, User};
use crate::ports::{ApiKeyStore, Clock, Control, ControlMessage, EventBus, TenantStore, UserStore};
use baton_events::TenantId;
use chrono::{DateTime, TimeDelta, Utc};
use serde::Serialize;
use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use thiserror::Error;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

/// How precise a key's `last_used_at` is: a use is recorded only when the last recorded
/// one is older than this.
pub const LAST_USE_INTERVAL: TimeDelta = TimeDelta::seconds(60);

/// Uses recorded before this are stale at `now`: see [`use_worth_recording`].
pub fn stale_before(now: DateTime<Utc>) -> DateTime<Utc> {
    now - LAST_USE_INTERVAL
}

/// Whether a use at `now` of a key whose last recorded use is `last_used` should be
/// recorded: only when that one is more than [`LAST_USE_INTERVAL`] old, so a busy key costs
/// one write a minute, not one per request.
pub fn use_worth_recording(last_used: Option<DateTime<Utc>>, now: DateTime<Utc>) -> bool {
    last_used.is_none_or(|t| t < stale_before(now))
}

/// The most memberships [`Authenticator::whoami`] lists.
pub const MAX_MEMBERSHIPS_SHOWN: u32 = 1000;

/// Why credentials do not authenticate a request (in the tenant it names).
#[derive(Debug, Error)]
pub enum AuthError {
    #[error("missing credentials: send `Authorization: Bearer <api key or session token>`")]
    Missing,
    #[error("the API key is malformed")]
    MalformedKey,
    #[error("the session token is malformed")]
    MalformedSession,
    #[error("the API key is not valid")]
    UnknownKey,
    #[error("the API key has been revoked")]
    KeyRevoked,
    #[error("the API key has expired")]
    KeyExpired,
    #[error("the session token is not valid")]
    UnknownSession,
    #[error("the session has ended: log in again")]
    SessionRevoked,
    #[error("the session has expired: log in again")]
    SessionExpired,
    /// Unknown, used already, expired or another run's: one answer for all (redeeming
    /// is one atomic statement that cannot tell them apart).
    #[error(
        "the stream ticket is not valid: it is unknown, used already, expired, or another run's"
    )]
    UnknownTicket,
    /// Unknown email, wrong password, or input no account can have: one answer for all,
    /// so a failure tells nothing about which accounts exist.
    #[error("the email or password is not valid")]
    InvalidCredentials,
    /// Also for a tenant that does not exist: the two are not told apart.
    #[error("the user is not a member of the tenant named by the Baton-Tenant header")]
    NotMember,
    #[error("the user is not a member of any tenant")]
    NoTenant,
    #[error("the user is a member of several tenants: name one with the Baton-Tenant header")]
    TenantNeeded,
    #[error("the credentials do not grant access to the tenant named by the Baton-Tenant header")]
    OtherTenant,
    #[error(transparent)]
    Core(#[from] CoreError),
}

impl From<StoreError> for AuthError {
    fn from(e: StoreError) -> Self {
        AuthError::Core(e.into())
    }
}

/// 401 when the credentials are not (or no longer) good, 403 when they may not act in the
/// tenant, 400 when the tenant must be named.
impl From<AuthError> for CoreError {
    fn from(e: AuthError) -> Self {
        let detail = e.to_string();
        match e {
            AuthError::Missing
            | AuthError::MalformedKey
            | AuthError::MalformedSession
            | AuthError::UnknownKey
            | AuthError::KeyRevoked
            | AuthError::KeyExpired
            | AuthError::UnknownSession
            | AuthError::SessionRevoked
            | AuthError::SessionExpired
            | AuthError::UnknownTicket
            | AuthError::InvalidCredentials => CoreError::Unauthenticated(detail),
            AuthError::NotMember | AuthError::NoTenant | AuthError::OtherTenant => {
                CoreError::NoAccess(detail)
            }
            AuthError::TenantNeeded => CoreError::Invalid(detail),
            AuthError::Core(e) => e,
        }
    }
}

/// Tells every replica (this one too) that credentials ended or a member left, so the
/// event streams they opened end at once; a lost message is caught by the streams' own
/// periodic re-check ([`Authenticator::recheck`]).
#[derive(Clone)]
pub struct Announcer {
    pub bus: Arc<dyn EventBus>,
    /// This replica, as the sender.
    pub replica: String,
}

impl Announcer {
    pub async fn announce(&self, control: Control) {
        let msg = ControlMessage {
            from: self.replica.clone(),
            control,
        };
        self.bus.publish_control(&msg).await;
    }
}

/// Who presented which credentials, before a tenant is chosen.
#[derive(Debug, Clone)]
pub enum Identity {
    /// The embedded tier's local owner (no credentials, auth off).
    Local { tenant: TenantId },
    /// A valid API key.
    Key(ApiKeyRecord),
    /// A live login session.
    Session(Session),
}

impl Identity {
    /// Whether `control` ends what this identity opened in `tenant`.
    pub fn ended_by(&self, tenant: TenantId, control: &Control) -> bool {
        match (self, control) {
            (Identity::Key(record), Control::KeyRevoked { id }) => record.key.id == *id,
            (Identity::Session(s), Control::SessionEnded { id }) => s.id == *id,
            (Identity::Session(s), Control::MemberRemoved { tenant: t, user }) => {
                s.user == *user && tenant == *t
            }
            _ => false,
        }
    }

    /// What a stream ticket issued by this identity, which presented a token hashing to
    /// `token_hash`, records of it.
    pub fn issued_by(&self, token_hash: Option<&[u8]>) -> Result<IssuedBy, AuthError> {
        match (self, token_hash) {
            (Identity::Local { .. }, _) => Ok(IssuedBy::Local),
            (Identity::Key(_), Some(hash)) => Ok(IssuedBy::Key {
                token_hash: hash.to_vec(),
            }),
            (Identity::Session(_), Some(hash)) => Ok(IssuedBy::Session {
                token_hash: hash.to_vec(),
            }),
            (_, None) => Err(AuthError::Missing),
        }
    }

    /// When the credentials expire, if they do.
    pub fn expires_at(&self) -> Option<DateTime<Utc>> {
        match self {
            Identity::Local { .. } => None,
            Identity::Key(record) => record.key.expires_at,
            Identity::Session(s) => Some(s.expires_at),
        }
    }
}

/// Who the caller is and where it may act.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Me {
    /// How the caller is recorded: `user:<id>` (a session), `key:<id>` (an API key) or
    /// `local` (the embedded tier's local owner).
    pub actor: String,
    /// The session's user; null for an API key and the local owner.
    pub user: Option<User>,
    /// When the session ends; null for an API key and the local owner.
    pub session_expires_at: Option<DateTime<Utc>>,
    /// The tenants the caller may act in and its role in each: a user's memberships, or
    /// the one tenant of an API key.
    pub tenants: Vec<TenantRole>,
    /// For a session kept in a cookie: what to send as the `Baton-CSRF` header with
    /// every request that changes anything. Null otherwise.
    pub csrf_token: Option<String>,
}

impl std::fmt::Debug for Me {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Me")
            .field("actor", &self.actor)
            .field("user", &self.user)
            .field("session_expires_at", &self.session_expires_at)
            .field("tenants", &self.tenants)
            .finish_non_exhaustive()
    }
}

/// The authentication use cases: credentials to an [`Identity`], an identity to the
/// [`Principal`] acting in a tenant, and "who am I".
#[derive(Clone)]
pub struct Authenticator {
    keys: Arc<dyn ApiKeyStore>,
    tenants: Arc<dyn TenantStore>,
    users: Arc<dyn UserStore>,
    clock: Arc<dyn Clock>,
    /// Requests without credentials act as the owner of this tenant (embedded tier,
    /// loopback only); `None`: every request needs credentials.
    local: Option<TenantId>,
    /// Where last-use writes run; the server waits for them at shutdown.
    tasks: TaskTracker,
    /// Keys whose use a task is recording right now: a burst of requests with one key
    /// makes one write, not one each, while the first is under way.
    recording: Arc<Mutex<HashSet<Uuid>>>,
}

impl Authenticator {
    pub fn new(
        keys: Arc<dyn ApiKeyStore>,
        tenants: Arc<dyn TenantStore>,
        users: Arc<dyn UserStore>,
        clock: Arc<dyn Clock>,
        local: Option<TenantId>,
        tasks: TaskTracker,
    ) -> Self {
        Self {
            keys,
            tenants,
            users,
            clock,
            local,
            tasks,
            recording: Arc::default(),
        }
    }

    /// The tenant whose owner requests without credentials act as, when auth is off.
    pub fn local_owner(&self) -> Option<TenantId> {
        self.local
    }

    /// The identity of a request with this bearer token (`None`: no `Authorization`
    /// header).
    pub async fn identify(&self, bearer: Option<&str>) -> Result<Identity, AuthError> {
        let Some(token) = bearer else {
            return self
                .local
                .map(|tenant| Identity::Local { tenant })
                .ok_or(AuthError::Missing);
        };
        if token.starts_with(tokens::SESSION_PREFIX) {
            if !tokens::is_well_formed_session(token) {
                return Err(AuthError::MalformedSession);
            }
            return Ok(Identity::Session(self.session(token).await?));
        }
        if !tokens::is_well_formed(token) {
            return Err(AuthError::MalformedKey);
        }
        let record = self.key(&tokens::hash_token(token)).await?;
        self.record_use(&record, self.clock.now());
        Ok(Identity::Key(record))
    }

    /// The identity that issued a stream ticket, read again now, as its own requests are:
    /// a ticket of credentials revoked or expired since opens nothing. The local owner's
    /// ticket opens streams only while this server still runs without auth for `tenant`.
    pub async fn issuer(&self, by: &IssuedBy, tenant: TenantId) -> Result<Identity, AuthError> {
        match by {
            IssuedBy::Local if self.local == Some(tenant) => Ok(Identity::Local { tenant }),
            IssuedBy::Local => Err(AuthError::UnknownTicket),
            IssuedBy::Key { token_hash } => Ok(Identity::Key(self.key(token_hash).await?)),
            IssuedBy::Session { token_hash } => {
                Ok(Identity::Session(self.session_by_hash(token_hash).await?))
            }
        }
    }

    /// The live API key whose token hashes to `hash`.
    async fn key(&self, hash: &[u8]) -> Result<ApiKeyRecord, AuthError> {
        let record = self
            .keys
            .lookup_api_key(hash)
            .await?
            .ok_or(AuthError::UnknownKey)?;
        if record.key.revoked_at.is_some() {
            return Err(AuthError::KeyRevoked);
        }
        if record.key.expires_at.is_some_and(|t| t <= self.clock.now()) {
            return Err(AuthError::KeyExpired);
        }
        Ok(record)
    }

    /// The live session of a well-formed session token: read from the database on every
    /// request, so a logout or an expiry takes effect at once on every replica.
    async fn session(&self, token: &str) -> Result<Session, AuthError> {
        self.session_by_hash(&tokens::hash_token(token)).await
    }

    /// The live session whose token hashes to `hash`.
    async fn session_by_hash(&self, hash: &[u8]) -> Result<Session, AuthError> {
        let session = self
            .users
            .lookup_session(hash)
            .await?
            .ok_or(AuthError::UnknownSession)?;
        if session.revoked_at.is_some() {
            return Err(AuthError::SessionRevoked);
        }
        if session.expires_at <= self.clock.now() {
            return Err(AuthError::SessionExpired);
        }
        Ok(session)
    }

    /// The principal of `identity` acting in `requested` (the `Baton-Tenant` header), or
    /// in the identity's only tenant without one, calling from `source`. A session acts
    /// with its user's membership role there.
    pub async fn principal(
        &self,
        identity: &Identity,
        requested: Option<TenantId>,
        source: Option<IpAddr>,
    ) -> Result<Principal, AuthError> {
        let own = |tenant: TenantId, role: Role, actor: String| {
            if requested.is_some_and(|t| t != tenant) {
                return Err(AuthError::OtherTenant);
            }
            Ok(Principal {
                tenant,
                role,
                actor,
                source,
            })
        };
        let session = match identity {
            Identity::Local { tenant } => return own(*tenant, Role::Owner, "local".into()),
            Identity::Key(record) => {
                let key = &record.key;
                return own(key.tenant, key.role, format!("key:{}", key.id));
            }
            Identity::Session(session) => session,
        };
        let (tenant, role) = match requested {
            Some(tenant) => {
                let member = self
                    .users
                    .get_member(tenant, session.user)
                    .await?
                    .ok_or(AuthError::NotMember)?;
                (tenant, member.role)
            }
            None => {
                let mut all = self.users.memberships_of(session.user, 2).await?;
                match (all.pop(), all.is_empty()) {
                    (Some(only), true) => (only.tenant_id, only.role),
                    (Some(_), false) => return Err(AuthError::TenantNeeded),
                    (None, _) => return Err(AuthError::NoTenant),
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

    /// Whether the credentials whose token hashes to `token_hash` still authenticate
    /// `identity` in `tenant`, read again from the database: not revoked, not expired, and
    /// for a session still a member of the tenant. What a long-lived stream asks now and
    /// then, in case a revocation's announcement was lost.
    pub async fn recheck(
        &self,
        identity: &Identity,
        token_hash: Option<&[u8]>,
        tenant: TenantId,
    ) -> Result<(), AuthError> {
        match (identity, token_hash) {
            (Identity::Local { .. }, _) => Ok(()),
            (Identity::Key(_), Some(hash)) => self.key(hash).await.map(drop),
            (Identity::Session(session), Some(hash)) => {
                self.session_by_hash(hash).await?;
                self.users
                    .get_member(tenant, session.user)
                    .await?
                    .ok_or(AuthError::NotMember)?;
                Ok(())
            }
            (_, None) => Err(AuthError::Missing),
        }
    }

    /// Who `identity` is: its user and session (for a session) and the tenants it may act
    /// in with its role in each. A session needs no tenant named here.
    pub async fn whoami(&self, identity: &Identity) -> Result<Me, CoreError> {
        if let Identity::Session(session) = identity {
            let user = self
                .users
                .get_user(session.user)
                .await?
                .ok_or(CoreError::NotFound("user"))?;
            return Ok(Me {
                actor: format!("user:{}", session.user),
                user: Some(user),
                session_expires_at: Some(session.expires_at),
                tenants: self
                    .users
                    .memberships_of(session.user, MAX_MEMBERSHIPS_SHOWN)
                    .await?,
                csrf_token: None,
            });
        }
        let p = self.principal(identity, None, None).await?;
        let tenant = self
            .tenants
            .get_tenant(p.tenant)
            .await?
            .ok_or(CoreError::NotFound("tenant"))?;
        Ok(Me {
            actor: p.actor,
            user: None,
            session_expires_at: None,
            tenants: vec![TenantRole {
                tenant_id: tenant.id,
                name: tenant.name,
                role: p.role,
            }],
            csrf_token: None,
        })
    }

    /// Records the key's use at `now` if its last recorded one is stale, on a task of its
    /// own: the request neither waits for the write nor fails with it. The store's write
    /// is conditional too, so replicas racing over the same key write once.
    fn record_use(&self, record: &ApiKeyRecord, now: DateTime<Utc>) {
        if !use_worth_recording(record.last_used_at, now) {
            return;
        }
        let (tenant, id) = (record.key.tenant, record.key.id);
        if !self.in_flight().insert(id) {
            return;
        }
        let guard = Recording {
            set: self.recording.clone(),
            id,
        };
        let keys = self.keys.clone();
        self.tasks.spawn(async move {
            let _guard = guard;
            let stale_before = stale_before(now);
            if let Err(e) = keys.touch_api_key(tenant, id, now, stale_before).await {
                // Only the last-use time is lost; the next request tries again.
                tracing::warn!(key_id = %id, error = %e, "recording an API key's use failed");
            }
        });
    }

    fn in_flight(&self) -> MutexGuard<'_, HashSet<Uuid>> {
        // The set stays consistent whatever panicked while holding the lock.
        self.recording.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Takes a key out of the in-flight set when its task ends, or is dropped unrun.
struct Recording {
    set: Arc<Mutex<HashSet<Uuid>>>,
    id: Uuid,
}

impl Drop for Recording {
    fn drop(&mut self) {
        self.set
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_use_is_worth_recording_once_a_minute() {
        let t = crate::ports::SystemClock.now();
        assert!(use_worth_recording(None, t));
        assert!(!use_worth_recording(Some(t), t));
        assert!(!use_worth_recording(Some(t - TimeDelta::seconds(59)), t));
        assert!(!use_worth_recording(Some(t - LAST_USE_INTERVAL), t));
        assert!(use_worth_recording(
            Some(t - LAST_USE_INTERVAL - TimeDelta::microseconds(1)),
            t
        ));
        assert!(!use_worth_recording(Some(t + TimeDelta::seconds(5)), t));
    }
}
