//! Tool definitions.

use crate::error::StoreError;
use crate::model::{AuditEntry, Tool};
use async_trait::async_trait;
use baton_events::{TenantId, ToolId};
use chrono::{DateTime, Utc};

/// A tenant's tool definitions. Names are unique within a tenant (`Conflict` on a
/// duplicate).
#[async_trait]
pub trait ToolStore: Send + Sync {
    async fn create_tool(
        &self,
        tenant: TenantId,
        tool: &Tool,
        audit: &AuditEntry,
    ) -> Result<(), StoreError>;
    /// Stores `tool` as its new current version, which must be exactly one above the
    /// current one and the tool not archived (`Conflict { expected, actual }` otherwise;
    /// a name another tool has is `Conflict { expected: 0, actual: 0 }`); `NotFound` for
    /// a tool that does not exist in this tenant.
    async fn update_tool(
        &self,
        tenant: TenantId,
        tool: &Tool,
        audit: &AuditEntry,
    ) -> Result<(), StoreError>;
    /// The current version.
    async fn get_tool(&self, tenant: TenantId, id: ToolId) -> Result<Option<Tool>, StoreError>;
    /// One stored version (`archived_at` is the tool's).
    async fn get_tool_version(
        &self,
        tenant: TenantId,
        id: ToolId,
        version: i64,
    ) -> Result<Option<Tool>, StoreError>;
    /// Deletes an archived tool and every version of it, with its audit entry; `false`
    /// when there is no archived tool `id` in the tenant.
    async fn delete_tool(
        &self,
        tenant: TenantId,
        id: ToolId,
        audit: &AuditEntry,
    ) -> Result<bool, StoreError>;
    /// Tools newest first, older than `before` when given: the archived ones, or the
    /// others.
    async fn list_tools(
        &self,
        tenant: TenantId,
        archived: bool,
        before: Option<ToolId>,
        limit: u32,
    ) -> Result<Vec<Tool>, StoreError>;
    /// Archives the tool at `archived_at`, or restores it with `None`; writes (and
    /// audits) only a change. The tool as it is after, `None` when it does not exist.
    async fn set_tool_archived(
        &self,
        tenant: TenantId,
        id: ToolId,
        archived_at: Option<DateTime<Utc>>,
        audit: &AuditEntry,
    ) -> Result<Option<Tool>, StoreError>;
}
