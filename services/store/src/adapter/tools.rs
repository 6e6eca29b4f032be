//! `ToolStore`: tool rows keyed by (tenant, id), their names unique within the tenant,
//! each tool's definition kept whole in one JSON column. Every statement runs on the `app`
//! pool, scoped to the caller's tenant.

use super::Result;
use super::agents::archived_condition;
use crate::backend::Backend;
use crate::plan::micros;
use crate::query::Query;
use crate::rows::tools::{ToolRow, tool_columns, tool_json};
use crate::store::Store;
use async_trait::async_trait;
use baton_core::model::{AuditEntry, Tool};
use baton_core::ports::ToolStore;
use baton_events::{TenantId, ToolId};
use sqlx::types::Json;

/// The `SELECT` of every column a [`ToolRow`] reads, from `tools`.
const SELECT_TOOLS: &str = concat!("SELECT ", tool_columns!(), " FROM tools");

/// Archives (`$1` a time) or restores (`$1` null) a tool, `$2` the tenant, `$3` the id,
/// when it is not so already (`$4`: whether to archive).
const ARCHIVE_TOOL: &str = "UPDATE tools SET archived_at = $1 \
     WHERE tenant_id = $2 AND id = $3 AND (archived_at IS NULL) = $4";

#[async_trait]
impl<B: Backend> ToolStore for Store<B> {
    /// A duplicate id or name in the tenant is `Conflict { expected: 0, actual: 0 }`
    /// ("already exists"); an unknown tenant is `NotFound`.
    #[tracing::instrument(name = "store.create_tool", skip_all)]
    async fn create_tool(&self, tenant: TenantId, tool: &Tool, audit: &AuditEntry) -> Result<()> {
        let mut change = self.audited(tenant, audit).await?;
        Query::new(concat!(
            "INSERT INTO tools (",
            tool_columns!(),
            ") VALUES ($1, $2, $3, $4, $5, $6, NULL)"
        ))
        .bind(tenant.as_uuid())
        .bind(tool.id.as_uuid())
        .bind(&tool.name)
        .bind(Json(tool_json(tool)?))
        .bind(micros(tool.created_at))
        .bind(micros(tool.updated_at))
        .execute(&mut change.tx)
        .await?;
        change.commit().await
    }

    #[tracing::instrument(name = "store.get_tool", skip_all)]
    async fn get_tool(&self, tenant: TenantId, id: ToolId) -> Result<Option<Tool>> {
        self.one_by_id::<ToolRow, _>(tenant, SELECT_TOOLS, id.as_uuid())
            .await
    }

    #[tracing::instrument(name = "store.list_tools", skip_all)]
    async fn list_tools(
        &self,
        tenant: TenantId,
        archived: bool,
        before: Option<ToolId>,
        limit: u32,
    ) -> Result<Vec<Tool>> {
        self.newest_first::<ToolRow, _>(
            tenant,
            SELECT_TOOLS,
            None,
            archived_condition(archived),
            before.map(|b| b.as_uuid()),
            limit,
        )
        .await
    }

    /// Writes nothing (and no audit entry) when the tool is already as asked.
    #[tracing::instrument(name = "store.set_tool_archived", skip_all)]
    async fn set_tool_archived(
        &self,
        tenant: TenantId,
        id: ToolId,
        archived_at: Option<chrono::DateTime<chrono::Utc>>,
        audit: &AuditEntry,
    ) -> Result<Option<Tool>> {
        self.set_archived(tenant, ARCHIVE_TOOL, id.as_uuid(), archived_at, audit)
            .await?;
        self.get_tool(tenant, id).await
    }
}
