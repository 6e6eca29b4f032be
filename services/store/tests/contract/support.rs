//! Fixtures of the contract suite: the backends (a fresh Postgres database or SQLite file
//! per test), raw-row access the ports do not offer, and builders for events and requests.

use async_trait::async_trait;
use baton_core::model::{
    Agent, AgentLimits, ProviderSpec, Receipt, RunSummary, ScriptedReply, Tenant, Tool,
    ToolKindSpec,
};
use baton_core::model::{AuditAction, AuditEntry};
use baton_core::ports::{
    AgentStore, ApiKeyStore, AppendOutcome, AppendRequest, Clock, EventLog, IdempotencyRecord,
    RunReader, SecretStore, SystemClock, TenantStore, ToolStore,
};
use baton_events::{
    AgentId, Decoded, Envelope, EventMeta, MessageAppended, MessageId, MessageRole, NewEvent,
    ReceiptId, RunCreated, RunEvent, RunId, TenantId, ToolEffect, ToolId, TurnRequested,
    TurnStarted,
};
use baton_store::{PgOptions, PgStore, PoolKind, Scope, SqliteStore, migrate};
use baton_testkit::{TestDatabase, TestSqlite};
use chrono::{DateTime, Utc};
use serde_json::Value;

/// What the contract suite needs of an adapter.
pub trait Store:
    RunReader
    + EventLog
    + baton_core::ports::LeaseStore
    + AgentStore
    + ToolStore
    + SecretStore
    + baton_core::ports::CheckpointStore
    + TenantStore
    + ApiKeyStore
    + baton_core::ports::AuditStore
    + baton_core::ports::RetentionStore
    + baton_core::ports::ScheduleStore
    + baton_core::ports::WebhookStore
    + baton_core::ports::McpServerStore
    + baton_core::ports::WorkspaceStore
    + baton_core::ports::StreamTicketStore
    + Raw
    + Clone
    + 'static
{
}
impl<
    T: RunReader
        + EventLog
        + baton_core::ports::LeaseStore
        + AgentStore
        + ToolStore
        + SecretStore
        + baton_core::ports::CheckpointStore
        + TenantStore
        + ApiKeyStore
        + baton_core::ports::AuditStore
        + baton_core::ports::RetentionStore
        + baton_core::ports::ScheduleStore
        + baton_core::ports::WebhookStore
        + baton_core::ports::McpServerStore
        + baton_core::ports::WorkspaceStore
        + baton_core::ports::StreamTicketStore
        + Raw
        + Clone
        + 'static,
> Store for T
{
}

/// Writes the ports do not offer: rows as another build would have stored them.
#[async_trait]
pub trait Raw: Send + Sync {
    /// Appends an event of any type and schema to a run's stream, as a newer build would
    /// (bumping the run's version), without going through `append`.
    async fn insert_raw_event(&self, tenant: TenantId, run: RunId, raw: RawEvent);

    /// Replaces the stored body of a receipt, as a newer build might have written it.
    async fn overwrite_receipt_body(
        &self,
        tenant: TenantId,
        run: RunId,
        receipt: ReceiptId,
        body: Value,
    );

    /// Tries to rewrite and then to delete the tenant's audit entries, as a statement of
    /// the application could: the rows each changed, or the error that refused it.
    async fn tamper_with_audit(&self, tenant: TenantId) -> [Result<u64, sqlx::Error>; 2];

    /// The rows of `run` in each table that holds any, read from the tables themselves.
    async fn rows_of_run(&self, tenant: TenantId, run: RunId) -> Vec<(&'static str, i64)>;

    /// Runs `sql` (`$1` the tenant, `$2` the id) as a statement of the application
    /// could, in the tenant's scope: rows as another build, or a dead replica, left them.
    /// The rows it changed.
    async fn raw_write(&self, tenant: TenantId, sql: &'static str, id: uuid::Uuid) -> u64;
}

/// Each table that holds rows of a run, with the count of them (`$1` the run).
const ROWS_OF_RUN: [(&str, &str); 7] = [
    ("runs", "SELECT COUNT(*) FROM runs WHERE id = $1"),
    ("events", "SELECT COUNT(*) FROM events WHERE stream_id = $1"),
    (
        "messages",
        "SELECT COUNT(*) FROM messages WHERE run_id = $1",
    ),
    (
        "receipts",
        "SELECT COUNT(*) FROM receipts WHERE run_id = $1",
    ),
    (
        "checkpoints",
        "SELECT COUNT(*) FROM checkpoints WHERE run_id = $1",
    ),
    (
        "idempotency",
        "SELECT COUNT(*) FROM idempotency WHERE run_id = $1",
    ),
    (
        "workspace_files",
        "SELECT COUNT(*) FROM workspace_files WHERE run_id = $1",
    ),
];

macro_rules! rows_of_run {
    ($conn:expr, $run:expr) => {{
        let mut counts = Vec::new();
        for (table, sql) in ROWS_OF_RUN {
            let (n,): (i64,) = sqlx::query_as(sql)
                .bind($run.as_uuid())
                .fetch_one(&mut *$conn)
                .await
                .expect("count rows");
            counts.push((table, n));
        }
        counts
    }};
}

/// The statements of [`Raw::tamper_with_audit`].
const TAMPER_AUDIT: [&str; 2] = [
    "UPDATE audit_log SET actor = 'someone else' WHERE tenant_id = $1",
    "DELETE FROM audit_log WHERE tenant_id = $1",
];

pub struct RawEvent {
    pub version: i64,
    pub event_type: &'static str,
    pub schema: i32,
    pub data: Value,
    pub at: DateTime<Utc>,
}

macro_rules! raw_insert {
    ($pool:expr, $tenant:expr, $run:expr, $raw:expr) => {{
        let meta = serde_json::to_value(EventMeta::new($tenant)).expect("meta");
        sqlx::query(
            "INSERT INTO events \
             (tenant_id, stream_id, version, id, type, schema, data, meta, recorded_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind($tenant.as_uuid())
        .bind($run.as_uuid())
        .bind($raw.version)
        .bind(uuid::Uuid::now_v7())
        .bind($raw.event_type)
        .bind($raw.schema)
        .bind(sqlx::types::Json(&$raw.data))
        .bind(sqlx::types::Json(&meta))
        .bind($raw.at)
        .execute($pool)
        .await
        .expect("insert raw event");
        sqlx::query("UPDATE runs SET version = $1 WHERE id = $2 AND tenant_id = $3")
            .bind($raw.version)
            .bind($run.as_uuid())
            .bind($tenant.as_uuid())
            .execute($pool)
            .await
            .expect("bump run version");
    }};
}

macro_rules! raw_receipt_body {
    ($pool:expr, $tenant:expr, $run:expr, $receipt:expr, $body:expr) => {{
        let done = sqlx::query(
            "UPDATE receipts SET body = $1 WHERE tenant_id = $2 AND run_id = $3 AND id = $4",
        )
        .bind(sqlx::types::Json(&$body))
        .bind($tenant.as_uuid())
        .bind($run.as_uuid())
        .bind($receipt.as_uuid())
        .execute($pool)
        .await
        .expect("overwrite receipt body");
        assert_eq!(
            done.rows_affected(),
            1,
            "no receipt {} to overwrite",
            $receipt
        );
    }};
}

/// On Postgres the raw writes go through a transaction like the store's own, scoped to
/// the tenant: row-level security binds them as it binds the ports.
#[async_trait]
impl Raw for PgStore {
    async fn insert_raw_event(&self, tenant: TenantId, run: RunId, raw: RawEvent) {
        let mut tx = scoped(self, tenant).await;
        raw_insert!(&mut *tx, tenant, run, raw);
        tx.commit().await.expect("commit raw event");
    }

    async fn overwrite_receipt_body(
        &self,
        tenant: TenantId,
        run: RunId,
        receipt: ReceiptId,
        body: Value,
    ) {
        let mut tx = scoped(self, tenant).await;
        raw_receipt_body!(&mut *tx, tenant, run, receipt, body);
        tx.commit().await.expect("commit receipt body");
    }

    async fn tamper_with_audit(&self, tenant: TenantId) -> [Result<u64, sqlx::Error>; 2] {
        let mut done = Vec::new();
        for statement in TAMPER_AUDIT {
            let mut tx = scoped(self, tenant).await;
            let changed = sqlx::query(statement)
                .bind(tenant.as_uuid())
                .execute(&mut *tx)
                .await
                .map(|r| r.rows_affected());
            if changed.is_ok() {
                tx.commit().await.expect("commit");
            }
            done.push(changed);
        }
        done.try_into().expect("two results")
    }

    async fn rows_of_run(&self, tenant: TenantId, run: RunId) -> Vec<(&'static str, i64)> {
        let mut tx = scoped(self, tenant).await;
        rows_of_run!(tx, run)
    }

    async fn raw_write(&self, tenant: TenantId, sql: &'static str, id: uuid::Uuid) -> u64 {
        let mut tx = scoped(self, tenant).await;
        let done = sqlx::query(sql)
            .bind(tenant.as_uuid())
            .bind(id)
            .execute(&mut *tx)
            .await
            .expect("raw write");
        tx.commit().await.expect("commit raw write");
        done.rows_affected()
    }
}

async fn scoped(s: &PgStore, tenant: TenantId) -> sqlx::Transaction<'static, sqlx::Postgres> {
    s.transaction(PoolKind::App, Scope::Tenant(tenant))
        .await
        .expect("scoped transaction")
}

#[async_trait]
impl Raw for SqliteStore {
    async fn insert_raw_event(&self, tenant: TenantId, run: RunId, raw: RawEvent) {
        raw_insert!(self.pool(), tenant, run, raw);
    }

    async fn overwrite_receipt_body(
        &self,
        tenant: TenantId,
        run: RunId,
        receipt: ReceiptId,
        body: Value,
    ) {
        raw_receipt_body!(self.pool(), tenant, run, receipt, body);
    }

    async fn tamper_with_audit(&self, tenant: TenantId) -> [Result<u64, sqlx::Error>; 2] {
        let mut done = Vec::new();
        for statement in TAMPER_AUDIT {
            let changed = sqlx::query(statement)
                .bind(tenant.as_uuid())
                .execute(self.pool())
                .await
                .map(|r| r.rows_affected());
            done.push(changed);
        }
        done.try_into().expect("two results")
    }

    async fn rows_of_run(&self, _tenant: TenantId, run: RunId) -> Vec<(&'static str, i64)> {
        let mut conn = self.pool().acquire().await.expect("connection");
        rows_of_run!(conn, run)
    }

    async fn raw_write(&self, tenant: TenantId, sql: &'static str, id: uuid::Uuid) -> u64 {
        sqlx::query(sql)
            .bind(tenant.as_uuid())
            .bind(id)
            .execute(self.pool())
            .await
            .expect("raw write")
            .rows_affected()
    }
}

/// A migrated Postgres store on a database of its own.
pub struct Pg {
    pub store: PgStore,
    db: TestDatabase,
}

pub async fn pg() -> Pg {
    let db = TestDatabase::postgres().await.expect("test database");
    migrate::postgres(db.url()).await.expect("migrate");
    let mut opts = PgOptions::new(db.url());
    opts.app_pool_size = 12;
    let store = PgStore::connect(&opts).await.expect("connect");
    Pg { store, db }
}

impl Pg {
    /// The test database's URL, for a connection as the test server's superuser.
    pub fn url(&self) -> &str {
        self.db.url()
    }

    pub async fn finish(self) {
        self.store.close().await;
        self.db.drop_db().await.expect("drop test database");
    }
}

/// A migrated SQLite store on a file of its own.
pub struct Lite {
    pub store: SqliteStore,
    _file: TestSqlite,
}

pub async fn sqlite() -> Lite {
    let file = TestSqlite::new().expect("temp file");
    migrate::sqlite(&file.url()).await.expect("migrate");
    let store = SqliteStore::open(&file.url(), 8).await.expect("open");
    Lite { store, _file: file }
}

pub async fn sqlite_memory() -> SqliteStore {
    SqliteStore::in_memory().await.expect("in-memory store")
}

pub fn now() -> DateTime<Utc> {
    SystemClock.now()
}

/// An audit entry for a change whose entry the test does not look at.
pub fn audited() -> AuditEntry {
    audited_by(baton_core::model::OPERATOR)
}

/// An audit entry of a change made by `actor`.
pub fn audited_by(actor: &str) -> AuditEntry {
    AuditEntry {
        actor: actor.to_string(),
        ..AuditEntry::operator(
            now(),
            AuditAction::AgentCreated,
            "test",
            serde_json::json!({}),
        )
    }
}

/// A tenant of its own for the calling test.
pub async fn tenant<S: Store>(s: &S) -> TenantId {
    let t = Tenant {
        id: TenantId::new(),
        name: format!("tenant-{}", uuid::Uuid::new_v4()),
        created_at: now(),
    };
    s.create_tenant(&t).await.expect("create tenant");
    t.id
}

pub fn event(tenant: TenantId, e: RunEvent) -> NewEvent {
    NewEvent::new(e, EventMeta::new(tenant))
}

pub fn created(tenant: TenantId) -> NewEvent {
    event(
        tenant,
        RunEvent::RunCreated(RunCreated {
            agent_id: AgentId::new(),
            agent_version: 1,
            title: Some("a run".into()),
            metadata: Default::default(),
            tool_versions: Default::default(),
            parent: None,
        }),
    )
}

pub fn message(tenant: TenantId, role: MessageRole, content: &str) -> NewEvent {
    event(
        tenant,
        RunEvent::MessageAppended(MessageAppended {
            message_id: MessageId::new(),
            role,
            content: content.into(),
            queued: false,
        }),
    )
}

pub fn turn_requested(tenant: TenantId, turn: i64) -> NewEvent {
    event(
        tenant,
        RunEvent::TurnRequested(TurnRequested {
            turn,
            message_id: MessageId::new(),
        }),
    )
}

pub fn request(run: RunId, expected_version: i64, events: Vec<NewEvent>) -> AppendRequest {
    AppendRequest {
        run,
        expected_version,
        events,
        at: now(),
        idempotency: None,
        fence: None,
        release: None,
        blobs: Vec::new(),
        base: None,
    }
}

pub fn record(request_id: &str, response: Value) -> IdempotencyRecord {
    IdempotencyRecord {
        request_id: request_id.into(),
        command: "post_message".into(),
        fingerprint: format!("fp-{request_id}"),
        response,
    }
}

/// Appends and expects the events to be stored.
pub async fn append_ok<S: Store>(
    s: &S,
    tenant: TenantId,
    req: AppendRequest,
) -> (RunSummary, Vec<Envelope>) {
    match s.append(tenant, req).await.expect("append") {
        AppendOutcome::Appended { run, events } => (*run, events),
        AppendOutcome::Duplicate(rec) => panic!("unexpected duplicate {rec:?}"),
    }
}

/// A new run of `tenant` with its `run.created` event.
pub async fn new_run<S: Store>(s: &S, tenant: TenantId) -> RunId {
    let run = RunId::new();
    append_ok(s, tenant, request(run, 0, vec![created(tenant)])).await;
    run
}

/// Every event of a run, in order.
pub async fn all_events<S: Store>(s: &S, tenant: TenantId, run: RunId) -> Vec<Envelope> {
    s.read_stream(tenant, run, 0, 10_000).await.expect("read")
}

pub fn versions(events: &[Envelope]) -> Vec<i64> {
    events.iter().map(|e| e.version).collect()
}

pub fn agent(tenant: TenantId, name: &str) -> Agent {
    let at = now();
    Agent {
        id: AgentId::new(),
        tenant,
        name: name.into(),
        instructions: "be brief".into(),
        provider: ProviderSpec::Scripted {
            replies: vec![ScriptedReply {
                content: "hello".into(),
                delay_ms: 5,
                complete_run: false,
                tool_calls: vec![],
            }],
        },
        tools: vec![],
        limits: AgentLimits::default(),
        version: 1,
        created_at: at,
        updated_at: at,
        archived_at: None,
    }
}

/// An HTTP tool of `tenant` that reads.
pub fn tool(tenant: TenantId, name: &str) -> Tool {
    let at = now();
    Tool {
        id: ToolId::new(),
        tenant,
        name: name.into(),
        description: format!("the {name} tool"),
        input_schema: serde_json::json!({
            "type": "object",
            "properties": { "q": { "type": "string" } },
            "required": ["q"],
        }),
        effect: ToolEffect::Read,
        idempotent: false,
        requires_approval: false,
        timeout_ms: 5_000,
        kind: ToolKindSpec::Http {
            url: format!("https://tools.example/{name}"),
            secret_headers: vec![],
        },
        created_at: at,
        updated_at: at,
        archived_at: None,
        version: 1,
    }
}

/// A run of `tenant` in its first turn (`running`); returns it and its version.
pub async fn run_in_turn<S: Store>(s: &S, tenant: TenantId) -> (RunId, i64) {
    let run = RunId::new();
    let events = vec![
        created(tenant),
        message(tenant, MessageRole::User, "go"),
        turn_requested(tenant, 1),
        event(tenant, RunEvent::TurnStarted(TurnStarted { turn: 1 })),
    ];
    let (summary, _) = append_ok(s, tenant, request(run, 0, events)).await;
    (run, summary.version)
}

/// The receipts projection as a pure fold of the run's stored events.
pub async fn folded_receipts<S: Store>(s: &S, tenant: TenantId, run: RunId) -> Vec<Receipt> {
    let mut rows: Vec<Receipt> = Vec::new();
    for e in all_events(s, tenant, run).await {
        let Decoded::Known(known) = e.decode() else {
            continue;
        };
        let Some(id) = Receipt::id_of(&known) else {
            continue;
        };
        let at = rows.iter().position(|r| r.id == id);
        let before = at.map(|i| rows[i].clone());
        match (
            Receipt::apply(before, run, &known, e.version, e.recorded_at),
            at,
        ) {
            (Some(after), Some(i)) => rows[i] = after,
            (Some(after), None) => rows.push(after),
            (None, _) => {}
        }
    }
    rows.sort_by_key(|r| (r.created_version, r.id));
    rows
}
