//! `TenantStore`: the `tenants` table, which belongs to no tenant (`Scope::NoTenant`), on
//! the `app` pool. Looking a tenant up is how one is found in the first place, so nothing
//! here is scoped by a tenant.

use super::Result;
use crate::backend::Backend;
use crate::plan::micros;
use crate::pools::{PoolKind, Scope};
use crate::query::Query;
use crate::rows::tenants::{TenantRow, tenant_columns};
use crate::store::Store;
use async_trait::async_trait;
use baton_core::model::Tenant;
use baton_core::ports::TenantStore;
use baton_events::TenantId;

/// A tenant by id.
const TENANT_BY_ID: &str = concat!("SELECT ", tenant_columns!(), " FROM tenants WHERE id = $1");

/// A tenant by name.
const TENANT_BY_NAME: &str = concat!(
    "SELECT ",
    tenant_columns!(),
    " FROM tenants WHERE name = $1"
);

#[async_trait]
impl<B: Backend> TenantStore for Store<B> {
    /// A taken name or id is `Conflict { expected: 0, actual: 0 }` ("already exists").
    async fn create_tenant(&self, tenant: &Tenant) -> Result<()> {
        let q = Query::new(concat!(
            "INSERT INTO tenants (",
            tenant_columns!(),
            ") VALUES ($1, $2, $3)"
        ))
        .bind(tenant.id.as_uuid())
        .bind(&tenant.name)
        .bind(micros(tenant.created_at));
        self.write_one(PoolKind::App, Scope::NoTenant, q)
            .await
            .map(drop)
    }

    async fn get_tenant(&self, id: TenantId) -> Result<Option<Tenant>> {
        let q = Query::new(TENANT_BY_ID).bind(id.as_uuid());
        self.read_optional::<TenantRow, _>(PoolKind::App, Scope::NoTenant, q)
            .await
    }

    async fn find_tenant_by_name(&self, name: &str) -> Result<Option<Tenant>> {
        let q = Query::new(TENANT_BY_NAME).bind(name);
        self.read_optional::<TenantRow, _>(PoolKind::App, Scope::NoTenant, q)
            .await
    }
}
