//! `ToolStore`: tool rows keyed by (tenant, id), their names unique within the tenant,
//! each tool's definition kept whole in one JSON column. Every statement runs on the `app`
//! pool, scoped to the caller's tenant.

use super::audit::write_audit;
use super::reads::commit;
use crate::backend::Backend;
use crate::plan::micros;
use crate::pools::{PoolKind, Scope};
use crate::query::Query;
use crate::rows::tools::{ToolRow, tool_columns, tool_json};
use crate::store::Store;
use async_trait::async_trait;
use baton_core::StoreError;
use baton_core::model::{AuditEntry, Tool};
use baton_core::ports::ToolStore;
use baton_events::{TenantId, ToolId};
use sqlx::types::Json;

#[async_trait]
impl<B: Backend> ToolStore for Store<B> {
    /// A duplicate id or name in the tenant is `Conflict { expected: 0, actual: 0 }`
    /// ("already exists"); an unknown tenant is `NotFound`.
    #[tracing::instrument(name = "store.create_tool", skip_all)]
    async fn create_tool(
        &self,
        tenant: TenantId,
        tool: &Tool,
        audit: &AuditEntry,
    ) -> Result<(), StoreError> {
        let mut tx = self
            .pools
            .write(PoolKind::App, Scope::Tenant(tenant))
            .await?;
        Query::new(concat!(
            "INSERT INTO tools (",
            tool_columns!(),
            ") VALUES ($1, $2, $3, $4, $5, $6)"
        ))
        .bind(tenant.as_uuid())
        .bind(tool.id.as_uuid())
        .bind(&tool.name)
        .bind(Json(tool_json(tool)?))
        .bind(micros(tool.created_at))
        .bind(micros(tool.updated_at))
        .execute(&mut tx)
        .await?;
        write_audit(&mut tx, tenant, audit).await?;
        commit(tx).await
    }

    #[tracing::instrument(name = "store.get_tool", skip_all)]
    async fn get_tool(&self, tenant: TenantId, id: ToolId) -> Result<Option<Tool>, StoreError> {
        self.one_by_id::<ToolRow, _>(
            tenant,
            concat!("SELECT ", tool_columns!(), " FROM tools"),
            id.as_uuid(),
        )
        .await
    }

    #[tracing::instrument(name = "store.list_tools", skip_all)]
    async fn list_tools(
        &self,
        tenant: TenantId,
        before: Option<ToolId>,
        limit: u32,
    ) -> Result<Vec<Tool>, StoreError> {
        self.newest_first::<ToolRow, _>(
            tenant,
            concat!("SELECT ", tool_columns!(), " FROM tools"),
            None,
            before.map(|b| b.as_uuid()),
            limit,
        )
        .await
    }
}
