//! The rows of `webhooks`, `webhook_deliveries` and `webhook_attempts`.

use super::corrupt;
use baton_core::StoreError;
use baton_core::model::{
    Attempt, Delivery, DeliveryState, Webhook, WebhookEvent, WebhookSecrets, WebhookSpec,
    WebhookState,
};
use chrono::{DateTime, Utc};
use sqlx::types::Json;
use uuid::Uuid;

/// Expands to the columns of `webhooks`, in the order its row type reads them.
macro_rules! webhook_columns {
    () => {
        "tenant_id, id, spec, state, disabled_reason, consecutive_failures, secret, \
         previous_secret, previous_secret_expires_at, version, created_at, updated_at"
    };
}
pub(crate) use webhook_columns;

/// Expands to the columns of `webhook_deliveries`, in the order its row type reads them.
macro_rules! delivery_columns {
    () => {
        "tenant_id, webhook_id, id, event_type, run_id, payload, state, attempts, \
         next_attempt_ms, last_status, last_error, created_at, updated_at"
    };
}
pub(crate) use delivery_columns;

/// Expands to the columns of `webhook_attempts`, in the order its row type reads them.
macro_rules! attempt_columns {
    () => {
        "attempt, at, status, error, excerpt, duration_ms"
    };
}
pub(crate) use attempt_columns;

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct WebhookRow {
    pub tenant_id: Uuid,
    pub id: Uuid,
    pub spec: Json<serde_json::Value>,
    pub state: String,
    pub disabled_reason: Option<String>,
    pub consecutive_failures: i64,
    pub secret: Vec<u8>,
    pub previous_secret: Option<Vec<u8>>,
    pub previous_secret_expires_at: Option<DateTime<Utc>>,
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl TryFrom<WebhookRow> for Webhook {
    type Error = StoreError;

    fn try_from(r: WebhookRow) -> Result<Self, StoreError> {
        let id = r.id;
        let spec: WebhookSpec = serde_json::from_value(r.spec.0)
            .map_err(|e| corrupt(format!("webhook {id} has an unreadable definition: {e}")))?;
        let state = WebhookState::parse(&r.state)
            .ok_or_else(|| corrupt(format!("webhook {id} is in an unknown state {:?}", r.state)))?;
        Ok(Webhook {
            id: id.into(),
            tenant: r.tenant_id.into(),
            spec,
            state,
            disabled_reason: r.disabled_reason,
            consecutive_failures: u32::try_from(r.consecutive_failures).unwrap_or(u32::MAX),
            previous_secret_expires_at: r.previous_secret_expires_at,
            secrets: WebhookSecrets {
                current: r.secret,
                previous: r.previous_secret,
            },
            version: r.version,
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct DeliveryRow {
    pub tenant_id: Uuid,
    pub webhook_id: Uuid,
    pub id: Uuid,
    pub event_type: String,
    pub run_id: Option<Uuid>,
    pub payload: Json<serde_json::Value>,
    pub state: String,
    pub attempts: i64,
    pub next_attempt_ms: Option<i64>,
    pub last_status: Option<i64>,
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl TryFrom<DeliveryRow> for Delivery {
    type Error = StoreError;

    fn try_from(r: DeliveryRow) -> Result<Self, StoreError> {
        let id = r.id;
        let event_type = WebhookEvent::parse(&r.event_type).ok_or_else(|| {
            corrupt(format!(
                "delivery {id} is of an unknown type {:?}",
                r.event_type
            ))
        })?;
        let state = DeliveryState::parse(&r.state).ok_or_else(|| {
            corrupt(format!(
                "delivery {id} is in an unknown state {:?}",
                r.state
            ))
        })?;
        Ok(Delivery {
            id,
            webhook_id: r.webhook_id.into(),
            tenant: r.tenant_id.into(),
            event_type,
            run_id: r.run_id.map(Into::into),
            state,
            attempts: u32::try_from(r.attempts).unwrap_or(u32::MAX),
            next_attempt_at: r
                .next_attempt_ms
                .filter(|_| state == DeliveryState::Pending)
                .and_then(DateTime::from_timestamp_millis),
            last_status: r.last_status.and_then(|s| u16::try_from(s).ok()),
            last_error: r.last_error,
            payload: r.payload.0,
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct AttemptRow {
    pub attempt: i64,
    pub at: DateTime<Utc>,
    pub status: Option<i64>,
    pub error: Option<String>,
    pub excerpt: Option<String>,
    pub duration_ms: i64,
}

impl TryFrom<AttemptRow> for Attempt {
    type Error = StoreError;

    fn try_from(r: AttemptRow) -> Result<Self, StoreError> {
        Ok(Attempt {
            attempt: u32::try_from(r.attempt).unwrap_or(u32::MAX),
            at: r.at,
            status: r.status.and_then(|s| u16::try_from(s).ok()),
            error: r.error,
            excerpt: r.excerpt,
            duration_ms: u64::try_from(r.duration_ms).unwrap_or(0),
        })
    }
}
