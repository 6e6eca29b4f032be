//! Deleting a run: every row recorded of it — its workspace's files (and the contents
//! no other file holds), events, messages, receipts, checkpoints, idempotency records
//! and the run row itself — in one transaction with its
//! audit entry, on the `app` pool scoped to the run's tenant (the retention job's
//! deletion also counts the run in its tenant's retention progress, in that transaction).
//! The run must be where the caller saw it (`expected_version`) and free of any live
//! lease: a replica driving it (or saving the checkpoint of the turn that just settled)
//! makes the delete a `Conflict`; a lease that lapsed does not.

use super::Result;
use crate::backend::Backend;
use crate::plan::micros;
use crate::query::Query;
use crate::store::Store;
use baton_core::StoreError;
use baton_core::model::AuditEntry;
use baton_events::{RunId, TenantId};

/// The rows of a run in the tables that hold them, each bound `$1` the run and `$2` the
/// tenant; the run row goes last.
const DELETES: [&str; 9] = [
    // The run's files stop holding their contents; contents no file holds any more go.
    "UPDATE blobs SET refs = refs - (SELECT COUNT(*) FROM workspace_files f \
     WHERE f.run_id = $1 AND f.tenant_id = $2 AND f.sha256 = blobs.sha256) \
     WHERE tenant_id = $2 AND sha256 IN (SELECT sha256 FROM workspace_files \
     WHERE run_id = $1 AND tenant_id = $2 AND sha256 IS NOT NULL)",
    "DELETE FROM workspace_files WHERE run_id = $1 AND tenant_id = $2",
    "DELETE FROM events WHERE stream_id = $1 AND tenant_id = $2",
    "DELETE FROM messages WHERE run_id = $1 AND tenant_id = $2",
    "DELETE FROM receipts WHERE run_id = $1 AND tenant_id = $2",
    "DELETE FROM checkpoints WHERE run_id = $1 AND tenant_id = $2",
    "DELETE FROM idempotency WHERE run_id = $1 AND tenant_id = $2",
    // Deliveries about the run carry its summary: they go with it, attempts first.
    "DELETE FROM webhook_attempts WHERE delivery_id IN (SELECT id FROM webhook_deliveries \
     WHERE run_id = $1 AND tenant_id = $2) AND tenant_id = $2",
    "DELETE FROM webhook_deliveries WHERE run_id = $1 AND tenant_id = $2",
];

/// Whose deletion it is: a caller's, or the retention job's, which counts it in the
/// tenant's retention progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Counted {
    ByCaller,
    ByRetention,
}

impl<B: Backend> Store<B> {
    pub(crate) async fn delete_run_rows(
        &self,
        tenant: TenantId,
        run: RunId,
        expected_version: i64,
        audit: &AuditEntry,
        counted: Counted,
    ) -> Result<()> {
        let mut change = self.audited(tenant, audit).await?;
        let found: Option<(i64, Option<String>, Option<i64>)> = Query::new(
            "SELECT version, lease_owner, lease_expires_ms FROM runs \
             WHERE id = $1 AND tenant_id = $2",
        )
        .suffix(B::LOCK_ROWS)
        .bind(run.as_uuid())
        .bind(tenant.as_uuid())
        .fetch_optional(&mut change.tx)
        .await?;
        // A lease that lapsed (its holder died after the run ended) holds nothing.
        let leased = |owner: &Option<String>, expires: Option<i64>| {
            owner.is_some() && expires.is_none_or(|e| e >= audit.at.timestamp_millis())
        };
        let refusal = match found {
            None => Some(StoreError::NotFound),
            Some((actual, owner, expires))
                if actual != expected_version || leased(&owner, expires) =>
            {
                Some(StoreError::Conflict {
                    expected: expected_version,
                    actual,
                })
            }
            Some(_) => None,
        };
        if let Some(refusal) = refusal {
            change.rollback().await;
            return Err(refusal);
        }
        for sql in DELETES {
            Query::new(sql)
                .bind(run.as_uuid())
                .bind(tenant.as_uuid())
                .execute(&mut change.tx)
                .await?;
        }
        Query::new("DELETE FROM blobs WHERE tenant_id = $1 AND refs <= 0")
            .bind(tenant.as_uuid())
            .execute(&mut change.tx)
            .await?;
        Query::new("DELETE FROM runs WHERE id = $1 AND tenant_id = $2")
            .bind(run.as_uuid())
            .bind(tenant.as_uuid())
            .execute(&mut change.tx)
            .await?;
        if counted == Counted::ByRetention {
            // A tenant whose agents alone set retention has no policy row yet.
            Query::new(
                "INSERT INTO retention_policies (tenant_id, deleted_runs, last_deleted_at) \
                 VALUES ($2, 1, $1) ON CONFLICT (tenant_id) DO UPDATE SET \
                 deleted_runs = retention_policies.deleted_runs + 1, \
                 last_deleted_at = excluded.last_deleted_at",
            )
            .bind(micros(audit.at))
            .bind(tenant.as_uuid())
            .execute(&mut change.tx)
            .await?;
        }
        change.commit().await
    }
}
