//! `TenantStore` for both adapters: tenants and API keys. These are the only lookups not
//! scoped by a tenant: they are how a tenant is found in the first place.

/// Implements `TenantStore` for `$store`, whose `app` field is a `sqlx` pool, mapping
/// driver errors with `$classify`. Invoked through [`super::impl_ports!`].
macro_rules! impl_tenant_store {
    ($store:ty, $classify:path) => {
        const _: () = {
            use async_trait::async_trait;
            use baton_core::StoreError;
            use baton_core::model::{ApiKey, Tenant};
            use baton_core::ports::TenantStore;
            use baton_events::TenantId;
            use $crate::plan::micros;
            use $crate::rows::{ApiKeyRow, TenantRow, api_key_columns, tenant_columns};

            #[async_trait]
            impl TenantStore for $store {
                /// A taken name or id is `Conflict { expected: 0, actual: 0 }` ("already
                /// exists").
                async fn create_tenant(&self, tenant: &Tenant) -> Result<(), StoreError> {
                    sqlx::query(concat!(
                        "INSERT INTO tenants (",
                        tenant_columns!(),
                        ") VALUES ($1, $2, $3)"
                    ))
                    .bind(tenant.id.as_uuid())
                    .bind(&tenant.name)
                    .bind(micros(tenant.created_at))
                    .execute(&self.app)
                    .await
                    .map_err($classify)?;
                    Ok(())
                }

                async fn get_tenant(&self, id: TenantId) -> Result<Option<Tenant>, StoreError> {
                    let row: Option<TenantRow> = sqlx::query_as(concat!(
                        "SELECT ",
                        tenant_columns!(),
                        " FROM tenants WHERE id = $1"
                    ))
                    .bind(id.as_uuid())
                    .fetch_optional(&self.app)
                    .await
                    .map_err($classify)?;
                    Ok(row.map(Tenant::from))
                }

                async fn find_tenant_by_name(
                    &self,
                    name: &str,
                ) -> Result<Option<Tenant>, StoreError> {
                    let row: Option<TenantRow> = sqlx::query_as(concat!(
                        "SELECT ",
                        tenant_columns!(),
                        " FROM tenants WHERE name = $1"
                    ))
                    .bind(name)
                    .fetch_optional(&self.app)
                    .await
                    .map_err($classify)?;
                    Ok(row.map(Tenant::from))
                }

                /// A reused token hash is `Conflict { expected: 0, actual: 0 }`; an unknown
                /// tenant is `NotFound`.
                async fn create_api_key(
                    &self,
                    key: &ApiKey,
                    hash: &[u8],
                ) -> Result<(), StoreError> {
                    sqlx::query(concat!(
                        "INSERT INTO api_keys (",
                        api_key_columns!(),
                        ", token_hash) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
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
                    .execute(&self.app)
                    .await
                    .map_err($classify)?;
                    Ok(())
                }

                async fn find_api_key(&self, hash: &[u8]) -> Result<Option<ApiKey>, StoreError> {
                    let row: Option<ApiKeyRow> = sqlx::query_as(concat!(
                        "SELECT ",
                        api_key_columns!(),
                        " FROM api_keys WHERE token_hash = $1"
                    ))
                    .bind(hash)
                    .fetch_optional(&self.app)
                    .await
                    .map_err($classify)?;
                    row.map(ApiKey::try_from).transpose()
                }
            }
        };
    };
}
pub(crate) use impl_tenant_store;
