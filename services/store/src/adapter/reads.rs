//! The skeletons the port methods share, written once: reading rows on a connection of
//! `pools` (all of them, or the one there is), a tenant's row by id, a page of a tenant's
//! rows newest first (ids are UUIDv7, so id order is creation order; both databases
//! compare UUIDs byte-wise), a statement run alone in its own write transaction, and the
//! commit that ends every write. Each names its pool and scope, as every port method does.

use crate::backend::{Backend, Decode};
use crate::pools::{PoolKind, Scope};
use crate::query::Query;
use crate::rows::map_all;
use crate::store::Store;
use baton_core::StoreError;
use baton_events::TenantId;
use sqlx::Transaction;
use uuid::Uuid;

impl<B: Backend> Store<B> {
    /// Every row `q` returns, read on `kind`'s pool in `scope`.
    pub(crate) async fn read_all<R: Decode>(
        &self,
        kind: PoolKind,
        scope: Scope,
        q: Query<B>,
    ) -> Result<Vec<R>, StoreError> {
        let mut conn = self.pools.read(kind, scope).await?;
        q.fetch_all(&mut conn).await
    }

    /// The row `q` returns, if any, read on `kind`'s pool in `scope`.
    pub(crate) async fn read_optional<R: Decode>(
        &self,
        kind: PoolKind,
        scope: Scope,
        q: Query<B>,
    ) -> Result<Option<R>, StoreError> {
        let mut conn = self.pools.read(kind, scope).await?;
        q.fetch_optional(&mut conn).await
    }

    /// The tenant's row whose `id` is `id`, on the `app` pool: `select` is `SELECT
    /// <columns> FROM <table>`.
    pub(crate) async fn one_by_id<R, T>(
        &self,
        tenant: TenantId,
        select: &'static str,
        id: Uuid,
    ) -> Result<Option<T>, StoreError>
    where
        R: Decode,
        T: TryFrom<R, Error = StoreError>,
    {
        let mut q = Query::new(select);
        q.push(" WHERE tenant_id = ")
            .push_bind(tenant.as_uuid())
            .push(" AND id = ")
            .push_bind(id);
        let row: Option<R> = self
            .read_optional(PoolKind::App, Scope::Tenant(tenant), q)
            .await?;
        row.map(T::try_from).transpose()
    }

    /// A page of the tenant's rows on the `app` pool, newest first: those older than
    /// `before` when given, whose `filter.0` column equals `filter.1` when given, at most
    /// `limit`. `select` is `SELECT <columns> FROM <table>`.
    pub(crate) async fn newest_first<R, T>(
        &self,
        tenant: TenantId,
        select: &'static str,
        filter: Option<(&'static str, &str)>,
        before: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<T>, StoreError>
    where
        R: Decode,
        T: TryFrom<R, Error = StoreError>,
    {
        let mut q = Query::new(select);
        q.push(" WHERE tenant_id = ").push_bind(tenant.as_uuid());
        if let Some((column, value)) = filter {
            q.push(" AND ")
                .push(column)
                .push(" = ")
                .push_bind(value.to_string());
        }
        if let Some(before) = before {
            q.push(" AND id < ").push_bind(before);
        }
        q.push(" ORDER BY id DESC LIMIT ")
            .push_bind(i64::from(limit));
        let rows: Vec<R> = self
            .read_all(PoolKind::App, Scope::Tenant(tenant), q)
            .await?;
        map_all(rows)
    }

    /// Runs `q` alone in a write transaction on `kind`'s pool in `scope`, and commits;
    /// the number of rows it changed.
    pub(crate) async fn write_one(
        &self,
        kind: PoolKind,
        scope: Scope,
        q: Query<B>,
    ) -> Result<u64, StoreError> {
        let mut tx = self.pools.write(kind, scope).await?;
        let changed = q.execute(&mut tx).await?;
        commit(tx).await?;
        Ok(changed)
    }
}

/// Commits `tx`, the transaction of a write.
pub(crate) async fn commit<B: Backend>(tx: Transaction<'static, B>) -> Result<(), StoreError> {
    tx.commit().await.map_err(B::classify)
}
