//! The two reads most ports repeat, written once as inherent functions of the store so
//! every port's expansion can call them: a tenant's row by id, and a page of a tenant's
//! rows newest first (ids are UUIDv7, so id order is creation order; both databases compare
//! UUIDs byte-wise). Each maps the rows to the model with the row type's `TryFrom`.

/// Implements `one_by_id` and `newest_first` for `$store` (a `$db` store), mapping
/// driver errors with `$classify`; both read on the `app` pool, scoped to the tenant.
/// Invoked through [`super::impl_ports!`].
macro_rules! impl_lookups {
    ($store:ty, $db:ty, $classify:path) => {
        const _: () = {
            use baton_core::StoreError;
            use baton_events::TenantId;
            use sqlx::QueryBuilder;
            use uuid::Uuid;
            use $crate::pools::{PoolKind, Scope};
            use $crate::rows::map_all;

            impl $store {
                /// The tenant's row whose `id` is `id`: `select` is `SELECT <columns> FROM
                /// <table>`.
                pub(crate) async fn one_by_id<R, T>(
                    &self,
                    tenant: TenantId,
                    select: &'static str,
                    id: Uuid,
                ) -> Result<Option<T>, StoreError>
                where
                    R: for<'r> sqlx::FromRow<'r, <$db as sqlx::Database>::Row> + Send + Unpin,
                    T: TryFrom<R, Error = StoreError>,
                {
                    let mut conn = self
                        .pools
                        .read(PoolKind::App, Scope::Tenant(tenant))
                        .await?;
                    let mut q: QueryBuilder<$db> = QueryBuilder::new(select);
                    q.push(" WHERE tenant_id = ")
                        .push_bind(tenant.as_uuid())
                        .push(" AND id = ")
                        .push_bind(id);
                    let row: Option<R> = q
                        .build_query_as()
                        .fetch_optional(&mut *conn)
                        .await
                        .map_err($classify)?;
                    row.map(T::try_from).transpose()
                }

                /// A page of the tenant's rows, newest first: those older than `before`
                /// when given, whose `filter.0` column equals `filter.1` when given, at
                /// most `limit`. `select` is `SELECT <columns> FROM <table>`.
                pub(crate) async fn newest_first<R, T>(
                    &self,
                    tenant: TenantId,
                    select: &'static str,
                    filter: Option<(&'static str, &str)>,
                    before: Option<Uuid>,
                    limit: u32,
                ) -> Result<Vec<T>, StoreError>
                where
                    R: for<'r> sqlx::FromRow<'r, <$db as sqlx::Database>::Row> + Send + Unpin,
                    T: TryFrom<R, Error = StoreError>,
                {
                    let mut conn = self
                        .pools
                        .read(PoolKind::App, Scope::Tenant(tenant))
                        .await?;
                    let mut q: QueryBuilder<$db> = QueryBuilder::new(select);
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
                    let rows: Vec<R> = q
                        .build_query_as()
                        .fetch_all(&mut *conn)
                        .await
                        .map_err($classify)?;
                    map_all(rows)
                }
            }
        };
    };
}
pub(crate) use impl_lookups;
