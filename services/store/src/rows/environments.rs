//! The rows of `environments`.

use baton_core::StoreError;
use baton_core::model::{EnvironmentLimits, Role, TenantEnvironment};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::types::Json;

/// What `spec` holds.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Spec {
    pub base: String,
    pub network: bool,
    pub limits: EnvironmentLimits,
    pub execute_role: Role,
}

impl From<&TenantEnvironment> for Spec {
    fn from(e: &TenantEnvironment) -> Self {
        Spec {
            base: e.base.clone(),
            network: e.network,
            limits: e.limits,
            execute_role: e.execute_role,
        }
    }
}

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct EnvironmentRow {
    pub name: String,
    pub spec: Json<Spec>,
    pub updated_at: DateTime<Utc>,
}

impl TryFrom<EnvironmentRow> for TenantEnvironment {
    type Error = StoreError;

    fn try_from(r: EnvironmentRow) -> Result<Self, StoreError> {
        let spec = r.spec.0;
        Ok(TenantEnvironment {
            name: r.name,
            base: spec.base,
            network: spec.network,
            limits: spec.limits,
            execute_role: spec.execute_role,
            updated_at: r.updated_at,
        })
    }
}
