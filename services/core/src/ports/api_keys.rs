//! API keys of tenants.

use crate::error::StoreError;
use crate::model::{ApiKey, ApiKeyRecord, AuditEntry};
use async_trait::async_trait;
use baton_events::TenantId;
use chrono::{DateTime, Utc};

/// API keys: stored by the hash of their token, scoped to a tenant, never shown again.
#[async_trait]
pub trait ApiKeyStore: Send + Sync {
    /// Stores a key nobody in the tenant created (`created_by` stays empty): the owner key
    /// that bootstraps a tenant, audited as the operator's.
    async fn create_api_key(
        &self,
        key: &ApiKey,
        hash: &[u8],
        audit: &AuditEntry,
    ) -> Result<(), StoreError>;
    /// Stores a key created through the API by the entry's actor (its `created_by`). A
    /// reused id or hash is `Conflict`, an unknown tenant `NotFound`.
    async fn create_api_key_by(
        &self,
        key: &ApiKey,
        hash: &[u8],
        audit: &AuditEntry,
    ) -> Result<(), StoreError>;
    /// The key whose token hashes to `hash`, whatever its state, with its bookkeeping
    /// (creator, last use) in the same single read: what authentication needs to decide
    /// whether to record a use. Callers check expiry and revocation.
    async fn lookup_api_key(&self, hash: &[u8]) -> Result<Option<ApiKeyRecord>, StoreError>;
    /// One of the tenant's keys, whatever its state; another tenant's is `None`.
    async fn get_api_key(
        &self,
        tenant: TenantId,
        id: uuid::Uuid,
    ) -> Result<Option<ApiKeyRecord>, StoreError>;
    /// The tenant's keys (revoked and expired ones too), newest first, older than
    /// `before` when given, at most `limit`.
    async fn list_api_keys(
        &self,
        tenant: TenantId,
        before: Option<uuid::Uuid>,
        limit: u32,
    ) -> Result<Vec<ApiKeyRecord>, StoreError>;
    /// Marks the tenant's key revoked at `at`, unless it already is (its first revocation
    /// time stays). Returns whether this call revoked it; another tenant's key is never
    /// touched. Authentication reads the key on every request, so it fails at once.
    async fn revoke_api_key(
        &self,
        tenant: TenantId,
        id: uuid::Uuid,
        at: DateTime<Utc>,
        audit: &AuditEntry,
    ) -> Result<bool, StoreError>;
    /// Records a use of the key at `at`, only if its last recorded use is older than
    /// `stale_before` (or there is none): one conditional write, so replicas racing to
    /// record the same minute write once. Returns whether it wrote.
    async fn touch_api_key(
        &self,
        tenant: TenantId,
        id: uuid::Uuid,
        at: DateTime<Utc>,
        stale_before: DateTime<Utc>,
    ) -> Result<bool, StoreError>;
}
