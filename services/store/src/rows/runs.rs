//! The rows of a run's stream and its projections as `RunReader` and the append read and
//! write them: `runs` (with [`bind_run`], its columns as parameters), `events`,
//! `messages` and `idempotency`.

use super::corrupt;
use crate::backend::Backend;
use crate::query::Query;
use baton_core::StoreError;
use baton_core::model::{Message, RunStatus, RunSummary, TurnEnd};
use baton_core::ports::{IdempotencyRecord, fold_title};
use baton_events::{Envelope, ErrorInfo, EventMeta, MessageRole, Metadata};
use chrono::{DateTime, Utc};
use sqlx::types::Json;
use uuid::Uuid;

/// Expands to the columns of `runs`, in the order every adapter selects them.
macro_rules! run_columns {
    () => {
        "id, tenant_id, agent_id, agent_version, title, status, version, message_count, \
         turn_count, cancel_requested, pending_actions, last_error, created_at, updated_at, \
         metadata, last_turn_outcome, failed_turns, queued_messages, interrupt_requested, \
         parent_run_id"
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
    pub pending_actions: i64,
    pub last_error: Option<Json<ErrorInfo>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub metadata: Json<Metadata>,
    pub last_turn_outcome: Option<String>,
    pub failed_turns: i64,
    pub queued_messages: i64,
    pub interrupt_requested: bool,
    pub parent_run_id: Option<Uuid>,
}

impl TryFrom<RunRow> for RunSummary {
    type Error = StoreError;

    fn try_from(r: RunRow) -> Result<Self, StoreError> {
        let status = RunStatus::parse(&r.status)
            .ok_or_else(|| corrupt(format!("run {} has unknown status {:?}", r.id, r.status)))?;
        let last_turn_outcome = r
            .last_turn_outcome
            .map(|o| {
                TurnEnd::parse(&o)
                    .ok_or_else(|| corrupt(format!("run {} has unknown turn outcome {o:?}", r.id)))
            })
            .transpose()?;
        Ok(RunSummary {
            id: r.id.into(),
            tenant: r.tenant_id.into(),
            agent_id: r.agent_id.into(),
            agent_version: r.agent_version,
            title: r.title,
            metadata: r.metadata.0,
            status,
            version: r.version,
            message_count: r.message_count,
            turn_count: r.turn_count,
            cancel_requested: r.cancel_requested,
            pending_actions: r.pending_actions,
            last_error: r.last_error.map(|j| j.0),
            last_turn_outcome,
            failed_turns: r.failed_turns,
            queued_messages: r.queued_messages,
            interrupt_requested: r.interrupt_requested,
            parent_run_id: r.parent_run_id.map(Into::into),
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

/// Binds `s` as the next 21 parameters of `q`: the 20 of `run_columns!()` in order, then
/// `title_folded` (the title as the search compares it, written never read).
pub(crate) fn bind_run<B: Backend>(q: Query<B>, s: &RunSummary) -> Query<B> {
    q.bind(s.id.as_uuid())
        .bind(s.tenant.as_uuid())
        .bind(s.agent_id.as_uuid())
        .bind(s.agent_version)
        .bind(s.title.as_deref())
        .bind(s.status.as_str())
        .bind(s.version)
        .bind(s.message_count)
        .bind(s.turn_count)
        .bind(s.cancel_requested)
        .bind(s.pending_actions)
        .bind(s.last_error.as_ref().map(Json))
        .bind(s.created_at)
        .bind(s.updated_at)
        .bind(Json(&s.metadata))
        .bind(s.last_turn_outcome.as_ref().map(TurnEnd::as_str))
        .bind(s.failed_turns)
        .bind(s.queued_messages)
        .bind(s.interrupt_requested)
        .bind(s.parent_run_id.map(|p| p.as_uuid()))
        .bind(s.title.as_deref().map(fold_title))
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

impl TryFrom<IdempotencyRow> for IdempotencyRecord {
    type Error = StoreError;

    fn try_from(r: IdempotencyRow) -> Result<Self, StoreError> {
        Ok(IdempotencyRecord {
            request_id: r.request_id,
            command: r.command,
            fingerprint: r.fingerprint,
            response: r.response.0,
        })
    }
}

/// A status and how many rows have it.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct StatusCountRow {
    pub status: String,
    pub n: i64,
}

impl TryFrom<StatusCountRow> for (RunStatus, u64) {
    type Error = StoreError;

    fn try_from(r: StatusCountRow) -> Result<Self, StoreError> {
        let status = RunStatus::parse(&r.status)
            .ok_or_else(|| corrupt(format!("runs have unknown status {:?}", r.status)))?;
        Ok((status, u64::try_from(r.n).unwrap_or(0)))
    }
}

/// A count.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct CountRow {
    pub n: i64,
}

impl TryFrom<CountRow> for u64 {
    type Error = StoreError;

    fn try_from(r: CountRow) -> Result<Self, StoreError> {
        Ok(u64::try_from(r.n).unwrap_or(0))
    }
}
