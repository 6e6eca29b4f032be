//! `AuditStore`, and the one statement every audited change runs in its own transaction:
//! [`write_audit`]. An entry is written after its change and before the commit, only when
//! the change was written, so the two commit together or not at all. Entries are inserted
//! and read, never changed (on Postgres the table's policies allow nothing else; on SQLite
//! triggers refuse it). Everything runs on the `app` pool, scoped to the tenant.

use super::reads::commit;
use crate::backend::Backend;
use crate::plan::micros;
use crate::pools::{PoolKind, Scope};
use crate::query::Query;
use crate::rows::audit::{AuditRow, audit_columns};
use crate::store::Store;
use async_trait::async_trait;
use baton_core::StoreError;
use baton_core::model::AuditEntry;
use baton_core::ports::{AuditQuery, AuditStore};
use baton_events::TenantId;
use sqlx::Transaction;
use sqlx::types::Json;

/// Inserts `entry` into `tenant`'s stream on `tx`, the transaction of the change it
/// records.
pub(crate) async fn write_audit<B: Backend>(
    tx: &mut Transaction<'static, B>,
    tenant: TenantId,
    entry: &AuditEntry,
) -> Result<(), StoreError> {
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
    .await?;
    Ok(())
}

#[async_trait]
impl<B: Backend> AuditStore for Store<B> {
    #[tracing::instrument(name = "store.append_audit", skip_all)]
    async fn append_audit(&self, tenant: TenantId, entry: &AuditEntry) -> Result<(), StoreError> {
        let mut tx = self
            .pools
            .write(PoolKind::App, Scope::Tenant(tenant))
            .await?;
        write_audit(&mut tx, tenant, entry).await?;
        commit(tx).await
    }

    #[tracing::instrument(name = "store.list_audit", skip_all)]
    async fn list_audit(
        &self,
        tenant: TenantId,
        query: &AuditQuery,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        self.newest_first::<AuditRow, _>(
            tenant,
            concat!("SELECT ", audit_columns!(), " FROM audit_log"),
            query.action.map(|a| ("action", a.as_str())),
            query.before,
            query.limit,
        )
        .await
    }
}
