//! Tenant secrets: sealed at rest, revealed only to the engine.

use crate::crypto::Sealed;
use crate::error::StoreError;
use crate::model::{AuditEntry, SecretMeta};
use async_trait::async_trait;
use baton_events::TenantId;
use chrono::{DateTime, Utc};

/// Tenant secrets in the clear, for the engine alone (model API keys, tool headers).
/// Whatever implements it never logs what it reveals.
#[async_trait]
pub trait SecretReader: Send + Sync {
    /// `Ok(None)` when the tenant has no secret of that name; an error when it exists
    /// but cannot be read (its key is gone, the ciphertext was tampered with).
    async fn reveal(&self, tenant: TenantId, name: &str) -> Result<Option<String>, StoreError>;
}

/// A tenant secret as stored: its metadata and the sealed envelope of its value
/// ([`crate::crypto::Keyring::seal`], bound to [`crate::crypto::Aad::secret`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedSecret {
    pub meta: SecretMeta,
    pub ciphertext: Vec<u8>,
}

/// Tenant secrets, sealed: the store never sees a value in the clear. Names are unique
/// within a tenant.
#[async_trait]
pub trait SecretStore: Send + Sync {
    /// Stores `sealed` under `name`, replacing the value of an existing secret of that name
    /// (which keeps its `created_at`; `updated_at` becomes `at`). Returns the metadata as
    /// stored. An unknown tenant is `NotFound`.
    async fn put_secret(
        &self,
        tenant: TenantId,
        name: &str,
        sealed: &Sealed,
        at: DateTime<Utc>,
        audit: &AuditEntry,
    ) -> Result<SecretMeta, StoreError>;

    async fn get_secret(
        &self,
        tenant: TenantId,
        name: &str,
    ) -> Result<Option<SealedSecret>, StoreError>;

    /// Metadata of the tenant's secrets in name order (byte-wise), after `after` when
    /// given, at most `limit`.
    async fn list_secrets(
        &self,
        tenant: TenantId,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<SecretMeta>, StoreError>;

    /// Deletes the secret; returns whether it existed (the entry is written only then).
    async fn delete_secret(
        &self,
        tenant: TenantId,
        name: &str,
        audit: &AuditEntry,
    ) -> Result<bool, StoreError>;
}
