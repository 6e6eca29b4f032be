//! Deleting a run: every row recorded of it goes in one transaction, with an audit
//! entry; then `run.deleted` — never stored — is published at the version after the
//! run's last event, so live followers (SSE clients, waits) on any replica end on it.
//! A run within a turn is refused (`RunBusy`: cancel it first), so no driver is left
//! writing to a stream that is gone.

use super::commands::{MAX_ATTEMPTS, Runs};
use crate::error::{CoreError, StoreError};
use crate::model::{Action, AuditAction, AuditEntry, Principal};
use baton_events::{Envelope, EventId, EventMeta, RunDeleted, RunEvent, RunId, TenantId};

impl Runs {
    /// Deletes `run_id` as `p` (an admin).
    #[tracing::instrument(name = "runs.delete_run", skip_all)]
    pub async fn delete_run(&self, p: &Principal, run_id: RunId) -> Result<(), CoreError> {
        p.require(Action::DeleteRuns)?;
        for _ in 0..MAX_ATTEMPTS {
            let run = self.load(p.tenant, run_id).await?;
            if run.status.in_turn() {
                return Err(CoreError::RunBusy);
            }
            let audit = AuditEntry::by(
                p,
                self.clock.now(),
                AuditAction::RunDeleted,
                run_id.to_string(),
                serde_json::json!({"status": run.status.as_str(), "events": run.version}),
            );
            let deleted = self
                .recorder
                .log
                .delete_run(p.tenant, run_id, run.version, &audit);
            match deleted.await {
                Ok(()) => {
                    let at = self.clock.now();
                    let last =
                        tombstone(p.tenant, run_id, run.version, &self.replica, &p.actor, at);
                    self.bus().publish(&[last]).await;
                    return Ok(());
                }
                // A checkpoint landed, or a command got in: look again.
                Err(StoreError::Conflict { .. }) => continue,
                Err(StoreError::NotFound) => return Err(CoreError::NotFound("run")),
                Err(e) => return Err(e.into()),
            }
        }
        Err(CoreError::Conflict)
    }
}

/// The `run.deleted` envelope that ends `run`'s stream after its last event (`version`),
/// written by `replica` for `actor` (empty: not known, and left out).
pub(crate) fn tombstone(
    tenant: TenantId,
    run: RunId,
    version: i64,
    replica: &str,
    actor: &str,
    at: chrono::DateTime<chrono::Utc>,
) -> Envelope {
    let mut meta = EventMeta::new(tenant);
    meta.actor = (!actor.is_empty()).then(|| actor.to_string());
    meta.replica = (!replica.is_empty()).then(|| replica.to_string());
    let event = RunEvent::RunDeleted(RunDeleted {});
    Envelope {
        id: EventId::new(),
        stream: run,
        version: version + 1,
        position: 0,
        event_type: event.event_type().to_string(),
        schema: event.schema(),
        data: event.data(),
        meta,
        recorded_at: at,
    }
}
