//! `EgressAllowlistStore`: one row per tenant in `egress_allowlists`, on the `app` pool,
//! scoped to the tenant.

use super::Result;
use crate::backend::Backend;
use crate::plan::micros;
use crate::query::Query;
use crate::rows::egress_allowlists::EgressAllowlistRow;
use crate::store::Store;
use async_trait::async_trait;
use baton_core::model::{AuditEntry, EgressAllowlist};
use baton_core::ports::EgressAllowlistStore;
use baton_events::TenantId;
use sqlx::types::Json;

/// The tenant's allowlist.
const ALLOWLIST: &str = "SELECT hosts, updated_at FROM egress_allowlists WHERE tenant_id = $1";

#[async_trait]
impl<B: Backend> EgressAllowlistStore for Store<B> {
    #[tracing::instrument(name = "store.get_egress_allowlist", skip_all)]
    async fn get_egress_allowlist(&self, tenant: TenantId) -> Result<Option<EgressAllowlist>> {
        let q = Query::new(ALLOWLIST).bind(tenant.as_uuid());
        self.tenant_row::<EgressAllowlistRow, _>(tenant, q).await
    }

    /// One upsert, with its audit entry. An unknown tenant is `NotFound`.
    #[tracing::instrument(name = "store.put_egress_allowlist", skip_all)]
    async fn put_egress_allowlist(
        &self,
        tenant: TenantId,
        allowlist: &EgressAllowlist,
        audit: &AuditEntry,
    ) -> Result<()> {
        let at = allowlist.updated_at.unwrap_or(audit.at);
        let mut change = self.audited(tenant, audit).await?;
        Query::new(
            "INSERT INTO egress_allowlists (tenant_id, hosts, updated_at) VALUES ($1, $2, $3) \
             ON CONFLICT (tenant_id) DO UPDATE SET \
             hosts = excluded.hosts, updated_at = excluded.updated_at",
        )
        .bind(tenant.as_uuid())
        .bind(Json(&allowlist.hosts))
        .bind(micros(at))
        .execute(&mut change.tx)
        .await?;
        change.commit().await
    }
}
