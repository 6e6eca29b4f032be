//! Tenants.

use crate::error::StoreError;
use crate::model::Tenant;
use async_trait::async_trait;
use baton_events::TenantId;

/// Tenants.
#[async_trait]
pub trait TenantStore: Send + Sync {
    async fn create_tenant(&self, tenant: &Tenant) -> Result<(), StoreError>;
    async fn get_tenant(&self, id: TenantId) -> Result<Option<Tenant>, StoreError>;
    /// The tenant with this exact name, if any (used for the embedded tier's default).
    async fn find_tenant_by_name(&self, name: &str) -> Result<Option<Tenant>, StoreError>;
}
