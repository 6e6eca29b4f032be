//! `EnvironmentStore`: the tenant's rows of `environments`, on the `app` pool, scoped to
//! the tenant.

use super::Result;
use crate::backend::Backend;
use crate::plan::micros;
use crate::query::Query;
use crate::rows::environments::{EnvironmentRow, Spec};
use crate::store::Store;
use async_trait::async_trait;
use baton_core::model::{AuditEntry, TenantEnvironment};
use baton_core::ports::EnvironmentStore;
use baton_events::TenantId;
use sqlx::types::Json;

/// The tenant's environments.
const LIST: &str =
    "SELECT name, spec, updated_at FROM environments WHERE tenant_id = $1 ORDER BY name";
/// One of them.
const ONE: &str =
    "SELECT name, spec, updated_at FROM environments WHERE tenant_id = $1 AND name = $2";

#[async_trait]
impl<B: Backend> EnvironmentStore for Store<B> {
    #[tracing::instrument(name = "store.list_environments", skip_all)]
    async fn list_environments(&self, tenant: TenantId) -> Result<Vec<TenantEnvironment>> {
        let q = Query::new(LIST).bind(tenant.as_uuid());
        self.tenant_rows::<EnvironmentRow, _>(tenant, q).await
    }

    #[tracing::instrument(name = "store.get_environment", skip_all)]
    async fn get_environment(
        &self,
        tenant: TenantId,
        name: &str,
    ) -> Result<Option<TenantEnvironment>> {
        let q = Query::new(ONE)
            .bind(tenant.as_uuid())
            .bind(name.to_string());
        self.tenant_row::<EnvironmentRow, _>(tenant, q).await
    }

    /// One upsert, with its audit entry.
    #[tracing::instrument(name = "store.put_environment", skip_all)]
    async fn put_environment(
        &self,
        tenant: TenantId,
        env: &TenantEnvironment,
        audit: &AuditEntry,
    ) -> Result<()> {
        let mut change = self.audited(tenant, audit).await?;
        Query::new(
            "INSERT INTO environments (tenant_id, name, spec, updated_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (tenant_id, name) DO UPDATE SET \
             spec = excluded.spec, updated_at = excluded.updated_at",
        )
        .bind(tenant.as_uuid())
        .bind(env.name.clone())
        .bind(Json(Spec::from(env)))
        .bind(micros(env.updated_at))
        .execute(&mut change.tx)
        .await?;
        change.commit().await
    }

    #[tracing::instrument(name = "store.delete_environment", skip_all)]
    async fn delete_environment(
        &self,
        tenant: TenantId,
        name: &str,
        audit: &AuditEntry,
    ) -> Result<bool> {
        let mut change = self.audited(tenant, audit).await?;
        let deleted = Query::new("DELETE FROM environments WHERE tenant_id = $1 AND name = $2")
            .bind(tenant.as_uuid())
            .bind(name.to_string())
            .execute(&mut change.tx)
            .await?;
        change.commit_if(deleted > 0).await?;
        Ok(deleted > 0)
    }
}
