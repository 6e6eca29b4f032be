//! The rows of `egress_allowlists`.

use baton_core::StoreError;
use baton_core::model::EgressAllowlist;
use chrono::{DateTime, Utc};
use sqlx::types::Json;

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct EgressAllowlistRow {
    pub hosts: Json<Vec<String>>,
    pub updated_at: DateTime<Utc>,
}

impl TryFrom<EgressAllowlistRow> for EgressAllowlist {
    type Error = StoreError;

    fn try_from(r: EgressAllowlistRow) -> Result<Self, StoreError> {
        Ok(EgressAllowlist {
            hosts: r.hosts.0,
            updated_at: Some(r.updated_at),
        })
    }
}
