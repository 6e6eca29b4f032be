//! The rows of `schedules`: the definition kept whole in one JSON column, the state the
//! job searches by in columns beside it.

use super::corrupt;
use baton_core::StoreError;
use baton_core::model::{PendingFire, Schedule, ScheduleSpec, ScheduleState};
use chrono::{DateTime, Utc};
use sqlx::types::Json;
use uuid::Uuid;

/// Expands to the columns of `schedules`, in the order its row type reads them.
macro_rules! schedule_columns {
    () => {
        "tenant_id, id, spec, state, paused_reason, next_fire_ms, pending, last_fire_at, \
         last_run_id, fires, skipped, owner, version, created_at, updated_at"
    };
}
pub(crate) use schedule_columns;

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct ScheduleRow {
    pub tenant_id: Uuid,
    pub id: Uuid,
    pub spec: Json<serde_json::Value>,
    pub state: String,
    pub paused_reason: Option<String>,
    pub next_fire_ms: Option<i64>,
    pub pending: Option<Json<serde_json::Value>>,
    pub last_fire_at: Option<DateTime<Utc>>,
    pub last_run_id: Option<Uuid>,
    pub fires: i64,
    pub skipped: i64,
    pub owner: String,
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl TryFrom<ScheduleRow> for Schedule {
    type Error = StoreError;

    fn try_from(r: ScheduleRow) -> Result<Self, StoreError> {
        let id = r.id;
        let spec: ScheduleSpec = serde_json::from_value(r.spec.0)
            .map_err(|e| corrupt(format!("schedule {id} has an unreadable definition: {e}")))?;
        let state = ScheduleState::parse(&r.state).ok_or_else(|| {
            corrupt(format!(
                "schedule {id} is in an unknown state {:?}",
                r.state
            ))
        })?;
        let pending: Option<PendingFire> = r
            .pending
            .map(|p| serde_json::from_value(p.0))
            .transpose()
            .map_err(|e| corrupt(format!("schedule {id} has an unreadable pending fire: {e}")))?;
        let next_fire_at = r
            .next_fire_ms
            .map(|ms| {
                DateTime::from_timestamp_millis(ms)
                    .ok_or_else(|| corrupt(format!("schedule {id} has a next fire time of {ms}")))
            })
            .transpose()?;
        Ok(Schedule {
            id: id.into(),
            tenant: r.tenant_id.into(),
            spec,
            state,
            paused_reason: r.paused_reason,
            next_fire_at,
            upcoming: Vec::new(),
            pending,
            last_fire_at: r.last_fire_at,
            last_run_id: r.last_run_id.map(Into::into),
            fires: u64::try_from(r.fires).unwrap_or(0),
            skipped: u64::try_from(r.skipped).unwrap_or(0),
            owner: r.owner,
            version: r.version,
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}
