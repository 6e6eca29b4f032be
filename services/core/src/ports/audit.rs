//! The per-tenant audit stream.

use crate::error::StoreError;
use crate::model::{AuditAction, AuditEntry};
use async_trait::async_trait;
use baton_events::TenantId;
use uuid::Uuid;

/// Filter and cursor for reading the stream, newest first.
#[derive(Debug, Clone, Default)]
pub struct AuditQuery {
    /// Only entries older than this one (the previous page's last id).
    pub before: Option<Uuid>,
    pub action: Option<AuditAction>,
    pub limit: u32,
}

/// The per-tenant audit stream ([`crate::model::AuditEntry`]). The changes it records write their
/// entries themselves, through the ports above; this appends an entry of its own (what no
/// single transaction changes, such as a reseal) and reads the stream.
#[async_trait]
pub trait AuditStore: Send + Sync {
    /// Appends one entry to the tenant's stream. A reused id is `Conflict`, an unknown
    /// tenant `NotFound`.
    async fn append_audit(&self, tenant: TenantId, entry: &AuditEntry) -> Result<(), StoreError>;
    /// The tenant's entries, newest first (by id), filtered and paged by `query`.
    async fn list_audit(
        &self,
        tenant: TenantId,
        query: &AuditQuery,
    ) -> Result<Vec<AuditEntry>, StoreError>;
}
