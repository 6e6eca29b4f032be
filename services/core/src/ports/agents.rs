//! Agent definitions and their versions.

use crate::error::StoreError;
use crate::model::{Agent, AuditEntry};
use async_trait::async_trait;
use baton_events::{AgentId, TenantId};
use chrono::{DateTime, Utc};

/// Agent definitions, every version kept: a run uses the version it started with.
///
/// Every method that changes something takes the [`AuditEntry`] recording the change and
/// writes it in the same transaction, only when the change is written (so for the other
/// stores below).
#[async_trait]
pub trait AgentStore: Send + Sync {
    /// Stores version 1 (`agent.version` must be 1).
    async fn create_agent(
        &self,
        tenant: TenantId,
        agent: &Agent,
        audit: &AuditEntry,
    ) -> Result<(), StoreError>;
    /// Stores `agent` as its new current version, which must be exactly one above the
    /// current one (`Conflict` otherwise: another update won).
    async fn update_agent(
        &self,
        tenant: TenantId,
        agent: &Agent,
        audit: &AuditEntry,
    ) -> Result<(), StoreError>;
    /// The current version.
    async fn get_agent(&self, tenant: TenantId, id: AgentId) -> Result<Option<Agent>, StoreError>;
    /// One stored version.
    async fn get_agent_version(
        &self,
        tenant: TenantId,
        id: AgentId,
        version: i64,
    ) -> Result<Option<Agent>, StoreError>;
    /// Agents newest first, older than `before` when given: the archived ones, or the
    /// others.
    async fn list_agents(
        &self,
        tenant: TenantId,
        archived: bool,
        before: Option<AgentId>,
        limit: u32,
    ) -> Result<Vec<Agent>, StoreError>;
    /// The agent versions the tenant's runs not ended yet (any status but `completed`,
    /// `failed`, `cancelled`) use, with how many runs use each.
    async fn versions_in_use(
        &self,
        tenant: TenantId,
    ) -> Result<Vec<(AgentId, i64, u64)>, StoreError>;
    /// Deletes an archived agent and every version of it, with its audit entry, unless a
    /// run not ended yet uses it; `false` when there is no such archived agent idle in
    /// the tenant.
    async fn delete_agent(
        &self,
        tenant: TenantId,
        id: AgentId,
        audit: &AuditEntry,
    ) -> Result<bool, StoreError>;
    /// Archives the agent at `archived_at`, or restores it with `None`; writes (and
    /// audits) only a change. The agent as it is after, `None` when it does not exist.
    async fn set_agent_archived(
        &self,
        tenant: TenantId,
        id: AgentId,
        archived_at: Option<DateTime<Utc>>,
        audit: &AuditEntry,
    ) -> Result<Option<Agent>, StoreError>;
}
