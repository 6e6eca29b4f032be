//! `ApiKeyStore`: a tenant's API keys, on the `app` pool. A key's lookup by its hash is how
//! a request's tenant is found, so it is the one cross-tenant path here
//! (`Scope::CrossTenant`); everything else about a key (create, get, list, revoke,
//! recording its use) is filtered by its tenant and runs scoped to it.

use super::audit::write_audit;
use super::reads::commit;
use crate::backend::Backend;
use crate::plan::micros;
use crate::pools::{PoolKind, Scope};
use crate::query::Query;
use crate::rows::api_keys::{ApiKeyRecordRow, api_key_columns, api_key_record_columns};
use crate::store::Store;
use async_trait::async_trait;
use baton_core::StoreError;
use baton_core::model::{ApiKey, ApiKeyRecord, AuditEntry};
use baton_core::ports::ApiKeyStore;
use baton_events::TenantId;
use chrono::{DateTime, Utc};
use uuid::Uuid;

#[async_trait]
impl<B: Backend> ApiKeyStore for Store<B> {
    /// A reused token hash is `Conflict { expected: 0, actual: 0 }`; an unknown tenant is
    /// `NotFound`.
    #[tracing::instrument(name = "store.create_api_key", skip_all)]
    async fn create_api_key(
        &self,
        key: &ApiKey,
        hash: &[u8],
        audit: &AuditEntry,
    ) -> Result<(), StoreError> {
        self.insert_api_key(key, hash, None, audit).await
    }

    /// As [`create_api_key`](ApiKeyStore::create_api_key), recording the entry's actor as
    /// its creator.
    #[tracing::instrument(name = "store.create_api_key", skip_all)]
    async fn create_api_key_by(
        &self,
        key: &ApiKey,
        hash: &[u8],
        audit: &AuditEntry,
    ) -> Result<(), StoreError> {
        self.insert_api_key(key, hash, Some(&audit.actor), audit)
            .await
    }

    async fn lookup_api_key(&self, hash: &[u8]) -> Result<Option<ApiKeyRecord>, StoreError> {
        let q = Query::new(concat!(
            "SELECT ",
            api_key_record_columns!(),
            " FROM api_keys WHERE token_hash = $1"
        ))
        .bind(hash);
        let row: Option<ApiKeyRecordRow> = self
            .read_optional(PoolKind::App, Scope::CrossTenant, q)
            .await?;
        row.map(ApiKeyRecord::try_from).transpose()
    }

    #[tracing::instrument(name = "store.get_api_key", skip_all)]
    async fn get_api_key(
        &self,
        tenant: TenantId,
        id: Uuid,
    ) -> Result<Option<ApiKeyRecord>, StoreError> {
        self.one_by_id::<ApiKeyRecordRow, _>(
            tenant,
            concat!("SELECT ", api_key_record_columns!(), " FROM api_keys"),
            id,
        )
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
    ) -> Result<Vec<ApiKeyRecord>, StoreError> {
        self.newest_first::<ApiKeyRecordRow, _>(
            tenant,
            concat!("SELECT ", api_key_record_columns!(), " FROM api_keys"),
            None,
            before,
            limit,
        )
        .await
    }

    #[tracing::instrument(name = "store.revoke_api_key", skip_all)]
    async fn revoke_api_key(
        &self,
        tenant: TenantId,
        id: Uuid,
        at: DateTime<Utc>,
        audit: &AuditEntry,
    ) -> Result<bool, StoreError> {
        let mut tx = self
            .pools
            .write(PoolKind::App, Scope::Tenant(tenant))
            .await?;
        let revoked = Query::new(
            "UPDATE api_keys SET revoked_at = $3 \
             WHERE tenant_id = $1 AND id = $2 AND revoked_at IS NULL",
        )
        .bind(tenant.as_uuid())
        .bind(id)
        .bind(micros(at))
        .execute(&mut tx)
        .await?
            > 0;
        if revoked {
            write_audit(&mut tx, tenant, audit).await?;
        }
        commit(tx).await?;
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
    ) -> Result<bool, StoreError> {
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
    /// Stores the key with its creator (`None`: made outside the API) and its audit entry,
    /// in one transaction. A reused id or hash is `Conflict`, an unknown tenant `NotFound`.
    async fn insert_api_key(
        &self,
        key: &ApiKey,
        hash: &[u8],
        created_by: Option<&str>,
        audit: &AuditEntry,
    ) -> Result<(), StoreError> {
        let mut tx = self
            .pools
            .write(PoolKind::App, Scope::Tenant(key.tenant))
            .await?;
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
        .execute(&mut tx)
        .await?;
        write_audit(&mut tx, key.tenant, audit).await?;
        commit(tx).await
    }
}
