//! The rows of `tenants`.

use baton_core::StoreError;
use baton_core::model::Tenant;
use chrono::{DateTime, Utc};
use uuid::Uuid;

/// Expands to the columns of the table, in the order its row type reads them.
macro_rules! tenant_columns {
    () => {
        "id, name, created_at"
    };
}
pub(crate) use tenant_columns;

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct TenantRow {
    pub id: Uuid,
    pub name: String,
    pub created_at: DateTime<Utc>,
}

impl TryFrom<TenantRow> for Tenant {
    type Error = StoreError;

    fn try_from(r: TenantRow) -> Result<Self, StoreError> {
        Ok(Tenant {
            id: r.id.into(),
            name: r.name,
            created_at: r.created_at,
        })
    }
}
