//! Tenants' own execution environments.

use crate::error::StoreError;
use crate::model::{AuditEntry, TenantEnvironment};
use async_trait::async_trait;
use baton_events::TenantId;

/// A tenant's environments, by name.
#[async_trait]
pub trait EnvironmentStore: Send + Sync {
    /// The tenant's environments in name order.
    async fn list_environments(
        &self,
        tenant: TenantId,
    ) -> Result<Vec<TenantEnvironment>, StoreError>;

    /// The tenant's environment `name`; another tenant's is `None`.
    async fn get_environment(
        &self,
        tenant: TenantId,
        name: &str,
    ) -> Result<Option<TenantEnvironment>, StoreError>;

    /// Defines or replaces `env`, with its audit entry. An unknown tenant is `NotFound`.
    async fn put_environment(
        &self,
        tenant: TenantId,
        env: &TenantEnvironment,
        audit: &AuditEntry,
    ) -> Result<(), StoreError>;

    /// Deletes environment `name` with its audit entry; whether there was one.
    async fn delete_environment(
        &self,
        tenant: TenantId,
        name: &str,
        audit: &AuditEntry,
    ) -> Result<bool, StoreError>;
}
