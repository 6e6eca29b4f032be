//! What may be shown of a tenant secret: never its value.

use chrono::{DateTime, Utc};

/// What may be shown of a tenant secret: never its value.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct SecretMeta {
    /// `[A-Za-z0-9_-]{1,64}`, unique in the tenant.
    pub name: String,
    /// The id of the keyring key the value is sealed under.
    pub key_id: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}
