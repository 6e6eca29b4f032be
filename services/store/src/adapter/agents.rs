//! `AgentStore`: agent rows keyed by (tenant, id), listed newest first, and every version
//! of each kept in `agent_versions`. Creating an agent and storing a new version each write
//! the current row and its version row in one transaction; the version row is copied from
//! the current row, so the two never disagree. Every statement runs on the `app` pool,
//! scoped to the caller's tenant.

use super::Result;
use crate::backend::Backend;
use crate::plan::micros;
use crate::pools::{PoolKind, Scope};
use crate::query::Query;
use crate::rows::agents::{AgentJson, AgentRow, agent_columns, agent_version_columns};
use crate::store::Store;
use async_trait::async_trait;
use baton_core::StoreError;
use baton_core::model::{Agent, AuditEntry};
use baton_core::ports::AgentStore;
use baton_events::{AgentId, TenantId};
use sqlx::Transaction;
use sqlx::types::Json;

/// One version of a tenant's agent.
const AGENT_VERSION: &str = concat!(
    "SELECT ",
    agent_version_columns!(),
    " FROM agent_versions \
     WHERE tenant_id = $1 AND agent_id = $2 AND version = $3"
);

/// Archives (`$1` a time) or restores (`$1` null) an agent, `$2` the tenant, `$3` the id,
/// when it is not so already (`$4`: whether to archive).
const ARCHIVE_AGENT: &str = "UPDATE agents SET archived_at = $1 \
     WHERE tenant_id = $2 AND id = $3 AND (archived_at IS NULL) = $4";

/// The `SELECT` of every column an [`AgentRow`] reads, from `agents`.
const SELECT_AGENTS: &str = concat!("SELECT ", agent_columns!(), " FROM agents");

/// The agent's own retention, kept in its column for the retention job's query.
fn retention_days(agent: &Agent) -> Option<i64> {
    agent.limits.retention_days.map(i64::from)
}

#[async_trait]
impl<B: Backend> AgentStore for Store<B> {
    /// A duplicate id is `Conflict { expected: 0, actual: 0 }` ("already exists").
    #[tracing::instrument(name = "store.create_agent", skip_all)]
    async fn create_agent(
        &self,
        tenant: TenantId,
        agent: &Agent,
        audit: &AuditEntry,
    ) -> Result<()> {
        let json = AgentJson::of(agent)?;
        let mut change = self.audited(tenant, audit).await?;
        Query::new(concat!(
            "INSERT INTO agents (",
            agent_columns!(),
            ", run_retention_days) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, NULL, $11)"
        ))
        .bind(tenant.as_uuid())
        .bind(agent.id.as_uuid())
        .bind(&agent.name)
        .bind(&agent.instructions)
        .bind(Json(&json.provider))
        .bind(Json(&json.tools))
        .bind(Json(&json.limits))
        .bind(agent.version)
        .bind(micros(agent.created_at))
        .bind(micros(agent.updated_at))
        .bind(retention_days(agent))
        .execute(&mut change.tx)
        .await?;
        keep_version(&mut change.tx, tenant, agent.id).await?;
        change.commit().await
    }

    /// `Conflict { expected: agent.version - 1, actual }` when the current version is not
    /// the one below `agent`'s, or when the agent is archived (then `actual` may equal
    /// `expected`); `NotFound` for an agent that does not exist in this tenant. The
    /// creation time stays the agent's.
    #[tracing::instrument(name = "store.update_agent", skip_all)]
    async fn update_agent(
        &self,
        tenant: TenantId,
        agent: &Agent,
        audit: &AuditEntry,
    ) -> Result<()> {
        let json = AgentJson::of(agent)?;
        let expected = agent.version - 1;
        let mut change = self.audited(tenant, audit).await?;
        let updated = Query::new(
            "UPDATE agents SET name = $1, instructions = $2, provider = $3, \
             tools = $4, limits = $5, version = $6, updated_at = $7, \
             run_retention_days = $11 \
             WHERE tenant_id = $8 AND id = $9 AND version = $10 AND archived_at IS NULL",
        )
        .bind(&agent.name)
        .bind(&agent.instructions)
        .bind(Json(&json.provider))
        .bind(Json(&json.tools))
        .bind(Json(&json.limits))
        .bind(agent.version)
        .bind(micros(agent.updated_at))
        .bind(tenant.as_uuid())
        .bind(agent.id.as_uuid())
        .bind(expected)
        .bind(retention_days(agent))
        .execute(&mut change.tx)
        .await?;
        if updated != 1 {
            let refusal = version_refusal(
                &mut change.tx,
                "SELECT version FROM agents WHERE tenant_id = $1 AND id = $2",
                tenant,
                agent.id.as_uuid(),
                expected,
            )
            .await?;
            change.rollback().await;
            return Err(refusal);
        }
        keep_version(&mut change.tx, tenant, agent.id).await?;
        change.commit().await
    }

    #[tracing::instrument(name = "store.get_agent", skip_all)]
    async fn get_agent(&self, tenant: TenantId, id: AgentId) -> Result<Option<Agent>> {
        self.one_by_id::<AgentRow, _>(tenant, SELECT_AGENTS, id.as_uuid())
            .await
    }

    #[tracing::instrument(name = "store.get_agent_version", skip_all)]
    async fn get_agent_version(
        &self,
        tenant: TenantId,
        id: AgentId,
        version: i64,
    ) -> Result<Option<Agent>> {
        let q = Query::new(AGENT_VERSION)
            .bind(tenant.as_uuid())
            .bind(id.as_uuid())
            .bind(version);
        self.tenant_row::<AgentRow, _>(tenant, q).await
    }

    #[tracing::instrument(name = "store.list_agents", skip_all)]
    async fn list_agents(
        &self,
        tenant: TenantId,
        archived: bool,
        before: Option<AgentId>,
        limit: u32,
    ) -> Result<Vec<Agent>> {
        self.newest_first::<AgentRow, _>(
            tenant,
            SELECT_AGENTS,
            None,
            archived_condition(archived),
            before.map(|b| b.as_uuid()),
            limit,
        )
        .await
    }

    #[tracing::instrument(name = "store.versions_in_use", skip_all)]
    async fn versions_in_use(&self, tenant: TenantId) -> Result<Vec<(AgentId, i64, u64)>> {
        let mut conn = self
            .pools
            .read(PoolKind::App, Scope::Tenant(tenant))
            .await?;
        let rows: Vec<(uuid::Uuid, i64, i64)> = Query::new(
            "SELECT agent_id, agent_version, COUNT(*) FROM runs \
             WHERE tenant_id = $1 AND status NOT IN ('completed', 'failed', 'cancelled') \
             GROUP BY agent_id, agent_version ORDER BY agent_id, agent_version",
        )
        .bind(tenant.as_uuid())
        .fetch_all(&mut conn)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(id, version, n)| (AgentId(id), version, u64::try_from(n).unwrap_or(0)))
            .collect())
    }

    /// One transaction: the agent's row goes only when it is archived and no run not
    /// ended yet names it, then its versions, with the audit entry.
    #[tracing::instrument(name = "store.delete_agent", skip_all)]
    async fn delete_agent(
        &self,
        tenant: TenantId,
        id: AgentId,
        audit: &AuditEntry,
    ) -> Result<bool> {
        self.delete_with_versions(
            tenant,
            "DELETE FROM agents WHERE tenant_id = $1 AND id = $2 AND archived_at IS NOT NULL \
             AND NOT EXISTS (SELECT 1 FROM runs WHERE runs.tenant_id = $1 \
               AND runs.agent_id = $2 \
               AND runs.status NOT IN ('completed', 'failed', 'cancelled'))",
            "DELETE FROM agent_versions WHERE tenant_id = $1 AND agent_id = $2",
            id.as_uuid(),
            audit,
        )
        .await
    }

    /// Writes nothing (and no audit entry) when the agent is already as asked.
    #[tracing::instrument(name = "store.set_agent_archived", skip_all)]
    async fn set_agent_archived(
        &self,
        tenant: TenantId,
        id: AgentId,
        archived_at: Option<chrono::DateTime<chrono::Utc>>,
        audit: &AuditEntry,
    ) -> Result<Option<Agent>> {
        self.set_archived(tenant, ARCHIVE_AGENT, id.as_uuid(), archived_at, audit)
            .await?;
        self.get_agent(tenant, id).await
    }
}

/// Why an update of row `id` at `expected` (its version) changed nothing: `select` (`$1`
/// the tenant, `$2` the id) reads the version it is at, a `Conflict`, or finds no row,
/// `NotFound`.
pub(crate) async fn version_refusal<B: Backend>(
    tx: &mut Transaction<'static, B>,
    select: &'static str,
    tenant: TenantId,
    id: uuid::Uuid,
    expected: i64,
) -> Result<StoreError> {
    let actual: Option<(i64,)> = Query::new(select)
        .bind(tenant.as_uuid())
        .bind(id)
        .fetch_optional(tx)
        .await?;
    Ok(match actual {
        Some((actual,)) => StoreError::Conflict { expected, actual },
        None => StoreError::NotFound,
    })
}

impl<B: Backend> Store<B> {
    /// Deletes row `id` of the tenant with `delete` (`$1` the tenant, `$2` the id; its
    /// conditions decide), then, if it went, every version of it with `versions`, with
    /// `audit`, in one transaction: whether it went.
    pub(crate) async fn delete_with_versions(
        &self,
        tenant: TenantId,
        delete: &'static str,
        versions: &'static str,
        id: uuid::Uuid,
        audit: &AuditEntry,
    ) -> Result<bool> {
        let mut change = self.audited(tenant, audit).await?;
        let deleted = Query::new(delete)
            .bind(tenant.as_uuid())
            .bind(id)
            .execute(&mut change.tx)
            .await?
            == 1;
        if deleted {
            Query::new(versions)
                .bind(tenant.as_uuid())
                .bind(id)
                .execute(&mut change.tx)
                .await?;
        }
        change.commit_if(deleted).await?;
        Ok(deleted)
    }
}

/// The condition of a list of the archived rows, or of the others.
pub(crate) fn archived_condition(archived: bool) -> &'static str {
    match archived {
        true => " AND archived_at IS NOT NULL",
        false => " AND archived_at IS NULL",
    }
}

/// Copies the agent's current row, just written, into `agent_versions`.
async fn keep_version<B: Backend>(
    tx: &mut Transaction<'static, B>,
    tenant: TenantId,
    id: AgentId,
) -> Result<()> {
    Query::new(
        "INSERT INTO agent_versions \
         (tenant_id, agent_id, version, name, instructions, provider, tools, \
         limits, created_at, updated_at) \
         SELECT tenant_id, id, version, name, instructions, provider, tools, \
         limits, created_at, updated_at \
         FROM agents WHERE tenant_id = $1 AND id = $2",
    )
    .bind(tenant.as_uuid())
    .bind(id.as_uuid())
    .execute(tx)
    .await?;
    Ok(())
}
