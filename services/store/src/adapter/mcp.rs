//! `McpServerStore`: servers in `mcp_servers`, their discoveries in `mcp_discoveries`,
//! each written with its audit entry.

use super::Result;
use crate::backend::Backend;
use crate::plan::micros;
use crate::query::Query;
use crate::rows::mcp::{McpDiscoveryRow, McpServerRow, definition_json, mcp_server_columns};
use crate::rows::to_json;
use crate::store::Store;
use async_trait::async_trait;
use baton_core::StoreError;
use baton_core::model::{AuditEntry, McpDiscovery, McpServer};
use baton_core::ports::{MCP_DISCOVERIES_KEPT, McpServerStore};
use baton_events::{McpServerId, TenantId};
use sqlx::types::Json;

/// A server's row, by tenant and id (bound by the caller).
const SERVER: &str = concat!("SELECT ", mcp_server_columns!(), " FROM mcp_servers");

#[async_trait]
impl<B: Backend> McpServerStore for Store<B> {
    #[tracing::instrument(name = "store.create_mcp_server", skip_all)]
    async fn create_mcp_server(&self, s: &McpServer, audit: &AuditEntry) -> Result<()> {
        let mut change = self.audited(s.tenant, audit).await?;
        Query::new(concat!(
            "INSERT INTO mcp_servers (",
            mcp_server_columns!(),
            ") VALUES ($1, $2, $3, $4, $5, $6, $7)"
        ))
        .bind(s.tenant.as_uuid())
        .bind(s.id.as_uuid())
        .bind(&s.name)
        .bind(Json(definition_json(s)?))
        .bind(s.version)
        .bind(micros(s.created_at))
        .bind(micros(s.updated_at))
        .execute(&mut change.tx)
        .await?;
        change.commit().await
    }

    #[tracing::instrument(name = "store.get_mcp_server", skip_all)]
    async fn get_mcp_server(&self, tenant: TenantId, id: McpServerId) -> Result<Option<McpServer>> {
        self.one_by_id::<McpServerRow, _>(tenant, SERVER, id.as_uuid())
            .await
    }

    #[tracing::instrument(name = "store.list_mcp_servers", skip_all)]
    async fn list_mcp_servers(
        &self,
        tenant: TenantId,
        before: Option<McpServerId>,
        limit: u32,
    ) -> Result<Vec<McpServer>> {
        self.newest_first::<McpServerRow, _>(
            tenant,
            SERVER,
            None,
            "",
            before.map(|b| b.as_uuid()),
            limit,
        )
        .await
    }

    #[tracing::instrument(name = "store.update_mcp_server", skip_all)]
    async fn update_mcp_server(
        &self,
        s: &McpServer,
        expected: i64,
        audit: &AuditEntry,
    ) -> Result<bool> {
        let mut change = self.audited(s.tenant, audit).await?;
        let changed = Query::new(
            "UPDATE mcp_servers SET name = $1, definition = $2, version = $3, updated_at = $4 \
             WHERE tenant_id = $5 AND id = $6 AND version = $7",
        )
        .bind(&s.name)
        .bind(Json(definition_json(s)?))
        .bind(s.version)
        .bind(micros(s.updated_at))
        .bind(s.tenant.as_uuid())
        .bind(s.id.as_uuid())
        .bind(expected)
        .execute(&mut change.tx)
        .await?;
        if changed != 1 {
            change.rollback().await;
            return Ok(false);
        }
        change.commit().await?;
        Ok(true)
    }

    #[tracing::instrument(name = "store.delete_mcp_server", skip_all)]
    async fn delete_mcp_server(
        &self,
        tenant: TenantId,
        id: McpServerId,
        audit: &AuditEntry,
    ) -> Result<bool> {
        let mut change = self.audited(tenant, audit).await?;
        Query::new("DELETE FROM mcp_discoveries WHERE tenant_id = $1 AND server_id = $2")
            .bind(tenant.as_uuid())
            .bind(id.as_uuid())
            .execute(&mut change.tx)
            .await?;
        let changed = Query::new("DELETE FROM mcp_servers WHERE tenant_id = $1 AND id = $2")
            .bind(tenant.as_uuid())
            .bind(id.as_uuid())
            .execute(&mut change.tx)
            .await?;
        change.commit_if(changed == 1).await?;
        Ok(changed == 1)
    }

    #[tracing::instrument(name = "store.add_mcp_discovery", skip_all)]
    async fn add_mcp_discovery(
        &self,
        tenant: TenantId,
        server: McpServerId,
        d: &McpDiscovery,
        audit: &AuditEntry,
    ) -> Result<()> {
        let result = to_json("an MCP discovery", d)?;
        let mut change = self.audited(tenant, audit).await?;
        // Written only while the server exists (a missing server is `NotFound`); a number
        // taken meanwhile is the primary key's `Conflict`.
        let written = Query::new(
            "INSERT INTO mcp_discoveries (tenant_id, server_id, number, discovered_at, result) \
             SELECT tenant_id, id, $3, $4, $5 FROM mcp_servers WHERE tenant_id = $1 AND id = $2",
        )
        .bind(tenant.as_uuid())
        .bind(server.as_uuid())
        .bind(d.number)
        .bind(micros(d.discovered_at))
        .bind(Json(result))
        .execute(&mut change.tx)
        .await?;
        if written != 1 {
            change.rollback().await;
            return Err(StoreError::NotFound);
        }
        Query::new(
            "DELETE FROM mcp_discoveries WHERE tenant_id = $1 AND server_id = $2 AND number <= $3",
        )
        .bind(tenant.as_uuid())
        .bind(server.as_uuid())
        .bind(d.number - MCP_DISCOVERIES_KEPT)
        .execute(&mut change.tx)
        .await?;
        change.commit().await
    }

    #[tracing::instrument(name = "store.latest_mcp_discovery", skip_all)]
    async fn latest_mcp_discovery(
        &self,
        tenant: TenantId,
        server: McpServerId,
    ) -> Result<Option<McpDiscovery>> {
        let q = Query::new(
            "SELECT server_id, number, discovered_at, result FROM mcp_discoveries \
             WHERE tenant_id = $1 AND server_id = $2 ORDER BY number DESC LIMIT 1",
        )
        .bind(tenant.as_uuid())
        .bind(server.as_uuid());
        self.tenant_row::<McpDiscoveryRow, _>(tenant, q).await
    }
}
