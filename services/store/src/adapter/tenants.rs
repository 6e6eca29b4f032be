//! `TenantStore` for both adapters: tenants and API keys. The lookups of a tenant and of a
//! key by its hash are the only ones not scoped by a tenant: they are how a tenant is found
//! in the first place. Everything else about a key (create, get, list, revoke, recording
//! its use) is filtered by its tenant and runs scoped to it.
//!
//! The `tenants` table belongs to no tenant (`Scope::NoTenant`); a key's lookup by hash is
//! the one cross-tenant path here (`Scope::CrossTenant`).

/// Implements `TenantStore` for `$store`, mapping driver errors with `$classify`; every
/// statement runs on the `app` pool. Invoked through [`super::impl_ports!`].
macro_rules! impl_tenant_store {
    ($store:ty, $classify:path) => {
        const _: () = {
            use async_trait::async_trait;
            use baton_core::StoreError;
            use baton_core::model::ApiKeyRecord;
            use baton_core::model::AuditEntry;
            use baton_core::model::{ApiKey, Tenant};
            use baton_core::ports::{ApiKeyStore, TenantStore};
            use baton_events::TenantId;
            use chrono::{DateTime, Utc};
            use uuid::Uuid;
            use $crate::plan::micros;
            use $crate::pools::{PoolKind, Scope};
            use $crate::rows::{
                ApiKeyRecordRow, TenantRow, api_key_columns, api_key_record_columns, tenant_columns,
            };

            /// Stores the key with its creator (`None`: made outside the API) and its
            /// audit entry, in one transaction. A reused id or hash is `Conflict`, an
            /// unknown tenant `NotFound`.
            async fn insert_api_key(
                store: &$store,
                key: &ApiKey,
                hash: &[u8],
                created_by: Option<&str>,
                audit: &AuditEntry,
            ) -> Result<(), StoreError> {
                let mut tx = store
                    .pools
                    .write(PoolKind::App, Scope::Tenant(key.tenant))
                    .await?;
                sqlx::query(concat!(
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
                .execute(&mut *tx)
                .await
                .map_err($classify)?;
                $crate::adapter::audit::write_audit(&mut tx, key.tenant, audit).await?;
                tx.commit().await.map_err($classify)
            }

            #[async_trait]
            impl TenantStore for $store {
                /// A taken name or id is `Conflict { expected: 0, actual: 0 }` ("already
                /// exists").
                async fn create_tenant(&self, tenant: &Tenant) -> Result<(), StoreError> {
                    let mut tx = self.pools.write(PoolKind::App, Scope::NoTenant).await?;
                    sqlx::query(concat!(
                        "INSERT INTO tenants (",
                        tenant_columns!(),
                        ") VALUES ($1, $2, $3)"
                    ))
                    .bind(tenant.id.as_uuid())
                    .bind(&tenant.name)
                    .bind(micros(tenant.created_at))
                    .execute(&mut *tx)
                    .await
                    .map_err($classify)?;
                    tx.commit().await.map_err($classify)
                }

                async fn get_tenant(&self, id: TenantId) -> Result<Option<Tenant>, StoreError> {
                    let mut conn = self.pools.read(PoolKind::App, Scope::NoTenant).await?;
                    let row: Option<TenantRow> = sqlx::query_as(concat!(
                        "SELECT ",
                        tenant_columns!(),
                        " FROM tenants WHERE id = $1"
                    ))
                    .bind(id.as_uuid())
                    .fetch_optional(&mut *conn)
                    .await
                    .map_err($classify)?;
                    Ok(row.map(Tenant::from))
                }

                async fn find_tenant_by_name(
                    &self,
                    name: &str,
                ) -> Result<Option<Tenant>, StoreError> {
                    let mut conn = self.pools.read(PoolKind::App, Scope::NoTenant).await?;
                    let row: Option<TenantRow> = sqlx::query_as(concat!(
                        "SELECT ",
                        tenant_columns!(),
                        " FROM tenants WHERE name = $1"
                    ))
                    .bind(name)
                    .fetch_optional(&mut *conn)
                    .await
                    .map_err($classify)?;
                    Ok(row.map(Tenant::from))
                }
            }

            #[async_trait]
            impl ApiKeyStore for $store {
                /// A reused token hash is `Conflict { expected: 0, actual: 0 }`; an unknown
                /// tenant is `NotFound`.
                #[tracing::instrument(name = "store.create_api_key", skip_all)]
                async fn create_api_key(
                    &self,
                    key: &ApiKey,
                    hash: &[u8],
                    audit: &AuditEntry,
                ) -> Result<(), StoreError> {
                    insert_api_key(self, key, hash, None, audit).await
                }

                /// As [`create_api_key`](TenantStore::create_api_key), recording the
                /// entry's actor as its creator.
                #[tracing::instrument(name = "store.create_api_key", skip_all)]
                async fn create_api_key_by(
                    &self,
                    key: &ApiKey,
                    hash: &[u8],
                    audit: &AuditEntry,
                ) -> Result<(), StoreError> {
                    insert_api_key(self, key, hash, Some(&audit.actor), audit).await
                }

                async fn lookup_api_key(
                    &self,
                    hash: &[u8],
                ) -> Result<Option<ApiKeyRecord>, StoreError> {
                    let mut conn = self.pools.read(PoolKind::App, Scope::CrossTenant).await?;
                    let row: Option<ApiKeyRecordRow> = sqlx::query_as(concat!(
                        "SELECT ",
                        api_key_record_columns!(),
                        " FROM api_keys WHERE token_hash = $1"
                    ))
                    .bind(hash)
                    .fetch_optional(&mut *conn)
                    .await
                    .map_err($classify)?;
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

                /// Ids are UUIDv7, so id order is creation order; both databases compare
                /// them byte-wise, as `api_keys_by_tenant` is sorted.
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
                    let done = sqlx::query(
                        "UPDATE api_keys SET revoked_at = $3 \
                         WHERE tenant_id = $1 AND id = $2 AND revoked_at IS NULL",
                    )
                    .bind(tenant.as_uuid())
                    .bind(id)
                    .bind(micros(at))
                    .execute(&mut *tx)
                    .await
                    .map_err($classify)?;
                    let revoked = done.rows_affected() > 0;
                    if revoked {
                        $crate::adapter::audit::write_audit(&mut tx, tenant, audit).await?;
                    }
                    tx.commit().await.map_err($classify)?;
                    Ok(revoked)
                }

                /// The condition makes the write happen once per interval however many
                /// replicas race. SQLite keeps timestamps as RFC 3339 text in UTC
                /// (`+00:00`, a four-digit year, 0, 3 or 6 fraction digits), which sorts
                /// in time order, so `<` compares them correctly on both databases.
                async fn touch_api_key(
                    &self,
                    tenant: TenantId,
                    id: Uuid,
                    at: DateTime<Utc>,
                    stale_before: DateTime<Utc>,
                ) -> Result<bool, StoreError> {
                    let mut tx = self
                        .pools
                        .write(PoolKind::App, Scope::Tenant(tenant))
                        .await?;
                    let done = sqlx::query(
                        "UPDATE api_keys SET last_used_at = $3 \
                         WHERE tenant_id = $1 AND id = $2 \
                           AND (last_used_at IS NULL OR last_used_at < $4)",
                    )
                    .bind(tenant.as_uuid())
                    .bind(id)
                    .bind(micros(at))
                    .bind(micros(stale_before))
                    .execute(&mut *tx)
                    .await
                    .map_err($classify)?;
                    tx.commit().await.map_err($classify)?;
                    Ok(done.rows_affected() > 0)
                }
            }
        };
    };
}
pub(crate) use impl_tenant_store;
