//! `ToolStore`: tool rows keyed by (tenant, id), their names unique within the tenant,
//! each tool's definition kept whole in one JSON column, and every version of each kept
//! in `tool_versions` (copied from the current row in the transaction that writes it). Every statement runs on the `app`
//! pool, scoped to the caller's tenant.

use super::Result;
use super::agents::archived_condition;
use crate::backend::Backend;
use crate::plan::micros;
use crate::query::Query;
use crate::rows::tools::{ToolRow, tool_columns, tool_json, tool_version_columns};
use crate::store::Store;
use async_trait::async_trait;
use baton_core::model::{AuditEntry, Tool};
use baton_core::ports::ToolStore;
use baton_events::{TenantId, ToolId};
use sqlx::Transaction;
use sqlx::types::Json;

/// The `SELECT` of every column a [`ToolRow`] reads, from `tools`.
const SELECT_TOOLS: &str = concat!("SELECT ", tool_columns!(), " FROM tools");

/// One version of a tenant's tool, with the tool's archive time.
const TOOL_VERSION: &str = concat!(
    "SELECT ",
    tool_version_columns!(),
    " FROM tool_versions v JOIN tools t ON t.tenant_id = v.tenant_id AND t.id = v.tool_id \
     WHERE v.tenant_id = $1 AND v.tool_id = $2 AND v.version = $3"
);

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
            ") VALUES ($1, $2, $3, $4, 1, $5, $6, NULL)"
        ))
        .bind(tenant.as_uuid())
        .bind(tool.id.as_uuid())
        .bind(&tool.name)
        .bind(Json(tool_json(tool)?))
        .bind(micros(tool.created_at))
        .bind(micros(tool.updated_at))
        .execute(&mut change.tx)
        .await?;
        keep_version(&mut change.tx, tenant, tool.id).await?;
        change.commit().await
    }

    /// `Conflict { expected: tool.version - 1, actual }` when the current version is not
    /// the one below `tool`'s or the tool is archived; a taken name is `Conflict { 0, 0 }`
    /// (the unique key); `NotFound` for a tool that does not exist in this tenant.
    #[tracing::instrument(name = "store.update_tool", skip_all)]
    async fn update_tool(&self, tenant: TenantId, tool: &Tool, audit: &AuditEntry) -> Result<()> {
        let expected = tool.version - 1;
        let mut change = self.audited(tenant, audit).await?;
        // The version being replaced, if a replica older than tool versions wrote it.
        keep_version(&mut change.tx, tenant, tool.id).await?;
        let updated = Query::new(
            "UPDATE tools SET name = $1, definition = $2, version = $3, updated_at = $4 \
             WHERE tenant_id = $5 AND id = $6 AND version = $7 AND archived_at IS NULL",
        )
        .bind(&tool.name)
        .bind(Json(tool_json(tool)?))
        .bind(tool.version)
        .bind(micros(tool.updated_at))
        .bind(tenant.as_uuid())
        .bind(tool.id.as_uuid())
        .bind(expected)
        .execute(&mut change.tx)
        .await?;
        if updated != 1 {
            let refusal = super::agents::version_refusal(
                &mut change.tx,
                "SELECT version FROM tools WHERE tenant_id = $1 AND id = $2",
                tenant,
                tool.id.as_uuid(),
                expected,
            )
            .await?;
            change.rollback().await;
            return Err(refusal);
        }
        keep_version(&mut change.tx, tenant, tool.id).await?;
        change.commit().await
    }

    #[tracing::instrument(name = "store.get_tool", skip_all)]
    async fn get_tool(&self, tenant: TenantId, id: ToolId) -> Result<Option<Tool>> {
        self.one_by_id::<ToolRow, _>(tenant, SELECT_TOOLS, id.as_uuid())
            .await
    }

    #[tracing::instrument(name = "store.get_tool_version", skip_all)]
    async fn get_tool_version(
        &self,
        tenant: TenantId,
        id: ToolId,
        version: i64,
    ) -> Result<Option<Tool>> {
        let q = Query::new(TOOL_VERSION)
            .bind(tenant.as_uuid())
            .bind(id.as_uuid())
            .bind(version);
        if let Some(kept) = self.tenant_row::<ToolRow, _>(tenant, q).await? {
            return Ok(Some(kept));
        }
        // A tool written by a replica older than tool versions has its current row alone.
        let mut q = Query::new(SELECT_TOOLS);
        q.push(" WHERE tenant_id = ")
            .push_bind(tenant.as_uuid())
            .push(" AND id = ")
            .push_bind(id.as_uuid())
            .push(" AND version = ")
            .push_bind(version);
        self.tenant_row::<ToolRow, _>(tenant, q).await
    }

    /// One transaction: the tool's row goes only when it is archived, then its versions,
    /// with the audit entry.
    #[tracing::instrument(name = "store.delete_tool", skip_all)]
    async fn delete_tool(&self, tenant: TenantId, id: ToolId, audit: &AuditEntry) -> Result<bool> {
        self.delete_with_versions(
            tenant,
            "DELETE FROM tools WHERE tenant_id = $1 AND id = $2 AND archived_at IS NOT NULL",
            "DELETE FROM tool_versions WHERE tenant_id = $1 AND tool_id = $2",
            id.as_uuid(),
            audit,
        )
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

/// Copies the tool's current row into `tool_versions`, unless that version is there.
async fn keep_version<B: Backend>(
    tx: &mut Transaction<'static, B>,
    tenant: TenantId,
    id: ToolId,
) -> Result<()> {
    Query::new(
        "INSERT INTO tool_versions \
         (tenant_id, tool_id, version, name, definition, created_at, updated_at) \
         SELECT tenant_id, id, version, name, definition, created_at, updated_at \
         FROM tools WHERE tenant_id = $1 AND id = $2 \
         ON CONFLICT (tenant_id, tool_id, version) DO NOTHING",
    )
    .bind(tenant.as_uuid())
    .bind(id.as_uuid())
    .execute(tx)
    .await?;
    Ok(())
}
