//! Row types shared by both adapters and their mapping to the domain model. Rows hold
//! only database-neutral types (UUIDs, strings, integers, JSON, timestamps) so one
//! `#[derive(FromRow)]` serves Postgres and SQLite; nothing here runs a query.

use crate::backend::Backend;
use crate::query::Query;
use baton_core::model::{
    Agent, AgentLimits, ApiKey, Message, ProviderSpec, Receipt, RunStatus, RunSummary, Tenant, Tool,
};
use baton_core::model::{ApiKeyRecord, SecretMeta};
use baton_core::ports::{IdempotencyRecord, SealedSecret};
use baton_core::{Role, StoreError};
use baton_events::{Envelope, ErrorInfo, EventMeta, MessageRole, ToolId};
use chrono::{DateTime, Utc};
use sqlx::types::Json;
use uuid::Uuid;

/// Expands to the columns of `runs`, in the order every adapter selects them.
macro_rules! run_columns {
    () => {
        "id, tenant_id, agent_id, agent_version, title, status, version, message_count, \
         turn_count, cancel_requested, pending_actions, last_error, created_at, updated_at"
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
            pending_actions: r.pending_actions,
            last_error: r.last_error.map(|j| j.0),
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

/// Binds `s` as the next 14 parameters of `q`, in `run_columns!()` order.
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

/// Expands to the columns of `agents`, in the order its row type reads them.
macro_rules! agent_columns {
    () => {
        "tenant_id, id, name, instructions, provider, tools, limits, version, created_at, \
         updated_at"
    };
}
pub(crate) use agent_columns;

/// Expands to the columns of `agent_versions` as an [`AgentRow`] reads them.
macro_rules! agent_version_columns {
    () => {
        "tenant_id, agent_id AS id, name, instructions, provider, tools, limits, version, \
         created_at, updated_at"
    };
}
pub(crate) use agent_version_columns;

/// A row of `agents` or `agent_versions`.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct AgentRow {
    pub tenant_id: Uuid,
    pub id: Uuid,
    pub name: String,
    pub instructions: String,
    pub provider: Json<serde_json::Value>,
    pub tools: Json<serde_json::Value>,
    pub limits: Json<serde_json::Value>,
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl TryFrom<AgentRow> for Agent {
    type Error = StoreError;

    fn try_from(r: AgentRow) -> Result<Self, StoreError> {
        let unreadable = |what: &str, e: serde_json::Error| {
            corrupt(format!(
                "agent {} version {} has unreadable {what}: {e}",
                r.id, r.version
            ))
        };
        let provider: ProviderSpec =
            serde_json::from_value(r.provider.0).map_err(|e| unreadable("provider", e))?;
        let tools: Vec<ToolId> =
            serde_json::from_value(r.tools.0).map_err(|e| unreadable("tools", e))?;
        let limits: AgentLimits =
            serde_json::from_value(r.limits.0).map_err(|e| unreadable("limits", e))?;
        Ok(Agent {
            id: r.id.into(),
            tenant: r.tenant_id.into(),
            name: r.name,
            instructions: r.instructions,
            provider,
            tools,
            limits,
            version: r.version,
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

/// An agent's JSON columns as stored: `provider`, `tools` and `limits`.
pub(crate) struct AgentJson {
    pub provider: serde_json::Value,
    pub tools: serde_json::Value,
    pub limits: serde_json::Value,
}

impl AgentJson {
    pub fn of(agent: &Agent) -> Result<Self, StoreError> {
        Ok(AgentJson {
            provider: to_json("provider", &agent.provider)?,
            tools: to_json("tools", &agent.tools)?,
            limits: to_json("limits", &agent.limits)?,
        })
    }
}

/// Expands to the columns of `tools`, in the order its row type reads them.
macro_rules! tool_columns {
    () => {
        "tenant_id, id, name, definition, created_at, updated_at"
    };
}
pub(crate) use tool_columns;

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct ToolRow {
    pub tenant_id: Uuid,
    pub id: Uuid,
    pub name: String,
    pub definition: Json<serde_json::Value>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl TryFrom<ToolRow> for Tool {
    type Error = StoreError;

    /// The definition holds the whole tool but its tenant; the key and timestamp
    /// columns are authoritative.
    fn try_from(r: ToolRow) -> Result<Self, StoreError> {
        let tool: Tool = serde_json::from_value(r.definition.0)
            .map_err(|e| corrupt(format!("tool {} has an unreadable definition: {e}", r.id)))?;
        Ok(Tool {
            id: r.id.into(),
            tenant: r.tenant_id.into(),
            name: r.name,
            created_at: r.created_at,
            updated_at: r.updated_at,
            ..tool
        })
    }
}

/// A tool's `definition` column: the whole tool (its tenant is not serialized).
pub(crate) fn tool_json(tool: &Tool) -> Result<serde_json::Value, StoreError> {
    to_json("tool", tool)
}

/// Expands to the metadata columns of `secrets`, in the order [`SecretMetaRow`] reads them.
macro_rules! secret_meta_columns {
    () => {
        "name, key_id, created_at, updated_at"
    };
}
pub(crate) use secret_meta_columns;

/// A secret's metadata: every column of `secrets` but its tenant and ciphertext.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct SecretMetaRow {
    pub name: String,
    pub key_id: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<SecretMetaRow> for SecretMeta {
    fn from(r: SecretMetaRow) -> Self {
        SecretMeta {
            name: r.name,
            key_id: r.key_id,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

/// A row of `secrets` without its tenant: the metadata and the sealed value.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct SecretRow {
    #[sqlx(flatten)]
    pub meta: SecretMetaRow,
    pub ciphertext: Vec<u8>,
}

impl From<SecretRow> for SealedSecret {
    fn from(r: SecretRow) -> Self {
        SealedSecret {
            meta: r.meta.into(),
            ciphertext: r.ciphertext,
        }
    }
}

/// Expands to the columns of `receipts` a [`ReceiptRow`] reads.
macro_rules! receipt_columns {
    () => {
        "run_id, id, body"
    };
}
pub(crate) use receipt_columns;

/// A row of the receipts projection; `body` holds the whole [`Receipt`].
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct ReceiptRow {
    pub run_id: Uuid,
    pub id: Uuid,
    pub body: Json<serde_json::Value>,
}

impl TryFrom<ReceiptRow> for Receipt {
    type Error = StoreError;

    fn try_from(r: ReceiptRow) -> Result<Self, StoreError> {
        serde_json::from_value(r.body.0).map_err(|e| {
            corrupt(format!(
                "receipt {} of run {} is unreadable: {e}",
                r.id, r.run_id
            ))
        })
    }
}

/// A receipt's `body` column.
pub(crate) fn receipt_json(receipt: &Receipt) -> Result<serde_json::Value, StoreError> {
    to_json("receipt", receipt)
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

/// Maps every row of a result, failing on the first that does not fit the model.
pub(crate) fn map_all<R, T>(rows: Vec<R>) -> Result<Vec<T>, StoreError>
where
    T: TryFrom<R, Error = StoreError>,
{
    rows.into_iter().map(T::try_from).collect()
}

/// A value for a JSON column.
fn to_json<T: serde::Serialize>(what: &str, value: &T) -> Result<serde_json::Value, StoreError> {
    serde_json::to_value(value)
        .map_err(|e| StoreError::Other(format!("{what} does not serialize: {e}")))
}

/// A row this build cannot read: written by a newer version, or damaged.
fn corrupt(msg: String) -> StoreError {
    StoreError::Unreadable(msg)
}

/// Expands to the metadata columns of `checkpoints`, in the order [`CheckpointMetaRow`]
/// reads them.
macro_rules! checkpoint_columns {
    () => {
        "id, through_version, key_id, size, sha256, created_at"
    };
}
pub(crate) use checkpoint_columns;

/// A checkpoint's metadata: every column of `checkpoints` but its tenant, run and
/// ciphertext.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct CheckpointMetaRow {
    pub id: Uuid,
    pub through_version: i64,
    pub key_id: String,
    pub size: i64,
    pub sha256: String,
    pub created_at: DateTime<Utc>,
}

impl TryFrom<CheckpointMetaRow> for baton_core::model::CheckpointMeta {
    type Error = StoreError;

    fn try_from(r: CheckpointMetaRow) -> Result<Self, StoreError> {
        Ok(baton_core::model::CheckpointMeta {
            id: r.id.into(),
            through_version: r.through_version,
            key_id: r.key_id,
            size: u64::try_from(r.size)
                .map_err(|_| corrupt(format!("checkpoint {} has size {}", r.id, r.size)))?,
            sha256: r.sha256,
            created_at: r.created_at,
        })
    }
}

/// A row of `checkpoints` without its tenant and run: the metadata and the sealed
/// snapshot.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct CheckpointRow {
    #[sqlx(flatten)]
    pub meta: CheckpointMetaRow,
    pub ciphertext: Vec<u8>,
}

impl TryFrom<CheckpointRow> for baton_core::ports::StoredCheckpoint {
    type Error = StoreError;

    fn try_from(r: CheckpointRow) -> Result<Self, StoreError> {
        Ok(baton_core::ports::StoredCheckpoint {
            meta: r.meta.try_into()?,
            ciphertext: r.ciphertext,
        })
    }
}

/// Expands to the columns of `users` a [`UserRow`] reads (never the password hash).
macro_rules! user_columns {
    () => {
        "id, email, created_at"
    };
}
pub(crate) use user_columns;

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct UserRow {
    pub id: Uuid,
    pub email: String,
    pub created_at: DateTime<Utc>,
}

impl From<UserRow> for baton_core::model::User {
    fn from(r: UserRow) -> Self {
        baton_core::model::User {
            id: r.id,
            email: r.email,
            created_at: r.created_at,
        }
    }
}

/// A row of `users` with its password hash, for logging in.
#[derive(sqlx::FromRow)]
pub(crate) struct UserCredentialsRow {
    #[sqlx(flatten)]
    pub user: UserRow,
    pub password_hash: String,
}

impl From<UserCredentialsRow> for baton_core::ports::UserCredentials {
    fn from(r: UserCredentialsRow) -> Self {
        baton_core::ports::UserCredentials {
            user: r.user.into(),
            password_hash: r.password_hash,
        }
    }
}

/// Expands to the columns of `memberships m JOIN users u` a [`MemberRow`] reads.
macro_rules! member_columns {
    () => {
        "m.user_id, u.email, m.role, m.created_at"
    };
}
pub(crate) use member_columns;

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct MemberRow {
    pub user_id: Uuid,
    pub email: String,
    pub role: String,
    pub created_at: DateTime<Utc>,
}

impl TryFrom<MemberRow> for baton_core::model::Member {
    type Error = StoreError;

    fn try_from(r: MemberRow) -> Result<Self, StoreError> {
        let role = Role::parse(&r.role).ok_or_else(|| {
            corrupt(format!(
                "membership of user {} has unknown role {:?}",
                r.user_id, r.role
            ))
        })?;
        Ok(baton_core::model::Member {
            user_id: r.user_id,
            email: r.email,
            role,
            created_at: r.created_at,
        })
    }
}

/// Expands to the columns of `memberships m JOIN tenants t` a [`TenantRoleRow`] reads.
macro_rules! tenant_role_columns {
    () => {
        "m.tenant_id, t.name, m.role"
    };
}
pub(crate) use tenant_role_columns;

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct TenantRoleRow {
    pub tenant_id: Uuid,
    pub name: String,
    pub role: String,
}

impl TryFrom<TenantRoleRow> for baton_core::model::TenantRole {
    type Error = StoreError;

    fn try_from(r: TenantRoleRow) -> Result<Self, StoreError> {
        let role = Role::parse(&r.role).ok_or_else(|| {
            corrupt(format!(
                "membership in tenant {} has unknown role {:?}",
                r.tenant_id, r.role
            ))
        })?;
        Ok(baton_core::model::TenantRole {
            tenant_id: r.tenant_id.into(),
            name: r.name,
            role,
        })
    }
}

/// Expands to the columns of `sessions` a [`SessionRow`] reads (never the token hash).
macro_rules! session_columns {
    () => {
        "id, user_id, created_at, expires_at, revoked_at"
    };
}
pub(crate) use session_columns;

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct SessionRow {
    pub id: Uuid,
    pub user_id: Uuid,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
}

impl From<SessionRow> for baton_core::model::Session {
    fn from(r: SessionRow) -> Self {
        baton_core::model::Session {
            id: r.id,
            user: r.user_id,
            created_at: r.created_at,
            expires_at: r.expires_at,
            revoked_at: r.revoked_at,
        }
    }
}

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
