//! Tenants' egress allowlists.

use crate::error::StoreError;
use crate::model::{AuditEntry, EgressAllowlist};
use async_trait::async_trait;
use baton_events::TenantId;

/// One allowlist per tenant.
#[async_trait]
pub trait EgressAllowlistStore: Send + Sync {
    /// The tenant's allowlist; `None` when it never set one.
    async fn get_egress_allowlist(
        &self,
        tenant: TenantId,
    ) -> Result<Option<EgressAllowlist>, StoreError>;

    /// Replaces the tenant's allowlist (`updated_at` is when), with its audit entry. An
    /// unknown tenant is `NotFound`.
    async fn put_egress_allowlist(
        &self,
        tenant: TenantId,
        allowlist: &EgressAllowlist,
        audit: &AuditEntry,
    ) -> Result<(), StoreError>;
}
