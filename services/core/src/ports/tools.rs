//! Tool definitions.

use crate::error::StoreError;
use crate::model::{AuditEntry, Tool};
use async_trait::async_trait;
use baton_events::{TenantId, ToolId};

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
    async fn get_tool(&self, tenant: TenantId, id: ToolId) -> Result<Option<Tool>, StoreError>;
    /// Tools newest first, older than `before` when given.
    async fn list_tools(
        &self,
        tenant: TenantId,
        before: Option<ToolId>,
        limit: u32,
    ) -> Result<Vec<Tool>, StoreError>;
}
