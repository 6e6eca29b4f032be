//! Tenants and their API keys (never a key's token or hash).

use crate::model::Role;
use baton_events::TenantId;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// A tenant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tenant {
    pub id: TenantId,
    pub name: String,
    pub created_at: DateTime<Utc>,
}

/// A stored API key, without its secret.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiKey {
    pub id: uuid::Uuid,
    pub tenant: TenantId,
    pub name: String,
    pub prefix: String,
    pub role: Role,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// An API key as stored, without its token or hash: the key and its bookkeeping.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiKeyRecord {
    pub key: ApiKey,
    /// The actor label of whoever created it (`key:<id>`, `local`); `None` for a key made
    /// outside the API (the owner key of `baton admin create-tenant`).
    pub created_by: Option<String>,
    /// When it last authenticated a request, to within [`crate::auth::LAST_USE_INTERVAL`].
    pub last_used_at: Option<DateTime<Utc>>,
}
