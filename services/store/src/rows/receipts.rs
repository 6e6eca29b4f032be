//! The rows of the receipts projection: each receipt kept whole in its `body` column.

use super::{corrupt, to_json};
use baton_core::StoreError;
use baton_core::model::Receipt;
use sqlx::types::Json;
use uuid::Uuid;

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
