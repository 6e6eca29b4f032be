//! The receipts projection of the append transaction: one row per tool call, folded with
//! [`Receipt::apply`] (the only receipt logic) from the row as it stood before each event.
//! Unlike the runs and messages projections it cannot be planned up front, since it reads
//! the rows it changes; the events of one append are folded in order, so a later one sees
//! what an earlier one wrote.

use super::Result;
use crate::backend::Backend;
use crate::plan::{AppendError, AppendPlan};
use crate::query::Query;
use crate::rows::receipts::{ReceiptRow, receipt_columns, receipt_json};
use baton_core::model::Receipt;
use baton_core::ports::AppendRequest;
use baton_events::TenantId;
use sqlx::Transaction;
use sqlx::types::Json;

/// A run's receipt by id.
const RECEIPT: &str = concat!(
    "SELECT ",
    receipt_columns!(),
    " FROM receipts WHERE tenant_id = $1 AND run_id = $2 AND id = $3"
);

/// Folds the appended events that concern receipts into their rows, in order.
pub(super) async fn project_receipts<B: Backend>(
    tx: &mut Transaction<'static, B>,
    tenant: TenantId,
    req: &AppendRequest,
    plan: &AppendPlan,
) -> Result<(), AppendError> {
    let run = plan.summary.id;
    for (new, planned) in req.events.iter().zip(&plan.events) {
        let Some(id) = Receipt::id_of(&new.event) else {
            continue;
        };
        let row: Option<ReceiptRow> = Query::new(RECEIPT)
            .bind(tenant.as_uuid())
            .bind(run.as_uuid())
            .bind(id.as_uuid())
            .fetch_optional(&mut *tx)
            .await?;
        let before = row.map(Receipt::try_from).transpose()?;
        let after = Receipt::apply(before, run, &new.event, planned.version, plan.at);
        let Some(after) = after else {
            continue;
        };
        // The columns mirror the body; a row of the run is always this tenant's (runs
        // belong to one tenant), which the update's condition restates.
        Query::new(
            "INSERT INTO receipts \
             (tenant_id, run_id, id, created_version, state, body, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) \
             ON CONFLICT (run_id, id) DO UPDATE SET \
             created_version = excluded.created_version, state = excluded.state, \
             body = excluded.body, updated_at = excluded.updated_at \
             WHERE receipts.tenant_id = excluded.tenant_id",
        )
        .bind(tenant.as_uuid())
        .bind(run.as_uuid())
        .bind(id.as_uuid())
        .bind(after.created_version)
        .bind(after.state.as_str())
        .bind(Json(receipt_json(&after)?))
        .bind(after.updated_at)
        .execute(&mut *tx)
        .await?;
    }
    Ok(())
}
