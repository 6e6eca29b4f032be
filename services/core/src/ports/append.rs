//! Appending to a run's stream: optimistic concurrency, idempotency records and the
//! lease fence of engine appends.

use super::IdempotencyRecord;
use crate::error::StoreError;
use crate::model::RunSummary;
use async_trait::async_trait;
use baton_events::{Envelope, NewEvent, RunId, TenantId};
use chrono::{DateTime, Utc};

/// A run's lease as held by one replica: the fencing token of its engine appends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    /// The replica identity (`name/boot`).
    pub owner: String,
    /// The lease epoch the replica acquired.
    pub epoch: i64,
}

/// Events to append to one run's stream, all or nothing.
#[derive(Debug, Clone)]
pub struct AppendRequest {
    pub run: RunId,
    /// The stream version the events were decided against; 0 for a new stream, whose
    /// first event must be `run.created`.
    pub expected_version: i64,
    pub events: Vec<NewEvent>,
    pub at: DateTime<Utc>,
    /// Stored in the same transaction; if the `request_id` exists already, nothing is
    /// appended and the stored record is returned.
    pub idempotency: Option<IdempotencyRecord>,
    /// Engine appends only: the lease they act under. Unless the run's lease is still
    /// exactly this owner and epoch, nothing is written and the append is `Fenced`.
    pub fence: Option<Fence>,
    /// With a fence: give the lease up in the same transaction.
    pub release: Option<Release>,
    /// The contents the events' `workspace.changed` change sets name, stored in the same
    /// transaction (a content the tenant stores already may be left out).
    pub blobs: Vec<super::Blob>,
    /// The run as it stands at `expected_version`, when the caller has it (the run it
    /// decided on): the store then writes against it without reading the run first, and
    /// its `UPDATE` checks the version and the fence instead.
    pub base: Option<Box<RunSummary>>,
}

impl AppendRequest {
    /// A client command's append: no lease, no idempotency record.
    pub fn new(
        run: RunId,
        expected_version: i64,
        events: Vec<NewEvent>,
        at: DateTime<Utc>,
    ) -> Self {
        Self {
            run,
            expected_version,
            events,
            at,
            idempotency: None,
            fence: None,
            release: None,
            blobs: Vec::new(),
            base: None,
        }
    }
}

/// How an append gives its lease up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// The run goes idle or ends: nobody needs the lease.
    Idle,
    /// The owner is draining: the next claimer takes the run over as a hand-off.
    HandOff,
}

#[derive(Debug, Clone)]
pub enum AppendOutcome {
    /// The events were stored; `run` is the projection after them.
    Appended {
        run: Box<RunSummary>,
        events: Vec<Envelope>,
    },
    /// The request's `request_id` was already used; nothing was written.
    Duplicate(IdempotencyRecord),
}

/// The write side of runs: appends events to a run's stream and updates the projections
/// derived from them in the same transaction.
#[async_trait]
pub trait EventLog: Send + Sync {
    /// Appends with optimistic concurrency: `Conflict` when the stream is not at
    /// `expected_version`; projections are updated in the same transaction.
    async fn append(
        &self,
        tenant: TenantId,
        req: AppendRequest,
    ) -> Result<AppendOutcome, StoreError>;

    /// Deletes the run and every row recorded of it (its events, messages, receipts,
    /// checkpoints and idempotency records) with `audit`, in one transaction, if its
    /// stream is at `expected_version` and no replica holds its lease: `Conflict`
    /// otherwise, `NotFound` when there is no such run.
    async fn delete_run(
        &self,
        tenant: TenantId,
        run: RunId,
        expected_version: i64,
        audit: &crate::model::AuditEntry,
    ) -> Result<(), StoreError>;
}
