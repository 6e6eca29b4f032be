//! `SecretStore` for both adapters: sealed secrets keyed by (tenant, name). The store only
//! ever holds the envelope the keyring sealed; nothing here sees a value in the clear.

/// Implements `SecretStore` for `$store` (a `$db` store), mapping driver errors with
/// `$classify`; every statement runs on the `app` pool, scoped to the caller's tenant.
/// Invoked through [`super::impl_ports!`].
macro_rules! impl_secret_store {
    ($store:ty, $db:ty, $classify:path) => {
        const _: () = {
            use async_trait::async_trait;
            use baton_core::StoreError;
            use baton_core::crypto::Sealed;
            use baton_core::model::AuditEntry;
            use baton_core::model::SecretMeta;
            use baton_core::ports::{SealedSecret, SecretStore};
            use baton_events::TenantId;
            use chrono::{DateTime, Utc};
            use sqlx::QueryBuilder;
            use $crate::plan::micros;
            use $crate::pools::{PoolKind, Scope};
            use $crate::rows::{SecretMetaRow, SecretRow, secret_meta_columns};

            #[async_trait]
            impl SecretStore for $store {
                /// One statement: an insert that, on a taken name, replaces the key id,
                /// ciphertext and `updated_at` and keeps `created_at`. An unknown tenant is
                /// `NotFound`.
                #[tracing::instrument(name = "store.put_secret", skip_all)]
                async fn put_secret(
                    &self,
                    tenant: TenantId,
                    name: &str,
                    sealed: &Sealed,
                    at: DateTime<Utc>,
                    audit: &AuditEntry,
                ) -> Result<SecretMeta, StoreError> {
                    let at = micros(at);
                    let mut tx = self
                        .pools
                        .write(PoolKind::App, Scope::Tenant(tenant))
                        .await?;
                    let row: SecretMetaRow = sqlx::query_as(concat!(
                        "INSERT INTO secrets \
                         (tenant_id, name, key_id, ciphertext, created_at, updated_at) \
                         VALUES ($1, $2, $3, $4, $5, $6) \
                         ON CONFLICT (tenant_id, name) DO UPDATE SET \
                         key_id = excluded.key_id, ciphertext = excluded.ciphertext, \
                         updated_at = excluded.updated_at \
                         RETURNING ",
                        secret_meta_columns!()
                    ))
                    .bind(tenant.as_uuid())
                    .bind(name)
                    .bind(&sealed.key_id)
                    .bind(sealed.bytes.as_slice())
                    .bind(at)
                    .bind(at)
                    .fetch_one(&mut *tx)
                    .await
                    .map_err($classify)?;
                    $crate::adapter::audit::write_audit(&mut tx, tenant, audit).await?;
                    tx.commit().await.map_err($classify)?;
                    Ok(row.into())
                }

                #[tracing::instrument(name = "store.get_secret", skip_all)]
                async fn get_secret(
                    &self,
                    tenant: TenantId,
                    name: &str,
                ) -> Result<Option<SealedSecret>, StoreError> {
                    let mut conn = self
                        .pools
                        .read(PoolKind::App, Scope::Tenant(tenant))
                        .await?;
                    let row: Option<SecretRow> = sqlx::query_as(concat!(
                        "SELECT ",
                        secret_meta_columns!(),
                        ", ciphertext FROM secrets WHERE tenant_id = $1 AND name = $2"
                    ))
                    .bind(tenant.as_uuid())
                    .bind(name)
                    .fetch_optional(&mut *conn)
                    .await
                    .map_err($classify)?;
                    Ok(row.map(SealedSecret::from))
                }

                #[tracing::instrument(name = "store.list_secrets", skip_all)]
                async fn list_secrets(
                    &self,
                    tenant: TenantId,
                    after: Option<&str>,
                    limit: u32,
                ) -> Result<Vec<SecretMeta>, StoreError> {
                    let mut conn = self
                        .pools
                        .read(PoolKind::App, Scope::Tenant(tenant))
                        .await?;
                    let mut q: QueryBuilder<$db> = QueryBuilder::new(concat!(
                        "SELECT ",
                        secret_meta_columns!(),
                        " FROM secrets WHERE tenant_id = "
                    ));
                    q.push_bind(tenant.as_uuid());
                    if let Some(after) = after {
                        q.push(" AND name > ").push_bind(after);
                    }
                    q.push(" ORDER BY name LIMIT ").push_bind(i64::from(limit));
                    let rows: Vec<SecretMetaRow> = q
                        .build_query_as()
                        .fetch_all(&mut *conn)
                        .await
                        .map_err($classify)?;
                    Ok(rows.into_iter().map(SecretMeta::from).collect())
                }

                #[tracing::instrument(name = "store.delete_secret", skip_all)]
                async fn delete_secret(
                    &self,
                    tenant: TenantId,
                    name: &str,
                    audit: &AuditEntry,
                ) -> Result<bool, StoreError> {
                    let mut tx = self
                        .pools
                        .write(PoolKind::App, Scope::Tenant(tenant))
                        .await?;
                    let done =
                        sqlx::query("DELETE FROM secrets WHERE tenant_id = $1 AND name = $2")
                            .bind(tenant.as_uuid())
                            .bind(name)
                            .execute(&mut *tx)
                            .await
                            .map_err($classify)?;
                    let deleted = done.rows_affected() > 0;
                    if deleted {
                        $crate::adapter::audit::write_audit(&mut tx, tenant, audit).await?;
                    }
                    tx.commit().await.map_err($classify)?;
                    Ok(deleted)
                }
            }
        };
    };
}
pub(crate) use impl_secret_store;
