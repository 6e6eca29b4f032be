//! What an append writes, decided once for both adapters: request validation, the
//! versions of the new events, the runs projection after them (folded with
//! [`RunSummary::apply`], the only projection logic) and the message rows they add.
//! Pure: the adapters run the SQL inside their transaction. The receipts projection is
//! not planned here: it reads the rows it changes, so the adapters fold it inside the
//! transaction (`adapter/receipts.rs`).

use baton_core::StoreError;
use baton_core::model::{Message, RunSummary};
use baton_core::ports::AppendRequest;
use baton_events::{Envelope, EventId, EventMeta, MessageId, MessageRole, RunEvent, TenantId};
use chrono::{DateTime, SubsecRound, Utc};

/// One event as it will be stored; the database assigns its position.
#[derive(Debug)]
pub(crate) struct PlannedEvent {
    pub id: EventId,
    pub version: i64,
    pub event_type: &'static str,
    pub schema: i32,
    pub data: serde_json::Value,
    pub meta: EventMeta,
}

impl PlannedEvent {
    /// The stored envelope, once the insert returned its position.
    pub fn envelope(&self, plan: &AppendPlan, position: i64) -> Envelope {
        Envelope {
            id: self.id,
            stream: plan.summary.id,
            version: self.version,
            position,
            event_type: self.event_type.to_string(),
            schema: self.schema as u32,
            data: self.data.clone(),
            meta: self.meta.clone(),
            recorded_at: plan.at,
        }
    }
}

/// Everything one append writes besides the idempotency record.
#[derive(Debug)]
pub(crate) struct AppendPlan {
    /// The append time at the precision both databases keep (microseconds), so what an
    /// append returns equals what a later read returns.
    pub at: DateTime<Utc>,
    pub summary: RunSummary,
    pub events: Vec<PlannedEvent>,
    pub messages: Vec<Message>,
}

/// Checks what needs no database: at least one event, every event's metadata names the
/// calling tenant, and `run.created` opens a new stream and appears nowhere else.
pub(crate) fn validate(tenant: TenantId, req: &AppendRequest) -> Result<(), StoreError> {
    if req.expected_version < 0 {
        return Err(invalid(format!(
            "expected_version must not be negative, got {}",
            req.expected_version
        )));
    }
    let Some(first) = req.events.first() else {
        return Err(invalid("an append needs at least one event".into()));
    };
    if req.expected_version == 0 && !matches!(first.event, RunEvent::RunCreated(_)) {
        return Err(invalid(format!(
            "the first event of a stream must be run.created, got {}",
            first.event_type()
        )));
    }
    let created_later = req.events.iter().enumerate().any(|(i, e)| {
        matches!(e.event, RunEvent::RunCreated(_)) && (i > 0 || req.expected_version > 0)
    });
    if created_later {
        return Err(invalid(
            "run.created may only be the first event of a stream".into(),
        ));
    }
    if let Some(base) = &req.base
        && (base.tenant != tenant || base.id != req.run || base.version != req.expected_version)
    {
        return Err(invalid(format!(
            "the base given is run {} at version {}, not the run appended to at {}",
            base.id, base.version, req.expected_version
        )));
    }
    if let Some(e) = req.events.iter().find(|e| e.meta.tenant != tenant) {
        return Err(invalid(format!(
            "event {} names tenant {} but is appended for tenant {tenant}",
            e.id, e.meta.tenant
        )));
    }
    Ok(())
}

/// Folds the request's events into `base` (the projection at `req.expected_version`, or
/// [`RunSummary::empty`] for a new stream) and lists the rows to write.
pub(crate) fn plan(base: RunSummary, req: &AppendRequest) -> Result<AppendPlan, StoreError> {
    let at = micros(req.at);
    let mut summary = base;
    let mut events = Vec::with_capacity(req.events.len());
    let mut messages = Vec::new();
    for (i, new) in req.events.iter().enumerate() {
        let version = req.expected_version + 1 + i as i64;
        let before = summary.message_count;
        summary.apply(&new.event, version, at);
        // A terminal run ignores messages; only counted ones get a row.
        if summary.message_count > before
            && let Some((id, role, content)) = message_of(&new.event)
        {
            messages.push(Message {
                id,
                run_id: req.run,
                seq: summary.message_count,
                role,
                content: content.to_string(),
                version,
                created_at: at,
            });
        }
        let schema = i32::try_from(new.event.schema())
            .map_err(|_| invalid(format!("schema of {} out of range", new.event_type())))?;
        events.push(PlannedEvent {
            id: new.id,
            version,
            event_type: new.event_type(),
            schema,
            data: new.data(),
            meta: new.meta.clone(),
        });
    }
    Ok(AppendPlan {
        at,
        summary,
        events,
        messages,
    })
}

/// The message an event adds to the messages projection when [`RunSummary::apply`]
/// counts it: a `message.appended`, or a `model.completed` with content (the assistant's
/// reply).
fn message_of(event: &RunEvent) -> Option<(MessageId, MessageRole, &str)> {
    match event {
        RunEvent::MessageAppended(m) => Some((m.message_id, m.role, m.content.as_str())),
        RunEvent::ModelCompleted(m) => m
            .content
            .as_deref()
            .map(|c| (m.message_id, MessageRole::Assistant, c)),
        _ => None,
    }
}

/// The projection a new stream starts from.
pub(crate) fn new_stream(tenant: TenantId, req: &AppendRequest) -> RunSummary {
    RunSummary::empty(tenant, req.run, micros(req.at))
}

/// A timestamp truncated to microseconds: what both databases store without rounding.
pub(crate) fn micros(t: DateTime<Utc>) -> DateTime<Utc> {
    t.trunc_subsecs(6)
}

fn invalid(msg: String) -> StoreError {
    StoreError::Other(format!("invalid append: {msg}"))
}

/// Why the writing part of an append stopped.
#[derive(Debug)]
pub(crate) enum AppendError {
    /// A unique key said another writer got there first; after the rollback the adapter
    /// reads the stream's version to report a precise `Conflict`.
    Raced,
    /// The projection's `UPDATE` changed no row (its version or fence no longer held):
    /// after the rollback the adapter reads the run to say why (`NotFound`, `Fenced` or
    /// `Conflict`).
    Refused,
    Store(StoreError),
}

impl From<StoreError> for AppendError {
    /// A classified driver error: its unique violations (reported as `Conflict`) are
    /// races; checks that already know both versions return `Store(Conflict)` directly.
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Conflict { .. } => AppendError::Raced,
            other => AppendError::Store(other),
        }
    }
}
