//! `EventLog`: the append, one transaction on the `app` pool scoped to the appending
//! tenant. It stores the idempotency record first (a concurrent duplicate blocks on its key
//! and then fails), reads the run row locked (the backend's [`Backend::LOCK_ROWS`]) with
//! its lease, so one statement gives both the fence and the stream version to check, and
//! writes the events with the runs (the lease release in the same `UPDATE`), messages,
//! receipts (`receipts.rs`) and workspace (`workspace.rs`) projections. What it writes is decided by `crate::plan`.
//!
//! An append that carries its base (the run at the expected version, as its caller
//! decided on it) skips the read: only appends write a run's projection, so the run at a
//! version is the base. Every projection `UPDATE` checks the version and the fence in its
//! `WHERE`; no row changed means one of them no longer holds, and after the rollback a
//! read says which (`Store::not_written`), in the order the locked append checks them.

use super::Result;
use super::reads::commit;
use super::receipts::project_receipts;
use super::webhooks::{enqueue_run_events, return_subscribed, run_event_kinds};
use crate::backend::Backend;
use crate::plan::{self, AppendError, AppendPlan};
use crate::pools::{PoolKind, Scope};
use crate::query::Query;
use crate::rows::runs::{RunRow, bind_run, run_columns};
use crate::store::Store;
use baton_core::StoreError;
use baton_core::model::{AuditEntry, RunSummary};
use baton_core::ports::{
    AppendOutcome, AppendRequest, EventLog, Fence, IdempotencyRecord, Release, RunReader,
};
use baton_events::{Envelope, RunId, TenantId};
use sqlx::Transaction;
use sqlx::types::Json;

/// The run an append writes to, with its lease; the backend's lock clause follows.
const RUN_AND_LEASE: &str = concat!(
    "SELECT ",
    run_columns!(),
    ", lease_owner, lease_epoch, lease_expires_ms FROM runs WHERE id = $1 AND tenant_id = $2"
);

/// The projection's `UPDATE`: every column, then the lease release if any, then the
/// condition ([`UPDATE_RUN_WHERE`]).
const UPDATE_RUN: &str = "UPDATE runs SET id = $1, tenant_id = $2, agent_id = $3, \
     agent_version = $4, title = $5, status = $6, version = $7, \
     message_count = $8, turn_count = $9, cancel_requested = $10, \
     pending_actions = $11, last_error = $12, created_at = $13, \
     updated_at = $14, metadata = $15, last_turn_outcome = $16, \
     failed_turns = $17, queued_messages = $18, interrupt_requested = $19, \
     parent_run_id = $20, title_folded = $21";
const UPDATE_RUN_WHERE: &str = " WHERE id = $1 AND tenant_id = $2 AND version = $22";

/// A run's lease as stored.
#[derive(sqlx::FromRow)]
struct Lease {
    lease_owner: Option<String>,
    lease_epoch: i64,
    lease_expires_ms: Option<i64>,
}

impl Lease {
    /// Whether the lease is still exactly `fence`. Expiry 0 marks a lease handed off:
    /// its owner may not write any more.
    fn holds(&self, fence: &Fence) -> bool {
        self.lease_owner.as_deref() == Some(fence.owner.as_str())
            && self.lease_epoch == fence.epoch
            && self.lease_expires_ms != Some(0)
    }
}

/// The run row as an append reads it: the projection and the lease.
#[derive(sqlx::FromRow)]
struct LockedRun {
    #[sqlx(flatten)]
    run: RunRow,
    #[sqlx(flatten)]
    lease: Lease,
}

/// A run's version and lease, read to say why an append wrote nothing.
#[derive(sqlx::FromRow)]
struct Standing {
    version: i64,
    #[sqlx(flatten)]
    lease: Lease,
}

/// The append's transaction.
type Tx<B> = Transaction<'static, B>;

#[async_trait::async_trait]
impl<B: Backend> EventLog for Store<B> {
    #[tracing::instrument(name = "store.delete_run", skip_all)]
    async fn delete_run(
        &self,
        tenant: TenantId,
        run: RunId,
        expected_version: i64,
        audit: &AuditEntry,
    ) -> Result<()> {
        self.delete_run_rows(
            tenant,
            run,
            expected_version,
            audit,
            super::deletion::Counted::ByCaller,
        )
        .await
    }

    #[tracing::instrument(name = "store.append", skip_all)]
    async fn append(&self, tenant: TenantId, req: AppendRequest) -> Result<AppendOutcome> {
        plan::validate(tenant, &req)?;
        let mut tx = self
            .pools
            .write(PoolKind::App, Scope::Tenant(tenant))
            .await?;
        if let Some(rec) = &req.idempotency
            && let Err(e) = insert_idempotency(&mut tx, tenant, rec, &req).await
        {
            // The record is read after the rollback, from a fresh snapshot (on another
            // pooled connection: this one goes back first).
            let _ = tx.rollback().await;
            return match e {
                StoreError::Conflict { .. } => self.duplicate(tenant, &rec.request_id).await,
                other => Err(other),
            };
        }
        match write(&mut tx, tenant, &req).await {
            Ok(outcome) => {
                commit(tx).await?;
                Ok(outcome)
            }
            Err(AppendError::Store(e)) => {
                let _ = tx.rollback().await;
                Err(e)
            }
            Err(e @ (AppendError::Raced | AppendError::Refused)) => {
                let _ = tx.rollback().await;
                let raced = matches!(e, AppendError::Raced);
                Err(self.not_written(tenant, &req, raced).await)
            }
        }
    }
}

impl<B: Backend> Store<B> {
    async fn duplicate(&self, tenant: TenantId, request_id: &str) -> Result<AppendOutcome> {
        match self.find_idempotency(tenant, request_id).await? {
            Some(rec) => Ok(AppendOutcome::Duplicate(rec)),
            None => Err(StoreError::Other(format!(
                "request_id {request_id:?} collided with a record that is gone"
            ))),
        }
    }

    /// Why an append wrote nothing, read after its rollback, in the order the locked
    /// append checks: the run is not there (or, when another writer `raced` it to a new
    /// stream's unique key, its id is taken), the fence no longer holds, the version moved.
    async fn not_written(&self, tenant: TenantId, req: &AppendRequest, raced: bool) -> StoreError {
        let scoped = self.pools.read(PoolKind::App, Scope::Tenant(tenant));
        let mut conn = match scoped.await {
            Ok(conn) => conn,
            Err(e) => return e,
        };
        let standing: Result<Option<Standing>, _> = Query::new(
            "SELECT version, lease_owner, lease_epoch, lease_expires_ms FROM runs \
             WHERE id = $1 AND tenant_id = $2",
        )
        .bind(req.run.as_uuid())
        .bind(tenant.as_uuid())
        .fetch_optional(&mut conn)
        .await;
        match standing {
            Err(e) => e,
            Ok(None) if raced => StoreError::Other(format!("run id {} is already taken", req.run)),
            Ok(None) => StoreError::NotFound,
            Ok(Some(now)) => match &req.fence {
                Some(fence) if !now.lease.holds(fence) => StoreError::Fenced,
                _ => StoreError::Conflict {
                    expected: req.expected_version,
                    actual: now.version,
                },
            },
        }
    }
}

async fn insert_idempotency<B: Backend>(
    tx: &mut Tx<B>,
    tenant: TenantId,
    rec: &IdempotencyRecord,
    req: &AppendRequest,
) -> Result<()> {
    Query::new(
        "INSERT INTO idempotency \
         (tenant_id, request_id, command, fingerprint, response, created_at, run_id) \
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(tenant.as_uuid())
    .bind(&rec.request_id)
    .bind(&rec.command)
    .bind(&rec.fingerprint)
    .bind(Json(&rec.response))
    .bind(plan::micros(req.at))
    .bind(req.run.as_uuid())
    .execute(tx)
    .await
    .map(drop)
}

/// Everything after the idempotency record; any error leaves the transaction to roll
/// back.
async fn write<B: Backend>(
    tx: &mut Tx<B>,
    tenant: TenantId,
    req: &AppendRequest,
) -> Result<AppendOutcome, AppendError> {
    let (plan, kinds, subscribed) = if req.expected_version == 0 {
        let plan = plan::plan(plan::new_stream(tenant, req), req)?;
        let kinds = run_event_kinds(&plan);
        bind_run(
            Query::new(concat!(
                "INSERT INTO runs (",
                run_columns!(),
                ", title_folded) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, \
                 $13, $14, $15, $16, $17, $18, $19, $20, $21)"
            )),
            &plan.summary,
        )
        .execute(&mut *tx)
        .await?;
        // A new run's events are no webhook event; should one be, the enqueue finds the
        // endpoints itself.
        let subscribed = !kinds.is_empty();
        (plan, kinds, subscribed)
    } else {
        // The run the events apply to: the caller's base, or the row read locked (its
        // fence and version checked there, so that a refusal is precise). Either way the
        // `UPDATE` writes only while the version and the fence still hold.
        let current = match &req.base {
            Some(base) => (**base).clone(),
            None => locked_current(tx, tenant, req).await?,
        };
        let plan = plan::plan(current, req)?;
        let kinds = run_event_kinds(&plan);
        let mut update = Query::new(UPDATE_RUN);
        update.push(release(req)).push(UPDATE_RUN_WHERE);
        let mut update = bind_run(update, &plan.summary).bind(req.expected_version);
        if let Some(fence) = &req.fence {
            update
                .push(" AND lease_owner = ")
                .push_bind(&fence.owner)
                .push(" AND lease_epoch = ")
                .push_bind(fence.epoch)
                .push(" AND COALESCE(lease_expires_ms, -1) <> 0");
        }
        // An append with webhook events asks, in the same statement, whether any
        // endpoint wants them.
        let subscribed = if kinds.is_empty() {
            if update.execute(&mut *tx).await? != 1 {
                return Err(AppendError::Refused);
            }
            false
        } else {
            return_subscribed(&mut update, tenant, &kinds);
            let Some((subscribed,)) = update.fetch_optional::<(bool,)>(&mut *tx).await? else {
                return Err(AppendError::Refused);
            };
            subscribed
        };
        (plan, kinds, subscribed)
    };
    let events = insert_rows(tx, tenant, &plan).await?;
    project_receipts(tx, tenant, req, &plan).await?;
    super::workspace::project_workspace(tx, tenant, req, &plan).await?;
    if subscribed {
        enqueue_run_events(tx, tenant, &plan, &kinds).await?;
    }
    Ok(AppendOutcome::Appended {
        run: Box::new(plan.summary),
        events,
    })
}

/// The run at the expected version, read locked until the transaction ends: `NotFound`
/// for a run that does not exist in this tenant, `Fenced` unless its lease is still
/// exactly the append's fence (a replica that lost its lease can never land an event),
/// `Conflict` when the version moved.
async fn locked_current<B: Backend>(
    tx: &mut Tx<B>,
    tenant: TenantId,
    req: &AppendRequest,
) -> Result<RunSummary, AppendError> {
    let locked: Option<LockedRun> = Query::new(RUN_AND_LEASE)
        .suffix(B::LOCK_ROWS)
        .bind(req.run.as_uuid())
        .bind(tenant.as_uuid())
        .fetch_optional(tx)
        .await?;
    let locked = locked.ok_or(AppendError::Store(StoreError::NotFound))?;
    if let Some(fence) = &req.fence
        && !locked.lease.holds(fence)
    {
        return Err(AppendError::Store(StoreError::Fenced));
    }
    let current = RunSummary::try_from(locked.run)?;
    if current.version != req.expected_version {
        return Err(AppendError::Store(StoreError::Conflict {
            expected: req.expected_version,
            actual: current.version,
        }));
    }
    Ok(current)
}

/// The `SET` clauses of the lease release the append asked for (under the fence it was
/// checked against), for the projection's `UPDATE`.
fn release(req: &AppendRequest) -> &'static str {
    match (req.release, &req.fence) {
        (Some(Release::Idle), Some(_)) => ", lease_owner = NULL, lease_expires_ms = NULL",
        // The owner stays, with expiry 0: free to claim at once, and the claimer knows it
        // is a hand-off.
        (Some(Release::HandOff), Some(_)) => ", lease_expires_ms = 0",
        _ => "",
    }
}

/// Events one `INSERT` writes at most: the statements' texts (one per count, each
/// prepared once per connection) stay few, and their arguments far below either
/// backend's limit.
const EVENTS_PER_INSERT: usize = 32;

/// Inserts the planned events, [`EVENTS_PER_INSERT`] rows to a statement, and the
/// message rows; returns the stored envelopes.
async fn insert_rows<B: Backend>(
    tx: &mut Tx<B>,
    tenant: TenantId,
    plan: &AppendPlan,
) -> Result<Vec<Envelope>, AppendError> {
    let mut envelopes = Vec::with_capacity(plan.events.len());
    for chunk in plan.events.chunks(EVENTS_PER_INSERT) {
        let mut insert = Query::new(
            "INSERT INTO events \
             (tenant_id, stream_id, version, id, type, schema, data, meta, recorded_at) \
             VALUES ",
        );
        for (i, e) in chunk.iter().enumerate() {
            insert.push(if i == 0 { "(" } else { ", (" });
            insert.push_bind(tenant.as_uuid()).push(", ");
            insert.push_bind(plan.summary.id.as_uuid()).push(", ");
            insert.push_bind(e.version).push(", ");
            insert.push_bind(e.id.as_uuid()).push(", ");
            insert.push_bind(e.event_type).push(", ");
            insert.push_bind(e.schema).push(", ");
            insert.push_bind(Json(&e.data)).push(", ");
            insert.push_bind(Json(&e.meta)).push(", ");
            insert.push_bind(plan.at).push(")");
        }
        // Neither database promises the order of the returned rows (SQLite says it is
        // arbitrary): each position is matched to its event by the version.
        let positions: Vec<(i64, i64)> = insert
            .suffix(" RETURNING version, position")
            .fetch_all(&mut *tx)
            .await?;
        for e in chunk {
            let position = positions
                .iter()
                .find(|(version, _)| *version == e.version)
                .map(|&(_, position)| position)
                .ok_or_else(|| {
                    StoreError::Other(format!("event version {} came back unwritten", e.version))
                })?;
            envelopes.push(e.envelope(plan, position));
        }
    }
    for m in &plan.messages {
        Query::new(
            "INSERT INTO messages \
             (tenant_id, run_id, seq, id, role, content, version, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(tenant.as_uuid())
        .bind(m.run_id.as_uuid())
        .bind(m.seq)
        .bind(m.id.as_uuid())
        .bind(m.role.as_str())
        .bind(&m.content)
        .bind(m.version)
        .bind(m.created_at)
        .execute(&mut *tx)
        .await?;
    }
    Ok(envelopes)
}
