//! The direct paths of `append`: `store` appends through `baton_store::PgStore` and the
//! `EventLog::append` port; `raw` sends the SQL of that append itself with sqlx, statement
//! for statement, so the two differ only by what the store does around the SQL. Both
//! write to a fresh database of their own, and every stream they wrote is checked at the
//! end against the versions its client counted.

use super::{Phase, Tally, closed_loop};
use crate::open_loop::Outcome;
use crate::stats::Progress;
use anyhow::Context;
use baton_core::model::Tenant;
use baton_core::ports::{AppendOutcome, AppendRequest, EventLog, TenantStore};
use baton_events::{
    AgentId, EventMeta, MessageAppended, MessageId, MessageRole, NewEvent, RunCreated, RunEvent,
    RunId, TenantId,
};
use baton_store::{PgOptions, PgStore};
use baton_testkit::TestDatabase;
use chrono::{DateTime, SubsecRound, Utc};
use std::collections::BTreeMap;
use std::time::Instant;

/// The fresh database raw and store append to, with a tenant.
pub struct Db {
    pub db: TestDatabase,
    pub tenant: TenantId,
    /// Whether the transactions per append are counted.
    pub counters: bool,
}

pub async fn create_tenant(url: &str) -> anyhow::Result<TenantId> {
    let store = PgStore::connect(&PgOptions::new(url))
        .await
        .context("connecting the store")?;
    let tenant = Tenant {
        id: TenantId::new(),
        name: "loadtest".into(),
        created_at: Utc::now(),
    };
    store
        .create_tenant(&tenant)
        .await
        .context("creating the tenant")?;
    store.close().await;
    Ok(tenant.id)
}

/// A run a raw or store client wrote and the versions it counted.
pub struct Written {
    run: RunId,
    version: i64,
}

fn meta(tenant: TenantId) -> EventMeta {
    let mut m = EventMeta::new(tenant);
    m.actor = Some("key:loadtest".into());
    m
}

fn created(tenant: TenantId, agent: AgentId) -> NewEvent {
    let e = RunEvent::RunCreated(RunCreated {
        agent_id: agent,
        agent_version: 1,
        title: None,
        metadata: Default::default(),
        tool_versions: Default::default(),
        parent: None,
    });
    NewEvent::new(e, meta(tenant))
}

fn message(tenant: TenantId, n: i64) -> NewEvent {
    let e = RunEvent::MessageAppended(MessageAppended {
        message_id: MessageId::new(),
        role: MessageRole::User,
        content: format!("message {n}"),
        queued: false,
    });
    NewEvent::new(e, meta(tenant))
}

fn store_kind(e: &baton_core::StoreError) -> String {
    use baton_core::StoreError as E;
    match e {
        E::Conflict { .. } => "conflict",
        E::NotFound => "not_found",
        E::Fenced => "fenced",
        E::Unavailable(_) => "unavailable",
        E::Unreadable(_) => "unreadable",
        E::Other(_) => "other",
    }
    .to_string()
}

fn sqlx_kind(e: &sqlx::Error) -> String {
    match e {
        sqlx::Error::Database(db) => format!("sqlstate_{}", db.code().unwrap_or_default()),
        sqlx::Error::PoolTimedOut => "pool_timeout".into(),
        sqlx::Error::RowNotFound => "raced".into(),
        _ => "sqlx".into(),
    }
}

/// The store path: each client appends through `EventLog::append` on a pool of one
/// connection per client.
pub async fn store(
    db: &Db,
    shape: &str,
    clients: usize,
    secs: f64,
    label: &str,
    p: Progress,
) -> anyhow::Result<(Phase, Vec<Written>)> {
    let mut opts = PgOptions::new(db.db.url());
    opts.app_pool_size = u32::try_from(clients).unwrap_or(u32::MAX);
    let s = PgStore::connect(&opts)
        .await
        .context("connecting the store")?;
    let tally = Tally::new(secs, Vec::new(), Some(db.db.url()).filter(|_| db.counters));
    let (tenant, new_streams) = (db.tenant, shape == "create");
    let written = closed_loop(label, "appends", clients, &tally, p, |_, tally| {
        let s = s.clone();
        async move {
            let agent = AgentId::new();
            let mut own = Written {
                run: RunId::new(),
                version: 0,
            };
            let mut opened = Vec::new();
            while tally.running() {
                let began = Instant::now();
                let req = if new_streams || own.version == 0 {
                    let run = if new_streams { RunId::new() } else { own.run };
                    AppendRequest::new(run, 0, vec![created(tenant, agent)], Utc::now())
                } else {
                    let e = message(tenant, own.version);
                    AppendRequest::new(own.run, own.version, vec![e], Utc::now())
                };
                let run = req.run;
                match s.append(tenant, req).await {
                    Ok(AppendOutcome::Appended { .. }) => {
                        if new_streams {
                            opened.push(Written { run, version: 1 });
                        } else {
                            own.version += 1;
                        }
                        tally.record(began, Outcome::Ok);
                    }
                    Ok(AppendOutcome::Duplicate(_)) => {
                        tally.record(began, Outcome::Error("duplicate".into()))
                    }
                    Err(e) => tally.record(began, Outcome::Error(store_kind(&e))),
                }
            }
            if !new_streams && own.version > 0 {
                opened.push(own);
            }
            anyhow::Ok(opened)
        }
    })
    .await?;
    s.close().await;
    tally.count_db().await?;
    Ok((
        tally.phase("store", shape, clients),
        written.into_iter().flatten().collect(),
    ))
}

/// The raw path: the SQL of the store's append for the shape, sent with sqlx on a pool
/// of one connection per client.
pub async fn raw(
    db: &Db,
    shape: &str,
    clients: usize,
    secs: f64,
    label: &str,
    p: Progress,
) -> anyhow::Result<(Phase, Vec<Written>)> {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(u32::try_from(clients).unwrap_or(u32::MAX))
        .connect(db.db.url())
        .await
        .context("connecting the raw pool")?;
    let tally = Tally::new(secs, Vec::new(), Some(db.db.url()).filter(|_| db.counters));
    let (tenant, new_streams) = (db.tenant, shape == "create");
    let written = closed_loop(label, "appends", clients, &tally, p, |_, tally| {
        let pool = pool.clone();
        async move {
            let agent = AgentId::new();
            let mut own = RawRun::new(tenant, agent);
            let mut opened = Vec::new();
            while tally.running() {
                let began = Instant::now();
                let r = if new_streams || own.version == 0 {
                    let mut run = if new_streams {
                        RawRun::new(tenant, agent)
                    } else {
                        own.clone()
                    };
                    let r = run.create(&pool).await;
                    if r.is_ok() {
                        if new_streams {
                            opened.push(Written {
                                run: run.id,
                                version: 1,
                            });
                        } else {
                            own = run;
                        }
                    }
                    r
                } else {
                    own.message(&pool).await
                };
                let outcome = match r {
                    Ok(()) => Outcome::Ok,
                    Err(e) => Outcome::Error(sqlx_kind(&e)),
                };
                tally.record(began, outcome);
            }
            if !new_streams && own.version > 0 {
                opened.push(Written {
                    run: own.id,
                    version: own.version,
                });
            }
            anyhow::Ok(opened)
        }
    })
    .await?;
    pool.close().await;
    tally.count_db().await?;
    Ok((
        tally.phase("raw", shape, clients),
        written.into_iter().flatten().collect(),
    ))
}

/// A run as the raw path keeps it: what the store's projection would hold.
#[derive(Debug, Clone)]
struct RawRun {
    id: RunId,
    tenant: TenantId,
    agent: AgentId,
    version: i64,
    messages: i64,
    created_at: DateTime<Utc>,
}

/// The runs projection's columns, in the order the store binds them (a macro, so the
/// statements stay literals).
macro_rules! run_columns {
    () => {
        "id, tenant_id, agent_id, agent_version, title, status, version, message_count, \
         turn_count, cancel_requested, pending_actions, last_error, created_at, updated_at"
    };
}

impl RawRun {
    fn new(tenant: TenantId, agent: AgentId) -> Self {
        RawRun {
            id: RunId::new(),
            tenant,
            agent,
            version: 0,
            messages: 0,
            created_at: Utc::now(),
        }
    }

    /// The store's new-stream append: the run row, then the event.
    async fn create(&mut self, pool: &sqlx::PgPool) -> Result<(), sqlx::Error> {
        let at = Utc::now().trunc_subsecs(6);
        let e = created(self.tenant, self.agent);
        let mut tx = pool.begin().await?;
        sqlx::query(concat!(
            "INSERT INTO runs (",
            run_columns!(),
            ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)"
        ))
        .bind(self.id.as_uuid())
        .bind(self.tenant.as_uuid())
        .bind(self.agent.as_uuid())
        .bind(1i64)
        .bind(None::<String>)
        .bind("waiting")
        .bind(1i64)
        .bind(0i64)
        .bind(0i64)
        .bind(false)
        .bind(0i64)
        .bind(None::<sqlx::types::Json<serde_json::Value>>)
        .bind(at)
        .bind(at)
        .execute(&mut *tx)
        .await?;
        insert_event(&mut tx, self, 1, &e, at).await?;
        tx.commit().await?;
        (self.version, self.created_at) = (1, at);
        Ok(())
    }

    /// The store's append to an existing stream: lock and read the run row, update it
    /// at the expected version, insert the event and the message row.
    async fn message(&mut self, pool: &sqlx::PgPool) -> Result<(), sqlx::Error> {
        let at = Utc::now().trunc_subsecs(6);
        let version = self.version + 1;
        let e = message(self.tenant, version);
        let mut tx = pool.begin().await?;
        sqlx::query(concat!(
            "SELECT ",
            run_columns!(),
            " FROM runs WHERE id = $1 AND tenant_id = $2 FOR UPDATE"
        ))
        .bind(self.id.as_uuid())
        .bind(self.tenant.as_uuid())
        .fetch_one(&mut *tx)
        .await?;
        let updated = sqlx::query(
            "UPDATE runs SET id = $1, tenant_id = $2, agent_id = $3, \
             agent_version = $4, title = $5, status = $6, version = $7, \
             message_count = $8, turn_count = $9, cancel_requested = $10, \
             pending_actions = $11, last_error = $12, created_at = $13, \
             updated_at = $14 \
             WHERE id = $1 AND tenant_id = $2 AND version = $15",
        )
        .bind(self.id.as_uuid())
        .bind(self.tenant.as_uuid())
        .bind(self.agent.as_uuid())
        .bind(1i64)
        .bind(None::<String>)
        .bind("waiting")
        .bind(version)
        .bind(self.messages + 1)
        .bind(0i64)
        .bind(false)
        .bind(0i64)
        .bind(None::<sqlx::types::Json<serde_json::Value>>)
        .bind(self.created_at)
        .bind(at)
        .bind(self.version)
        .execute(&mut *tx)
        .await?;
        if updated.rows_affected() != 1 {
            return Err(sqlx::Error::RowNotFound);
        }
        insert_event(&mut tx, self, version, &e, at).await?;
        let RunEvent::MessageAppended(m) = &e.event else {
            return Err(sqlx::Error::Protocol("not a message".into()));
        };
        sqlx::query(
            "INSERT INTO messages \
             (tenant_id, run_id, seq, id, role, content, version, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(self.tenant.as_uuid())
        .bind(self.id.as_uuid())
        .bind(self.messages + 1)
        .bind(m.message_id.as_uuid())
        .bind(m.role.as_str())
        .bind(&m.content)
        .bind(version)
        .bind(at)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        self.version = version;
        self.messages += 1;
        Ok(())
    }
}

async fn insert_event(
    tx: &mut sqlx::PgConnection,
    run: &RawRun,
    version: i64,
    e: &NewEvent,
    at: DateTime<Utc>,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "INSERT INTO events \
         (tenant_id, stream_id, version, id, type, schema, data, meta, recorded_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING position",
    )
    .bind(run.tenant.as_uuid())
    .bind(run.id.as_uuid())
    .bind(version)
    .bind(e.id.as_uuid())
    .bind(e.event_type())
    .bind(i32::try_from(e.event.schema()).unwrap_or(i32::MAX))
    .bind(sqlx::types::Json(e.data()))
    .bind(sqlx::types::Json(&e.meta))
    .bind(at)
    .fetch_one(tx)
    .await
}

/// Every stream a raw or store client wrote holds exactly the versions `1..n` it counted,
/// and its projection is at `n`.
pub async fn check_streams(db: &Db, written: &[Written]) -> anyhow::Result<Vec<String>> {
    if written.is_empty() {
        return Ok(Vec::new());
    }
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(db.db.url())
        .await
        .context("connecting to check the streams")?;
    let ids: Vec<uuid::Uuid> = written.iter().map(|w| w.run.as_uuid()).collect();
    let rows: Vec<(uuid::Uuid, i64, i64, i64, Option<i64>)> = sqlx::query_as(
        "SELECT e.stream_id, count(*), min(e.version), max(e.version), \
         (SELECT r.version FROM runs r WHERE r.id = e.stream_id) \
         FROM events e WHERE e.stream_id = ANY($1) GROUP BY e.stream_id",
    )
    .bind(&ids)
    .fetch_all(&pool)
    .await
    .context("reading the streams")?;
    pool.close().await;
    let found: BTreeMap<uuid::Uuid, (i64, i64, i64, Option<i64>)> = rows
        .into_iter()
        .map(|(id, n, lo, hi, run)| (id, (n, lo, hi, run)))
        .collect();
    let mut failures = Vec::new();
    for w in written {
        let id = w.run.as_uuid();
        let want = (w.version, 1, w.version, Some(w.version));
        match found.get(&id) {
            Some(got) if *got == want => {}
            got => failures.push(format!(
                "stream {id}: {} appends counted, stored (count, min, max, run version) {got:?}",
                w.version
            )),
        }
    }
    Ok(failures)
}
