//! The rows of `api_keys`: a key as the API shows it, and with its bookkeeping (never its
//! token hash).

use super::corrupt;
use baton_core::model::{ApiKey, ApiKeyRecord};
use baton_core::{Role, StoreError};
use chrono::{DateTime, Utc};
use uuid::Uuid;

/// Expands to the columns of the table, in the order its row type reads them.
macro_rules! api_key_columns {
    () => {
        "id, tenant_id, name, prefix, role, created_at, expires_at, revoked_at"
    };
}
pub(crate) use api_key_columns;

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct ApiKeyRow {
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub name: String,
    pub prefix: String,
    pub role: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

impl TryFrom<ApiKeyRow> for ApiKey {
    type Error = StoreError;

    fn try_from(r: ApiKeyRow) -> Result<Self, StoreError> {
        let role = Role::parse(&r.role)
            .ok_or_else(|| corrupt(format!("api key {} has unknown role {:?}", r.id, r.role)))?;
        Ok(ApiKey {
            id: r.id,
            tenant: r.tenant_id.into(),
            name: r.name,
            prefix: r.prefix,
            role,
            created_at: r.created_at,
            expires_at: r.expires_at,
            revoked_at: r.revoked_at,
        })
    }
}

/// Expands to the columns of `api_keys` an [`ApiKeyRecordRow`] reads: the key's and its
/// bookkeeping.
macro_rules! api_key_record_columns {
    () => {
        "id, tenant_id, name, prefix, role, created_at, expires_at, revoked_at, created_by, \
         last_used_at"
    };
}
pub(crate) use api_key_record_columns;

/// A row of `api_keys` without its token hash.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct ApiKeyRecordRow {
    #[sqlx(flatten)]
    pub key: ApiKeyRow,
    pub created_by: Option<String>,
    pub last_used_at: Option<DateTime<Utc>>,
}

impl TryFrom<ApiKeyRecordRow> for ApiKeyRecord {
    type Error = StoreError;

    fn try_from(r: ApiKeyRecordRow) -> Result<Self, StoreError> {
        Ok(ApiKeyRecord {
            key: r.key.try_into()?,
            created_by: r.created_by,
            last_used_at: r.last_used_at,
        })
    }
}
