//! Tenant secrets (model API keys, tool headers): stored sealed under the keyring,
//! write-only for clients, read in the clear by the engine alone.
//!
//! Clients put, list and delete secrets; nothing they can call returns a value. The engine
//! reads values through [`SecretReader`], which [`Secrets`] implements: it opens the stored
//! envelope with associated data binding the tenant and the name, so a ciphertext copied to
//! another name or tenant does not open. No message here carries a value.

use crate::crypto::{Aad, CryptoError, Keyring};
use crate::error::{CoreError, StoreError};
use crate::model::SecretMeta;
use crate::model::{Action, Principal};
use crate::model::{AuditAction, AuditEntry};
use crate::page::{self, Page};
use crate::ports::{Clock, SecretReader, SecretStore};
use crate::tools::check_name;
use async_trait::async_trait;
use baton_events::TenantId;
use std::sync::Arc;

/// Largest secret value, in bytes.
pub const MAX_SECRET_VALUE_BYTES: usize = 64 * 1024;

/// The secrets use cases, and the engine's [`SecretReader`].
#[derive(Clone)]
pub struct Secrets {
    pub store: Arc<dyn SecretStore>,
    pub keyring: Arc<Keyring>,
    pub clock: Arc<dyn Clock>,
}

impl Secrets {
    /// Stores `value` under `name` (admin), sealed under the active key, replacing the
    /// value of an existing secret of that name. Returns the metadata, never the value.
    #[tracing::instrument(name = "secrets.put", skip_all)]
    pub async fn put(
        &self,
        p: &Principal,
        name: &str,
        value: &str,
    ) -> Result<SecretMeta, CoreError> {
        p.require(Action::ManageSecrets)?;
        check_name("name", name)?;
        check_value(value)?;
        let sealed = self
            .keyring
            .seal(&Aad::secret(p.tenant, name), value.as_bytes())
            .map_err(|e| CoreError::Internal(format!("sealing secret {name:?} failed: {e}")))?;
        let now = self.clock.now();
        // The key id only: what the value is sealed under, never the value.
        let audit = AuditEntry::by(
            p,
            now,
            AuditAction::SecretPut,
            name,
            serde_json::json!({"key_id": sealed.key_id}),
        );
        Ok(self
            .store
            .put_secret(p.tenant, name, &sealed, now, &audit)
            .await?)
    }

    /// The tenant's secrets in name order (admin): metadata only.
    #[tracing::instrument(name = "secrets.list", skip_all)]
    pub async fn list(
        &self,
        p: &Principal,
        cursor: Option<String>,
        limit: Option<u32>,
    ) -> Result<Page<SecretMeta>, CoreError> {
        p.require(Action::ManageSecrets)?;
        let limit = page::limit(limit)?;
        if let Some(cursor) = &cursor {
            check_name("cursor", cursor)?;
        }
        let items = self
            .store
            .list_secrets(p.tenant, cursor.as_deref(), limit)
            .await?;
        Ok(Page::of(items, limit, |s| s.name.clone()))
    }

    /// Deletes the secret (admin); `NotFound` when the tenant has none of that name.
    #[tracing::instrument(name = "secrets.delete", skip_all)]
    pub async fn delete(&self, p: &Principal, name: &str) -> Result<(), CoreError> {
        p.require(Action::ManageSecrets)?;
        check_name("name", name)?;
        let audit = AuditEntry::by(
            p,
            self.clock.now(),
            AuditAction::SecretDeleted,
            name,
            serde_json::json!({}),
        );
        if self.store.delete_secret(p.tenant, name, &audit).await? {
            Ok(())
        } else {
            Err(CoreError::NotFound("secret"))
        }
    }
}

#[async_trait]
impl SecretReader for Secrets {
    /// Opens the stored value. A secret that exists but does not open (its key left the
    /// keyring, the ciphertext was altered or moved) is `Unreadable`, naming the secret and
    /// its key id.
    async fn reveal(&self, tenant: TenantId, name: &str) -> Result<Option<String>, StoreError> {
        let Some(stored) = self.store.get_secret(tenant, name).await? else {
            return Ok(None);
        };
        let key_id = &stored.meta.key_id;
        let plaintext = self
            .keyring
            .open(&Aad::secret(tenant, name), &stored.ciphertext)
            .map_err(|e| unreadable(name, key_id, &e))?;
        // The error would carry the bytes: drop it, say only what went wrong.
        String::from_utf8(plaintext).map(Some).map_err(|_| {
            StoreError::Unreadable(format!(
                "secret {name:?} (key {key_id:?}) does not decrypt to UTF-8 text"
            ))
        })
    }
}

/// The value of a secret: not empty, at most [`MAX_SECRET_VALUE_BYTES`], no NUL. Messages
/// never quote it.
fn check_value(value: &str) -> Result<(), CoreError> {
    if value.is_empty() {
        return Err(CoreError::invalid("value must not be empty"));
    }
    if value.len() > MAX_SECRET_VALUE_BYTES {
        return Err(CoreError::invalid(format!(
            "value is larger than {MAX_SECRET_VALUE_BYTES} bytes"
        )));
    }
    if value.contains('\0') {
        return Err(CoreError::invalid("value must not contain NUL characters"));
    }
    Ok(())
}

fn unreadable(name: &str, key_id: &str, e: &CryptoError) -> StoreError {
    StoreError::Unreadable(match e {
        CryptoError::UnknownKey(id) => {
            format!("secret {name:?} is sealed under key {id:?}, which is not in the keyring")
        }
        CryptoError::Decrypt => format!(
            "secret {name:?} does not decrypt under key {key_id:?} (wrong key, or the \
             ciphertext was altered or moved from another secret)"
        ),
        CryptoError::Malformed => format!("secret {name:?} (key {key_id:?}) is malformed"),
        other => format!("secret {name:?} (key {key_id:?}): {other}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::Sealed;
    use crate::model::Role;
    use crate::ports::{SealedSecret, SystemClock};
    use chrono::{DateTime, Utc};
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    /// An in-memory `SecretStore`.
    #[derive(Default)]
    struct Memory {
        rows: Mutex<BTreeMap<(TenantId, String), SealedSecret>>,
    }

    impl Memory {
        fn rows(&self) -> std::sync::MutexGuard<'_, BTreeMap<(TenantId, String), SealedSecret>> {
            self.rows.lock().unwrap_or_else(|e| e.into_inner())
        }
    }

    #[async_trait]
    impl SecretStore for Memory {
        async fn put_secret(
            &self,
            tenant: TenantId,
            name: &str,
            sealed: &Sealed,
            at: DateTime<Utc>,
            _: &AuditEntry,
        ) -> Result<SecretMeta, StoreError> {
            let mut rows = self.rows();
            let created_at = rows
                .get(&(tenant, name.to_string()))
                .map_or(at, |r| r.meta.created_at);
            let meta = SecretMeta {
                name: name.into(),
                key_id: sealed.key_id.clone(),
                created_at,
                updated_at: at,
            };
            rows.insert(
                (tenant, name.to_string()),
                SealedSecret {
                    meta: meta.clone(),
                    ciphertext: sealed.bytes.clone(),
                },
            );
            Ok(meta)
        }

        async fn get_secret(
            &self,
            tenant: TenantId,
            name: &str,
        ) -> Result<Option<SealedSecret>, StoreError> {
            Ok(self.rows().get(&(tenant, name.to_string())).cloned())
        }

        async fn list_secrets(
            &self,
            tenant: TenantId,
            after: Option<&str>,
            limit: u32,
        ) -> Result<Vec<SecretMeta>, StoreError> {
            Ok(self
                .rows()
                .iter()
                .filter(|((t, n), _)| *t == tenant && after.is_none_or(|a| n.as_str() > a))
                .map(|(_, r)| r.meta.clone())
                .take(limit as usize)
                .collect())
        }

        async fn delete_secret(
            &self,
            tenant: TenantId,
            name: &str,
            _: &AuditEntry,
        ) -> Result<bool, StoreError> {
            Ok(self.rows().remove(&(tenant, name.to_string())).is_some())
        }
    }

    fn secrets(store: Arc<Memory>, keyring: Keyring) -> Secrets {
        Secrets {
            store,
            keyring: Arc::new(keyring),
            clock: Arc::new(SystemClock),
        }
    }

    fn principal(tenant: TenantId, role: Role) -> Principal {
        Principal {
            tenant,
            role,
            actor: "test".into(),
            source: None,
        }
    }

    fn message(r: Result<impl std::fmt::Debug, CoreError>) -> String {
        match r {
            Ok(v) => panic!("expected an error, got {v:?}"),
            Err(e) => e.to_string(),
        }
    }

    const VALUE: &str = "sk-live-do-not-leak";

    #[tokio::test]
    async fn a_stored_secret_reveals_its_value_and_lists_without_it() {
        let store = Arc::new(Memory::default());
        let s = secrets(store.clone(), Keyring::ephemeral());
        let admin = principal(TenantId::new(), Role::Admin);
        let meta = s.put(&admin, "openai_key", VALUE).await.expect("put");
        assert_eq!(meta.name, "openai_key");
        assert_eq!(meta.key_id, crate::crypto::EPHEMERAL_KEY_ID);

        let stored = store.rows().values().next().cloned().expect("row");
        let hay = String::from_utf8_lossy(&stored.ciphertext).into_owned();
        assert!(!hay.contains(VALUE), "the store holds ciphertext only");
        assert_eq!(
            s.reveal(admin.tenant, "openai_key").await.expect("reveal"),
            Some(VALUE.to_string())
        );
        assert_eq!(s.reveal(admin.tenant, "other").await.expect("reveal"), None);

        let page = s.list(&admin, None, None).await.expect("list");
        assert_eq!(page.items, vec![meta.clone()]);
        assert!(!format!("{page:?}").contains(VALUE));

        let again = s.put(&admin, "openai_key", "rotated").await.expect("put");
        assert_eq!(again.created_at, meta.created_at);
        assert_eq!(
            s.reveal(admin.tenant, "openai_key").await.expect("reveal"),
            Some("rotated".to_string())
        );
        s.delete(&admin, "openai_key").await.expect("delete");
        let gone = s.delete(&admin, "openai_key").await;
        assert!(
            matches!(gone, Err(CoreError::NotFound("secret"))),
            "{gone:?}"
        );
    }

    #[tokio::test]
    async fn bad_names_and_values_are_refused_naming_the_field_never_the_value() {
        let s = secrets(Arc::new(Memory::default()), Keyring::ephemeral());
        let admin = principal(TenantId::new(), Role::Owner);
        for name in ["", "has space", "dot.ted", &"x".repeat(65)] {
            let err = message(s.put(&admin, name, VALUE).await);
            assert!(err.starts_with("name must be"), "{name:?}: {err}");
        }
        let err = message(s.put(&admin, "k", "").await);
        assert_eq!(err, "value must not be empty");
        let big = "v".repeat(MAX_SECRET_VALUE_BYTES + 1);
        let err = message(s.put(&admin, "k", &big).await);
        assert_eq!(err, "value is larger than 65536 bytes");
        let err = message(s.put(&admin, "k", "sk-\0-nul").await);
        assert_eq!(err, "value must not contain NUL characters");
        assert!(!err.contains("sk-"));
        s.put(&admin, "k", &"v".repeat(MAX_SECRET_VALUE_BYTES))
            .await
            .expect("exactly at the limit");
        let err = message(s.delete(&admin, "no/slash").await);
        assert!(err.starts_with("name must be"), "{err}");
        let err = message(s.list(&admin, Some("bad cursor".into()), None).await);
        assert!(err.starts_with("cursor must be"), "{err}");
    }

    #[tokio::test]
    async fn only_admins_and_owners_manage_secrets() {
        let s = secrets(Arc::new(Memory::default()), Keyring::ephemeral());
        let tenant = TenantId::new();
        for role in [Role::Viewer, Role::Member] {
            let p = principal(tenant, role);
            let put = s.put(&p, "k", VALUE).await;
            assert!(matches!(put, Err(CoreError::Forbidden(_))), "{put:?}");
            let list = s.list(&p, None, None).await;
            assert!(matches!(list, Err(CoreError::Forbidden(_))), "{list:?}");
            let delete = s.delete(&p, "k").await;
            assert!(matches!(delete, Err(CoreError::Forbidden(_))), "{delete:?}");
        }
        for role in [Role::Admin, Role::Owner] {
            s.put(&principal(tenant, role), "k", VALUE)
                .await
                .expect("allowed");
        }
    }

    #[tokio::test]
    async fn list_pages_in_name_order_with_a_cursor() {
        let s = secrets(Arc::new(Memory::default()), Keyring::ephemeral());
        let admin = principal(TenantId::new(), Role::Admin);
        for name in ["c", "a", "b"] {
            s.put(&admin, name, VALUE).await.expect("put");
        }
        let first = s.list(&admin, None, Some(2)).await.expect("list");
        let names: Vec<_> = first.items.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(first.next_cursor.as_deref(), Some("b"));
        let rest = s
            .list(&admin, first.next_cursor, Some(2))
            .await
            .expect("list");
        assert_eq!(rest.items.len(), 1);
        assert_eq!(rest.next_cursor, None);
    }

    #[tokio::test]
    async fn a_moved_tampered_or_orphaned_ciphertext_is_an_error_naming_secret_and_key() {
        let store = Arc::new(Memory::default());
        let old =
            Keyring::from_config(&[("old-key".into(), base64_key(1))], "old-key").expect("ring");
        let s = secrets(store.clone(), old);
        let admin = principal(TenantId::new(), Role::Admin);
        s.put(&admin, "token", VALUE).await.expect("put");
        let row = store.rows().values().next().cloned().expect("row");

        // Copied to another name, then to another tenant: the associated data differs.
        let other = TenantId::new();
        for (tenant, name) in [(admin.tenant, "copy"), (other, "token")] {
            store.rows().insert((tenant, name.to_string()), row.clone());
            let err = s.reveal(tenant, name).await.expect_err("must not open");
            let text = err.to_string();
            assert!(matches!(err, StoreError::Unreadable(_)), "{err:?}");
            assert!(
                text.contains(&format!("{name:?}")) && text.contains("old-key"),
                "{text}"
            );
            assert!(!text.contains(VALUE));
        }

        // Tampered with in place.
        let mut tampered = row.clone();
        if let Some(last) = tampered.ciphertext.last_mut() {
            *last ^= 1;
        }
        store
            .rows()
            .insert((admin.tenant, "token".into()), tampered);
        let err = s.reveal(admin.tenant, "token").await.expect_err("tampered");
        assert!(matches!(err, StoreError::Unreadable(_)), "{err:?}");

        // Its key left the keyring.
        store.rows().insert((admin.tenant, "token".into()), row);
        let rotated = secrets(
            store.clone(),
            Keyring::from_config(&[("new-key".into(), base64_key(2))], "new-key").expect("ring"),
        );
        let err = rotated
            .reveal(admin.tenant, "token")
            .await
            .expect_err("key gone");
        let text = err.to_string();
        assert!(
            text.contains("\"token\"") && text.contains("\"old-key\""),
            "{text}"
        );
        assert!(text.contains("not in the keyring"), "{text}");
    }

    fn base64_key(fill: u8) -> String {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode([fill; crate::crypto::KEY_LEN])
    }
}
