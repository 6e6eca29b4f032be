//! The receipts projection of the append transaction, for both adapters: one row per tool
//! call, folded with [`baton_core::model::Receipt::apply`] (the only receipt logic) from
//! the row as it stood before each event. Unlike the runs and messages projections it
//! cannot be planned up front, since it reads the rows it changes; the events of one
//! append are folded in order, so a later one sees what an earlier one wrote.

/// Expands to `async fn project_receipts(conn, tenant, req, plan)`, which folds every
/// appended event that concerns a receipt into its row. Invoked inside
/// [`super::impl_append!`]'s expansion; `$db` is the driver's `sqlx::Database` and
/// `$classify` maps its errors.
macro_rules! receipts_projection {
    ($db:ty, $classify:path) => {
        /// Folds the appended events that concern receipts into their rows, in order.
        async fn project_receipts(
            conn: &mut <$db as sqlx::Database>::Connection,
            tenant: baton_events::TenantId,
            req: &baton_core::ports::AppendRequest,
            plan: &$crate::plan::AppendPlan,
        ) -> Result<(), $crate::plan::AppendError> {
            use baton_core::model::Receipt;
            use sqlx::types::Json;
            use $crate::rows::{ReceiptRow, receipt_columns, receipt_json};

            let run = plan.summary.id;
            for (new, planned) in req.events.iter().zip(&plan.events) {
                let Some(id) = Receipt::id_of(&new.event) else {
                    continue;
                };
                let row: Option<ReceiptRow> = sqlx::query_as(concat!(
                    "SELECT ",
                    receipt_columns!(),
                    " FROM receipts WHERE tenant_id = $1 AND run_id = $2 AND id = $3"
                ))
                .bind(tenant.as_uuid())
                .bind(run.as_uuid())
                .bind(id.as_uuid())
                .fetch_optional(&mut *conn)
                .await
                .map_err($classify)?;
                let before = row.map(Receipt::try_from).transpose()?;
                let after = Receipt::apply(before, run, &new.event, planned.version, plan.at);
                let Some(after) = after else {
                    continue;
                };
                // The columns mirror the body; a row of the run is always this tenant's
                // (runs belong to one tenant), which the update's condition restates.
                sqlx::query(
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
                .execute(&mut *conn)
                .await
                .map_err($classify)?;
            }
            Ok(())
        }
    };
}
pub(crate) use receipts_projection;
