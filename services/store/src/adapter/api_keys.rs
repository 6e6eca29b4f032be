//! `ApiKeyStore`: a tenant's API keys, on the `app` pool. A key's lookup by its hash is how
//! a request's tenant is found, so it is the one cross-tenant path here
//! (`Scope::CrossTenant`); everything else about a key (create, get, list, revoke,
//! recording its use) is filtered by its tenant and runs scoped to it.

use super::Result;
use crate::backend::Backend;
use crate::plan::micros;
use crate::pools::{PoolKind, Scope};
use crate::query::Query;
use crate::rows::api_keys::{ApiKeyRecordRow, api_key_columns, api_key_record_columns};
use crate::store::Store;
use async_trait::async_trait;
use baton_core::model::{ApiKey, ApiKeyRecord, AuditEntry};
use baton_core::ports::ApiKeyStore;
use baton_events::TenantId;
use chrono::{DateTime, Utc};
use uuid::Uuid;

/// The key whose token hashes to `$1`, in whichever tenant.
const API_KEY_BY_HASH: &str = concat!(
    "SELECT ",
    api_key_record_columns!(),
    " FROM api_keys WHERE token_hash = $1"
);

/// The `SELECT` of every column an [`ApiKeyRecordRow`] reads, from `api_keys`.
const SELECT_API_KEYS: &str = concat!("SELECT ", api_key_record_columns!(), " FROM api_keys");

#[async_trait]
impl<B: Backend> ApiKeyStore for Store<B> {
    /// A reused token hash is `Conflict { expected: 0, actual: 0 }`; an unknown tenant is
    /// `NotFound`.
    #[tracing::instrument(name = "store.create_api_key", skip_all)]
    async fn create_api_key(&self, key: &ApiKey, hash: &[u8], audit: &AuditEntry) -> Result<()> {
        self.insert_api_key(key, hash, None, audit).await
    }

    /// As [`create_api_key`](ApiKeyStore::create_api_key), recording the entry's actor as
    /// its creator.
    #[tracing::instrument(name = "store.create_api_key", skip_all)]
    async fn create_api_key_by(&self, key: &ApiKey, hash: &[u8], audit: &AuditEntry) -> Result<()> {
        self.insert_api_key(key, hash, Some(&audit.actor), audit)
            .await
    }

    async fn lookup_api_key(&self, hash: &[u8]) -> Result<Option<ApiKeyRecord>> {
        let q = Query::new(API_KEY_BY_HASH).bind(hash);
        self.read_optional::<ApiKeyRecordRow, _>(PoolKind::App, Scope::CrossTenant, q)
            .await
    }

    #[tracing::instrument(name = "store.get_api_key", skip_all)]
    async fn get_api_key(&self, tenant: TenantId, id: Uuid) -> Result<Option<ApiKeyRecord>> {
        self.one_by_id::<ApiKeyRecordRow, _>(tenant, SELECT_API_KEYS, id)
            .await
    }

    /// Ids are UUIDv7, so id order is creation order; both databases compare them
    /// byte-wise, as `api_keys_by_tenant` is sorted.
    #[tracing::instrument(name = "store.list_api_keys", skip_all)]
    async fn list_api_keys(
        &self,
        tenant: TenantId,
        before: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<ApiKeyRecord>> {
        self.newest_first::<ApiKeyRecordRow, _>(tenant, SELECT_API_KEYS, None, "", before, limit)
            .await
    }

    #[tracing::instrument(name = "store.revoke_api_key", skip_all)]
    async fn revoke_api_key(
        &self,
        tenant: TenantId,
        id: Uuid,
        at: DateTime<Utc>,
        audit: &AuditEntry,
    ) -> Result<bool> {
        let mut change = self.audited(tenant, audit).await?;
        let revoked = Query::new(
            "UPDATE api_keys SET revoked_at = $3 \
             WHERE tenant_id = $1 AND id = $2 AND revoked_at IS NULL",
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

    /// The condition makes the write happen once per interval however many replicas race.
    /// SQLite keeps timestamps as RFC 3339 text in UTC (`+00:00`, a four-digit year, 0, 3
    /// or 6 fraction digits), which sorts in time order, so `<` compares them correctly on
    /// both databases.
    async fn touch_api_key(
        &self,
        tenant: TenantId,
        id: Uuid,
        at: DateTime<Utc>,
        stale_before: DateTime<Utc>,
    ) -> Result<bool> {
        let q = Query::new(
            "UPDATE api_keys SET last_used_at = $3 \
             WHERE tenant_id = $1 AND id = $2 \
               AND (last_used_at IS NULL OR last_used_at < $4)",
        )
        .bind(tenant.as_uuid())
        .bind(id)
        .bind(micros(at))
        .bind(micros(stale_before));
        let touched = self
            .write_one(PoolKind::App, Scope::Tenant(tenant), q)
            .await?;
        Ok(touched > 0)
    }
}

impl<B: Backend> Store<B> {
    /// Stores the key with its creator (`None`: made outside the API), recorded by its
    /// audit entry. A reused id or hash is `Conflict`, an unknown tenant `NotFound`.
    async fn insert_api_key(
        &self,
        key: &ApiKey,
        hash: &[u8],
        created_by: Option<&str>,
        audit: &AuditEntry,
    ) -> Result<()> {
        let mut change = self.audited(key.tenant, audit).await?;
        Query::new(concat!(
            "INSERT INTO api_keys (",
            api_key_columns!(),
            ", token_hash, created_by) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
        ))
        .bind(key.id)
        .bind(key.tenant.as_uuid())
        .bind(&key.name)
        .bind(&key.prefix)
        .bind(key.role.as_str())
        .bind(micros(key.created_at))
        .bind(key.expires_at.map(micros))
        .bind(key.revoked_at.map(micros))
        .bind(hash)
        .bind(created_by)
        .execute(&mut change.tx)
        .await?;
        change.commit().await
    }
}
