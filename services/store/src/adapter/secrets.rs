//! `SecretStore`: sealed secrets keyed by (tenant, name), every statement on the `app`
//! pool scoped to the caller's tenant. The store only ever holds the envelope the keyring
//! sealed; nothing here sees a value in the clear.

use super::Result;
use crate::backend::Backend;
use crate::plan::micros;
use crate::query::Query;
use crate::rows::secrets::{SecretMetaRow, SecretRow, secret_meta_columns};
use crate::store::Store;
use async_trait::async_trait;
use baton_core::crypto::Sealed;
use baton_core::model::{AuditEntry, SecretMeta};
use baton_core::ports::{SealedSecret, SecretStore};
use baton_events::TenantId;
use chrono::{DateTime, Utc};

/// A tenant's secret by name, with its sealed value.
const SECRET: &str = concat!(
    "SELECT ",
    secret_meta_columns!(),
    ", ciphertext FROM secrets WHERE tenant_id = $1 AND name = $2"
);

/// A tenant's secrets' metadata; the tenant's id follows.
const SECRETS_OF_TENANT: &str = concat!(
    "SELECT ",
    secret_meta_columns!(),
    " FROM secrets WHERE tenant_id = "
);

#[async_trait]
impl<B: Backend> SecretStore for Store<B> {
    /// One statement: an insert that, on a taken name, replaces the key id, ciphertext and
    /// `updated_at` and keeps `created_at`. An unknown tenant is `NotFound`.
    #[tracing::instrument(name = "store.put_secret", skip_all)]
    async fn put_secret(
        &self,
        tenant: TenantId,
        name: &str,
        sealed: &Sealed,
        at: DateTime<Utc>,
        audit: &AuditEntry,
    ) -> Result<SecretMeta> {
        let at = micros(at);
        let mut change = self.audited(tenant, audit).await?;
        let row: SecretMetaRow = Query::new(concat!(
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
        .fetch_one(&mut change.tx)
        .await?;
        change.commit().await?;
        row.try_into()
    }

    #[tracing::instrument(name = "store.get_secret", skip_all)]
    async fn get_secret(&self, tenant: TenantId, name: &str) -> Result<Option<SealedSecret>> {
        let q = Query::new(SECRET).bind(tenant.as_uuid()).bind(name);
        self.tenant_row::<SecretRow, _>(tenant, q).await
    }

    #[tracing::instrument(name = "store.list_secrets", skip_all)]
    async fn list_secrets(
        &self,
        tenant: TenantId,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<SecretMeta>> {
        self.key_order::<SecretMetaRow, _>(tenant, SECRETS_OF_TENANT, "name", after, limit)
            .await
    }

    #[tracing::instrument(name = "store.delete_secret", skip_all)]
    async fn delete_secret(
        &self,
        tenant: TenantId,
        name: &str,
        audit: &AuditEntry,
    ) -> Result<bool> {
        let mut change = self.audited(tenant, audit).await?;
        let deleted = Query::new("DELETE FROM secrets WHERE tenant_id = $1 AND name = $2")
            .bind(tenant.as_uuid())
            .bind(name)
            .execute(&mut change.tx)
            .await?
            > 0;
        change.commit_if(deleted).await?;
        Ok(deleted)
    }
}
