//! API key use cases: admins create keys of a role no higher than their own, optionally
//! expiring; list them without their secrets; revoke them.
//!
//! A key's token is in the answer that creates it and nowhere else: only its SHA-256 is
//! stored ([`crate::crypto::tokens`]), and no type here prints it. Authentication (the
//! API's extractor) reads the key from the database on every request, so a revoked or
//! expired key fails at once on every replica. It also records when a key was last used,
//! at most once per [`crate::auth::LAST_USE_INTERVAL`] per key, so authentication does not
//! turn every read into a write.

use crate::auth::Announcer;
use crate::crypto::tokens;
use crate::error::CoreError;
use crate::model::ApiKey;
use crate::model::ApiKeyRecord;
use crate::model::{Action, Principal, Role};
use crate::model::{AuditAction, AuditEntry};
use crate::page::{self, Page};
use crate::ports::{ApiKeyStore, Clock, Control};
use crate::validate;
use chrono::{DateTime, Datelike, SubsecRound, Utc};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use uuid::Uuid;

/// Longest key name, in characters.
pub const MAX_KEY_NAME_CHARS: usize = 100;

/// A key as a client asks for it.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewApiKey {
    /// What the key is for (who or what holds it): 1 to 100 characters.
    pub name: String,
    /// The key's role: at most the creator's own.
    pub role: Role,
    /// When the key stops working (RFC 3339, in the future). Absent: it never expires.
    #[serde(default)]
    pub expires_at: Option<DateTime<Utc>>,
}

/// What may be shown of an API key: never its token or its hash.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct ApiKeyMeta {
    pub id: Uuid,
    pub name: String,
    pub role: Role,
    /// The first characters of the token (`bk_` and 8 hex digits), to recognise a key by;
    /// far too few to use it.
    pub prefix: String,
    pub created_at: DateTime<Utc>,
    /// Who created it: `key:<id>` (another key) or `local` (the embedded tier's local
    /// owner); null for a tenant's first owner key, made by `baton admin create-tenant`.
    pub created_by: Option<String>,
    /// When it last authenticated a request, to within a minute; null if it never did.
    pub last_used_at: Option<DateTime<Utc>>,
    /// When it stops working; null if never.
    pub expires_at: Option<DateTime<Utc>>,
    /// When it was revoked; null while it is not.
    pub revoked_at: Option<DateTime<Utc>>,
}

impl From<ApiKeyRecord> for ApiKeyMeta {
    fn from(r: ApiKeyRecord) -> Self {
        let ApiKeyRecord {
            key,
            created_by,
            last_used_at,
        } = r;
        ApiKeyMeta {
            id: key.id,
            name: key.name,
            role: key.role,
            prefix: tokens::shown_prefix(&key.prefix),
            created_at: key.created_at,
            created_by,
            last_used_at,
            expires_at: key.expires_at,
            revoked_at: key.revoked_at,
        }
    }
}

/// A key just created: its token, in this answer only, and its metadata.
#[derive(Serialize, utoipa::ToSchema)]
pub struct CreatedApiKey {
    /// The bearer token (`bk_` and 64 hex digits). Shown this once: only its hash is
    /// stored, so it cannot be shown again.
    pub token: String,
    pub key: ApiKeyMeta,
}

impl std::fmt::Debug for CreatedApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreatedApiKey")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

/// The API key use cases.
#[derive(Clone)]
pub struct ApiKeys {
    pub store: Arc<dyn ApiKeyStore>,
    pub clock: Arc<dyn Clock>,
    /// Tells the replicas a key was revoked, so the streams it opened end.
    pub announcer: Announcer,
}

impl ApiKeys {
    /// Creates a key in the caller's tenant (admin) of at most the caller's role.
    /// Returns its token, which is never available again.
    #[tracing::instrument(name = "api_keys.create", skip_all)]
    pub async fn create(&self, p: &Principal, new: NewApiKey) -> Result<CreatedApiKey, CoreError> {
        p.require(Action::ManageApiKeys)?;
        check_name(&new.name)?;
        let now = self.clock.now();
        let expires_at = check_expiry(new.expires_at, now)?;
        if !p.may_grant(new.role) {
            return Err(CoreError::Forbidden(create_above_own(new.role)));
        }
        let issued = tokens::issue_token();
        let key = ApiKey {
            id: Uuid::now_v7(),
            tenant: p.tenant,
            name: new.name,
            prefix: issued.prefix.clone(),
            role: new.role,
            created_at: now,
            expires_at,
            revoked_at: None,
        };
        let audit = AuditEntry::by(
            p,
            now,
            AuditAction::ApiKeyCreated,
            key.id.to_string(),
            serde_json::json!({
                "name": key.name,
                "prefix": tokens::shown_prefix(&key.prefix),
                "role": key.role,
                "expires_at": key.expires_at,
            }),
        );
        self.store
            .create_api_key_by(&key, &issued.hash, &audit)
            .await?;
        let record = ApiKeyRecord {
            key,
            created_by: Some(p.actor.clone()),
            last_used_at: None,
        };
        Ok(CreatedApiKey {
            token: issued.token,
            key: record.into(),
        })
    }

    /// The tenant's keys, newest first, revoked and expired ones included (admin).
    #[tracing::instrument(name = "api_keys.list", skip_all)]
    pub async fn list(
        &self,
        p: &Principal,
        cursor: Option<Uuid>,
        limit: Option<u32>,
    ) -> Result<Page<ApiKeyMeta>, CoreError> {
        p.require(Action::ManageApiKeys)?;
        let limit = page::limit(limit)?;
        let records = self.store.list_api_keys(p.tenant, cursor, limit).await?;
        let next_cursor = (records.len() == limit as usize)
            .then(|| records.last().map(|r| r.key.id.to_string()))
            .flatten();
        let items = records.into_iter().map(ApiKeyMeta::from).collect();
        Ok(Page { items, next_cursor })
    }

    /// Revokes one of the tenant's keys (admin; the caller's own key too). Idempotent: a
    /// key revoked already stays revoked as of its first revocation. Another tenant's key
    /// is `NotFound`, like one that does not exist; a key of a role above the caller's is
    /// `Forbidden`, as creating it would have been.
    #[tracing::instrument(name = "api_keys.revoke", skip_all)]
    pub async fn revoke(&self, p: &Principal, id: Uuid) -> Result<(), CoreError> {
        p.require(Action::ManageApiKeys)?;
        let record = self
            .store
            .get_api_key(p.tenant, id)
            .await?
            .ok_or(CoreError::NotFound("API key"))?;
        if !p.may_grant(record.key.role) {
            return Err(CoreError::Forbidden(revoke_above_own(record.key.role)));
        }
        let now = self.clock.now();
        let audit = AuditEntry::by(
            p,
            now,
            AuditAction::ApiKeyRevoked,
            id.to_string(),
            serde_json::json!({"name": record.key.name, "role": record.key.role}),
        );
        self.store.revoke_api_key(p.tenant, id, now, &audit).await?;
        // Also when it was revoked already: an announcement lost then is made good now.
        self.announcer.announce(Control::KeyRevoked { id }).await;
        Ok(())
    }
}

/// A key's name: shown in listings, so no control characters.
fn check_name(name: &str) -> Result<(), CoreError> {
    validate::non_blank("name", name, MAX_KEY_NAME_CHARS)?;
    if name.chars().any(char::is_control) {
        return Err(CoreError::invalid(
            "name must not contain control characters",
        ));
    }
    Ok(())
}

/// An expiry in the future, at the precision both databases keep (microseconds), so the
/// created key reads back exactly; a four-digit year keeps it comparable as text.
fn check_expiry(
    at: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Result<Option<DateTime<Utc>>, CoreError> {
    let Some(at) = at.map(|t| t.trunc_subsecs(6)) else {
        return Ok(None);
    };
    if at <= now {
        return Err(CoreError::invalid("expires_at must be in the future"));
    }
    if at.year() > 9999 {
        return Err(CoreError::invalid(
            "expires_at must be before the year 10000",
        ));
    }
    Ok(Some(at))
}

fn create_above_own(role: Role) -> &'static str {
    match role {
        Role::Owner => "create an owner key: a key's role may not be above its creator's",
        Role::Admin => "create an admin key: a key's role may not be above its creator's",
        Role::Member => "create a member key: a key's role may not be above its creator's",
        Role::Viewer => "create a viewer key: a key's role may not be above its creator's",
    }
}

fn revoke_above_own(role: Role) -> &'static str {
    match role {
        Role::Owner => "revoke an owner key: a key's role may not be above its revoker's",
        Role::Admin => "revoke an admin key: a key's role may not be above its revoker's",
        Role::Member => "revoke a member key: a key's role may not be above its revoker's",
        Role::Viewer => "revoke a viewer key: a key's role may not be above its revoker's",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StoreError;
    use async_trait::async_trait;
    use baton_events::TenantId;
    use chrono::TimeDelta;
    use std::sync::Mutex;

    /// An in-memory `ApiKeyStore`.
    #[derive(Default)]
    struct Memory {
        keys: Mutex<Vec<(ApiKeyRecord, Vec<u8>)>>,
    }

    impl Memory {
        fn keys(&self) -> std::sync::MutexGuard<'_, Vec<(ApiKeyRecord, Vec<u8>)>> {
            self.keys.lock().unwrap_or_else(|e| e.into_inner())
        }
    }

    #[async_trait]
    impl ApiKeyStore for Memory {
        async fn create_api_key(
            &self,
            key: &ApiKey,
            hash: &[u8],
            _: &AuditEntry,
        ) -> Result<(), StoreError> {
            let record = ApiKeyRecord {
                key: key.clone(),
                created_by: None,
                last_used_at: None,
            };
            self.keys().push((record, hash.to_vec()));
            Ok(())
        }

        async fn create_api_key_by(
            &self,
            key: &ApiKey,
            hash: &[u8],
            audit: &AuditEntry,
        ) -> Result<(), StoreError> {
            let record = ApiKeyRecord {
                key: key.clone(),
                created_by: Some(audit.actor.clone()),
                last_used_at: None,
            };
            self.keys().push((record, hash.to_vec()));
            Ok(())
        }

        async fn lookup_api_key(&self, hash: &[u8]) -> Result<Option<ApiKeyRecord>, StoreError> {
            Ok(self
                .keys()
                .iter()
                .find(|(_, h)| h == hash)
                .map(|(r, _)| r.clone()))
        }

        async fn get_api_key(
            &self,
            tenant: TenantId,
            id: Uuid,
        ) -> Result<Option<ApiKeyRecord>, StoreError> {
            Ok(self
                .keys()
                .iter()
                .find(|(r, _)| r.key.tenant == tenant && r.key.id == id)
                .map(|(r, _)| r.clone()))
        }

        async fn list_api_keys(
            &self,
            tenant: TenantId,
            before: Option<Uuid>,
            limit: u32,
        ) -> Result<Vec<ApiKeyRecord>, StoreError> {
            let mut rows: Vec<ApiKeyRecord> = self
                .keys()
                .iter()
                .map(|(r, _)| r.clone())
                .filter(|r| r.key.tenant == tenant && before.is_none_or(|b| r.key.id < b))
                .collect();
            rows.sort_by_key(|r| std::cmp::Reverse(r.key.id));
            rows.truncate(limit as usize);
            Ok(rows)
        }

        async fn revoke_api_key(
            &self,
            tenant: TenantId,
            id: Uuid,
            at: DateTime<Utc>,
            _: &AuditEntry,
        ) -> Result<bool, StoreError> {
            let mut keys = self.keys();
            let row = keys.iter_mut().find(|(r, _)| {
                r.key.tenant == tenant && r.key.id == id && r.key.revoked_at.is_none()
            });
            Ok(row.map(|(r, _)| r.key.revoked_at = Some(at)).is_some())
        }

        async fn touch_api_key(
            &self,
            tenant: TenantId,
            id: Uuid,
            at: DateTime<Utc>,
            stale_before: DateTime<Utc>,
        ) -> Result<bool, StoreError> {
            let mut keys = self.keys();
            let row = keys.iter_mut().find(|(r, _)| {
                r.key.tenant == tenant
                    && r.key.id == id
                    && r.last_used_at.is_none_or(|t| t < stale_before)
            });
            Ok(row.map(|(r, _)| r.last_used_at = Some(at)).is_some())
        }
    }

    /// A clock that stands still unless moved.
    struct Fixed(Mutex<DateTime<Utc>>);

    impl Clock for Fixed {
        fn now(&self) -> DateTime<Utc> {
            *self.0.lock().unwrap_or_else(|e| e.into_inner())
        }
    }

    fn now() -> DateTime<Utc> {
        crate::ports::SystemClock.now()
    }

    /// A bus nobody listens to: announcements go nowhere (the end-to-end tests follow
    /// them to the streams they end).
    struct Quiet;

    #[async_trait]
    impl crate::ports::EventBus for Quiet {
        async fn publish(&self, _: &[baton_events::Envelope]) {}
        async fn subscribe(
            &self,
            _: TenantId,
            _: baton_events::RunId,
        ) -> Result<crate::ports::Subscription, StoreError> {
            Err(StoreError::Unavailable("no event feeds here".into()))
        }
        async fn ping(&self) -> Result<(), StoreError> {
            Ok(())
        }
        fn publish_delta(
            &self,
            _: TenantId,
            _: baton_events::RunId,
            _: baton_events::MessageDelta,
        ) {
        }
        async fn publish_control(&self, _: &crate::ports::ControlMessage) {}
        async fn subscribe_control(
            &self,
        ) -> Result<tokio::sync::mpsc::Receiver<crate::ports::ControlMessage>, StoreError> {
            Err(StoreError::Unavailable("no control feed here".into()))
        }
    }

    fn api_keys(store: Arc<Memory>) -> ApiKeys {
        ApiKeys {
            store,
            clock: Arc::new(Fixed(Mutex::new(now()))),
            announcer: crate::auth::Announcer {
                bus: Arc::new(Quiet),
                replica: "test".into(),
            },
        }
    }

    fn principal(tenant: TenantId, role: Role) -> Principal {
        Principal {
            tenant,
            role,
            actor: format!("key:{}", Uuid::now_v7()),
            source: None,
        }
    }

    fn new_key(name: &str, role: Role) -> NewApiKey {
        NewApiKey {
            name: name.into(),
            role,
            expires_at: None,
        }
    }

    fn message(r: Result<impl std::fmt::Debug, CoreError>) -> String {
        match r {
            Ok(v) => panic!("expected an error, got {v:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[tokio::test]
    async fn a_created_key_shows_its_token_once_and_stores_only_its_hash() {
        let store = Arc::new(Memory::default());
        let k = api_keys(store.clone());
        let admin = principal(TenantId::new(), Role::Admin);
        let expires = now() + TimeDelta::days(30);
        let created = k
            .create(
                &admin,
                NewApiKey {
                    expires_at: Some(expires),
                    ..new_key("ci", Role::Member)
                },
            )
            .await
            .expect("create");
        assert!(tokens::is_well_formed(&created.token));
        assert!(created.token.starts_with(&created.key.prefix));
        assert_eq!(created.key.role, Role::Member);
        assert_eq!(created.key.name, "ci");
        assert_eq!(
            created.key.created_by.as_deref(),
            Some(admin.actor.as_str())
        );
        assert_eq!(created.key.expires_at, Some(expires.trunc_subsecs(6)));
        assert_eq!(created.key.last_used_at, None);
        assert!(!format!("{created:?}").contains(&created.token));

        let stored = store.keys()[0].clone();
        assert_eq!(stored.1, tokens::hash_token(&created.token));
        let listed = k.list(&admin, None, None).await.expect("list");
        assert_eq!(listed.items, vec![created.key.clone()]);
        let text = serde_json::to_string(&listed.items).expect("json");
        assert!(!text.contains(&created.token[3..]), "{text}");
    }

    #[tokio::test]
    async fn a_key_role_is_at_most_its_creators() {
        let k = api_keys(Arc::new(Memory::default()));
        let tenant = TenantId::new();
        let admin = principal(tenant, Role::Admin);
        let err = k.create(&admin, new_key("boss", Role::Owner)).await;
        assert!(matches!(err, Err(CoreError::Forbidden(_))), "{err:?}");
        assert!(message(err).contains("create an owner key"));
        for role in [Role::Viewer, Role::Member, Role::Admin] {
            k.create(&admin, new_key("ok", role))
                .await
                .expect("allowed");
        }
        let owner = principal(tenant, Role::Owner);
        k.create(&owner, new_key("boss", Role::Owner))
            .await
            .expect("an owner may");
        for role in [Role::Viewer, Role::Member] {
            let p = principal(tenant, role);
            let err = k.create(&p, new_key("x", Role::Viewer)).await;
            assert!(
                matches!(err, Err(CoreError::Forbidden("manage API keys"))),
                "{err:?}"
            );
            let err = k.list(&p, None, None).await;
            assert!(matches!(err, Err(CoreError::Forbidden(_))), "{err:?}");
            let err = k.revoke(&p, Uuid::now_v7()).await;
            assert!(matches!(err, Err(CoreError::Forbidden(_))), "{err:?}");
        }
    }

    #[tokio::test]
    async fn bad_names_and_expiries_are_refused_naming_the_field() {
        let k = api_keys(Arc::new(Memory::default()));
        let admin = principal(TenantId::new(), Role::Admin);
        let long = "n".repeat(MAX_KEY_NAME_CHARS + 1);
        for (name, says) in [
            ("", "name must not be empty"),
            ("  ", "name must not be empty"),
            (long.as_str(), "name is longer than 100 characters"),
            ("a\nb", "name must not contain control characters"),
            ("a\0b", "name must not contain NUL characters"),
        ] {
            let err = message(k.create(&admin, new_key(name, Role::Viewer)).await);
            assert_eq!(err, says, "{name:?}");
        }
        k.create(
            &admin,
            new_key(&"n".repeat(MAX_KEY_NAME_CHARS), Role::Viewer),
        )
        .await
        .expect("exactly at the limit");
        let clock_now = k.clock.now();
        for (at, says) in [
            (clock_now, "expires_at must be in the future"),
            (
                clock_now - TimeDelta::days(1),
                "expires_at must be in the future",
            ),
            (
                DateTime::<Utc>::MAX_UTC,
                "expires_at must be before the year 10000",
            ),
        ] {
            let new = NewApiKey {
                expires_at: Some(at),
                ..new_key("x", Role::Viewer)
            };
            assert_eq!(message(k.create(&admin, new).await), says);
        }
        assert!(k.list(&admin, None, Some(0)).await.is_err());
    }

    #[tokio::test]
    async fn revoking_is_scoped_idempotent_and_bounded_by_role() {
        let store = Arc::new(Memory::default());
        let k = api_keys(store.clone());
        let tenant = TenantId::new();
        let owner = principal(tenant, Role::Owner);
        let admin = principal(tenant, Role::Admin);
        let member = k
            .create(&admin, new_key("m", Role::Member))
            .await
            .expect("create");
        let boss = k
            .create(&owner, new_key("boss", Role::Owner))
            .await
            .expect("create");

        // Another tenant's admin, and an id that does not exist: not found.
        let stranger = principal(TenantId::new(), Role::Owner);
        let err = k.revoke(&stranger, member.key.id).await;
        assert!(
            matches!(err, Err(CoreError::NotFound("API key"))),
            "{err:?}"
        );
        let err = k.revoke(&admin, Uuid::now_v7()).await;
        assert!(matches!(err, Err(CoreError::NotFound(_))), "{err:?}");

        // An admin may not revoke an owner's key.
        let err = message(k.revoke(&admin, boss.key.id).await);
        assert!(err.contains("revoke an owner key"), "{err}");

        k.revoke(&admin, member.key.id).await.expect("revoke");
        let first = store.keys()[0].0.key.revoked_at;
        assert!(first.is_some());
        k.revoke(&admin, member.key.id).await.expect("again");
        assert_eq!(store.keys()[0].0.key.revoked_at, first, "first time stays");
        let listed = k.list(&owner, None, None).await.expect("list");
        assert_eq!(listed.items.len(), 2, "revoked keys stay listed");
        assert_eq!(store.keys()[1].0.key.revoked_at, None);
    }

    #[tokio::test]
    async fn list_pages_newest_first_within_the_tenant() {
        let k = api_keys(Arc::new(Memory::default()));
        let admin = principal(TenantId::new(), Role::Admin);
        let other = principal(TenantId::new(), Role::Admin);
        let mut ids = Vec::new();
        for name in ["a", "b", "c"] {
            ids.push(
                k.create(&admin, new_key(name, Role::Viewer))
                    .await
                    .expect("create")
                    .key
                    .id,
            );
        }
        k.create(&other, new_key("theirs", Role::Viewer))
            .await
            .expect("create");
        let first = k.list(&admin, None, Some(2)).await.expect("list");
        let names: Vec<_> = first.items.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["c", "b"]);
        assert_eq!(first.next_cursor, Some(ids[1].to_string()));
        let rest = k.list(&admin, Some(ids[1]), Some(2)).await.expect("list");
        assert_eq!(rest.items.len(), 1);
        assert_eq!(rest.items[0].name, "a");
        assert_eq!(rest.next_cursor, None);
    }
}
