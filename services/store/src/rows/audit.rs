//! The rows of `audit_log`.

use super::corrupt;
use baton_core::StoreError;
use chrono::{DateTime, Utc};
use sqlx::types::Json;
use uuid::Uuid;

/// Expands to the columns of `audit_log` an [`AuditRow`] reads, in the order an entry is
/// inserted.
macro_rules! audit_columns {
    () => {
        "id, at, actor, source, action, target, details"
    };
}
pub(crate) use audit_columns;

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct AuditRow {
    pub id: Uuid,
    pub at: DateTime<Utc>,
    pub actor: String,
    pub source: Option<String>,
    pub action: String,
    pub target: String,
    pub details: Json<serde_json::Value>,
}

impl TryFrom<AuditRow> for baton_core::model::AuditEntry {
    type Error = StoreError;

    fn try_from(r: AuditRow) -> Result<Self, StoreError> {
        let action = baton_core::model::AuditAction::parse(&r.action).ok_or_else(|| {
            corrupt(format!(
                "audit entry {} has unknown action {:?}",
                r.id, r.action
            ))
        })?;
        let source = r
            .source
            .map(|s| {
                s.parse()
                    .map_err(|_| corrupt(format!("audit entry {} has a malformed source", r.id)))
            })
            .transpose()?;
        Ok(baton_core::model::AuditEntry {
            id: r.id,
            at: r.at,
            actor: r.actor,
            source,
            action,
            target: r.target,
            details: r.details.0,
        })
    }
}
