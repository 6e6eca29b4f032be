//! Row types shared by both adapters and their mapping to the domain model. Rows hold
//! only database-neutral types (UUIDs, strings, integers, JSON, timestamps) so one
//! `#[derive(FromRow)]` serves Postgres and SQLite; nothing here runs a query.

use baton_core::model::{Agent, ApiKey, Message, ProviderSpec, RunStatus, RunSummary, Tenant};
use baton_core::ports::IdempotencyRecord;
use baton_core::{Role, StoreError};
use baton_events::{Envelope, ErrorInfo, EventMeta, MessageRole};
use chrono::{DateTime, Utc};
use sqlx::types::Json;
use uuid::Uuid;

/// Expands to the columns of `runs`, in the order every adapter selects them.
macro_rules! run_columns {
    () => {
        "id, tenant_id, agent_id, agent_version, title, status, version, message_count, \
         turn_count, cancel_requested, last_error, created_at, updated_at"
    };
}
pub(crate) use run_columns;

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct RunRow {
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub agent_id: Uuid,
    pub agent_version: i64,
    pub title: Option<String>,
    pub status: String,
    pub version: i64,
    pub message_count: i64,
    pub turn_count: i64,
    pub cancel_requested: bool,
    pub last_error: Option<Json<ErrorInfo>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl TryFrom<RunRow> for RunSummary {
    type Error = StoreError;

    fn try_from(r: RunRow) -> Result<Self, StoreError> {
        let status = RunStatus::parse(&r.status)
            .ok_or_else(|| corrupt(format!("run {} has unknown status {:?}", r.id, r.status)))?;
        Ok(RunSummary {
            id: r.id.into(),
            tenant: r.tenant_id.into(),
            agent_id: r.agent_id.into(),
            agent_version: r.agent_version,
            title: r.title,
            status,
            version: r.version,
            message_count: r.message_count,
            turn_count: r.turn_count,
            cancel_requested: r.cancel_requested,
            last_error: r.last_error.map(|j| j.0),
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

/// Expands to the columns of `events`, in the order every adapter selects them.
macro_rules! event_columns {
    () => {
        "position, stream_id, version, id, type, schema, data, meta, recorded_at"
    };
}
pub(crate) use event_columns;

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct EventRow {
    pub position: i64,
    pub stream_id: Uuid,
    pub version: i64,
    pub id: Uuid,
    #[sqlx(rename = "type")]
    pub event_type: String,
    pub schema: i32,
    pub data: Json<serde_json::Value>,
    pub meta: Json<EventMeta>,
    pub recorded_at: DateTime<Utc>,
}

impl TryFrom<EventRow> for Envelope {
    type Error = StoreError;

    /// Keeps the payload raw: an event of a type or schema this build does not know
    /// still reads back, and [`Envelope::decode`] reports it as unknown.
    fn try_from(r: EventRow) -> Result<Self, StoreError> {
        let schema = u32::try_from(r.schema)
            .map_err(|_| corrupt(format!("event {} has schema {}", r.id, r.schema)))?;
        Ok(Envelope {
            id: r.id.into(),
            stream: r.stream_id.into(),
            version: r.version,
            position: r.position,
            event_type: r.event_type,
            schema,
            data: r.data.0,
            meta: r.meta.0,
            recorded_at: r.recorded_at,
        })
    }
}

/// Expands to the columns of the table, in the order its row type reads them.
macro_rules! message_columns {
    () => {
        "id, run_id, seq, role, content, version, created_at"
    };
}
pub(crate) use message_columns;

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct MessageRow {
    pub id: Uuid,
    pub run_id: Uuid,
    pub seq: i64,
    pub role: String,
    pub content: String,
    pub version: i64,
    pub created_at: DateTime<Utc>,
}

impl TryFrom<MessageRow> for Message {
    type Error = StoreError;

    fn try_from(r: MessageRow) -> Result<Self, StoreError> {
        let role = MessageRole::parse(&r.role)
            .ok_or_else(|| corrupt(format!("message {} has unknown role {:?}", r.id, r.role)))?;
        Ok(Message {
            id: r.id.into(),
            run_id: r.run_id.into(),
            seq: r.seq,
            role,
            content: r.content,
            version: r.version,
            created_at: r.created_at,
        })
    }
}

/// Expands to the columns of the table, in the order its row type reads them.
macro_rules! idempotency_columns {
    () => {
        "request_id, command, fingerprint, response"
    };
}
pub(crate) use idempotency_columns;

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct IdempotencyRow {
    pub request_id: String,
    pub command: String,
    pub fingerprint: String,
    pub response: Json<serde_json::Value>,
}

impl From<IdempotencyRow> for IdempotencyRecord {
    fn from(r: IdempotencyRow) -> Self {
        IdempotencyRecord {
            request_id: r.request_id,
            command: r.command,
            fingerprint: r.fingerprint,
            response: r.response.0,
        }
    }
}

/// Expands to the columns of the table, in the order its row type reads them.
macro_rules! agent_columns {
    () => {
        "tenant_id, id, name, instructions, provider, version, created_at, updated_at"
    };
}
pub(crate) use agent_columns;

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct AgentRow {
    pub tenant_id: Uuid,
    pub id: Uuid,
    pub name: String,
    pub instructions: String,
    pub provider: Json<serde_json::Value>,
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl TryFrom<AgentRow> for Agent {
    type Error = StoreError;

    fn try_from(r: AgentRow) -> Result<Self, StoreError> {
        let provider: ProviderSpec = serde_json::from_value(r.provider.0)
            .map_err(|e| corrupt(format!("agent {} has an unreadable provider: {e}", r.id)))?;
        Ok(Agent {
            id: r.id.into(),
            tenant: r.tenant_id.into(),
            name: r.name,
            instructions: r.instructions,
            provider,
            version: r.version,
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

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

impl From<TenantRow> for Tenant {
    fn from(r: TenantRow) -> Self {
        Tenant {
            id: r.id.into(),
            name: r.name,
            created_at: r.created_at,
        }
    }
}

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

/// Maps every row of a result, failing on the first that does not fit the model.
pub(crate) fn map_all<R, T>(rows: Vec<R>) -> Result<Vec<T>, StoreError>
where
    T: TryFrom<R, Error = StoreError>,
{
    rows.into_iter().map(T::try_from).collect()
}

/// The agent's provider as stored in its JSON column.
pub(crate) fn provider_json(agent: &Agent) -> Result<serde_json::Value, StoreError> {
    serde_json::to_value(&agent.provider)
        .map_err(|e| StoreError::Other(format!("provider does not serialize: {e}")))
}

/// A row this build cannot read: written by a newer version, or damaged.
fn corrupt(msg: String) -> StoreError {
    StoreError::Unreadable(msg)
}
