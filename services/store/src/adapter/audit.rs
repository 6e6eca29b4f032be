//! `AuditStore`, and how every audited change is written: an [`Audited`] change runs in a
//! write transaction on the `app` pool scoped to its tenant, and its entry is inserted
//! after the change and before the commit, only when the change was written, so the two
//! commit together or not at all. Entries are inserted and read, never changed (on
//! Postgres the table's policies allow nothing else; on SQLite triggers refuse it).

use super::Result;
use super::reads::commit;
use crate::backend::Backend;
use crate::plan::micros;
use crate::pools::{PoolKind, Scope};
use crate::query::Query;
use crate::rows::audit::{AuditRow, audit_columns};
use crate::store::Store;
use async_trait::async_trait;
use baton_core::model::AuditEntry;
use baton_core::ports::{AuditQuery, AuditStore};
use baton_events::TenantId;
use sqlx::Transaction;
use sqlx::types::Json;

/// The `SELECT` of every column an [`AuditRow`] reads, from `audit_log`.
const SELECT_AUDIT: &str = concat!("SELECT ", audit_columns!(), " FROM audit_log");

/// A change to a tenant's data and the entry that records it, committed together.
pub(crate) struct Audited<'a, B: Backend> {
    /// The change's transaction: its statements run on it.
    pub tx: Transaction<'static, B>,
    tenant: TenantId,
    entry: &'a AuditEntry,
}

impl<B: Backend> Store<B> {
    /// Begins a change to `tenant`'s data that `entry` records: a write transaction on the
    /// `app` pool, scoped to the tenant.
    pub(crate) async fn audited<'a>(
        &self,
        tenant: TenantId,
        entry: &'a AuditEntry,
    ) -> Result<Audited<'a, B>> {
        let tx = self
            .pools
            .write(PoolKind::App, Scope::Tenant(tenant))
            .await?;
        Ok(Audited { tx, tenant, entry })
    }
}

impl<B: Backend> Audited<'_, B> {
    /// Writes the entry and commits it with the change.
    pub(crate) async fn commit(self) -> Result<()> {
        self.commit_if(true).await
    }

    /// Commits the change, with its entry only when `changed` (a delete or a revocation
    /// that found nothing to change is not recorded).
    pub(crate) async fn commit_if(mut self, changed: bool) -> Result<()> {
        if changed {
            insert_entry(&mut self.tx, self.tenant, self.entry).await?;
        }
        commit(self.tx).await
    }

    /// Abandons the change: nothing of it, nor its entry, is written.
    pub(crate) async fn rollback(self) {
        let _ = self.tx.rollback().await;
    }
}

/// Inserts `entry` into `tenant`'s stream on `tx`, the transaction of the change it
/// records.
pub(crate) async fn insert_entry<B: Backend>(
    tx: &mut Transaction<'static, B>,
    tenant: TenantId,
    entry: &AuditEntry,
) -> Result<()> {
    Query::new(concat!(
        "INSERT INTO audit_log (tenant_id, ",
        audit_columns!(),
        ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
    ))
    .bind(tenant.as_uuid())
    .bind(entry.id)
    .bind(micros(entry.at))
    .bind(&entry.actor)
    .bind(entry.source.map(|a| a.to_string()))
    .bind(entry.action.as_str())
    .bind(&entry.target)
    .bind(Json(&entry.details))
    .execute(tx)
    .await
    .map(drop)
}

#[async_trait]
impl<B: Backend> AuditStore for Store<B> {
    #[tracing::instrument(name = "store.append_audit", skip_all)]
    async fn append_audit(&self, tenant: TenantId, entry: &AuditEntry) -> Result<()> {
        self.audited(tenant, entry).await?.commit().await
    }

    #[tracing::instrument(name = "store.list_audit", skip_all)]
    async fn list_audit(&self, tenant: TenantId, query: &AuditQuery) -> Result<Vec<AuditEntry>> {
        self.newest_first::<AuditRow, _>(
            tenant,
            SELECT_AUDIT,
            query.action.map(|a| ("action", a.as_str())),
            "",
            query.before,
            query.limit,
        )
        .await
    }
}
