//! The rows of `stream_tickets` (never the ticket's own hash).

use super::corrupt;
use baton_core::StoreError;
use baton_core::model::{IssuedBy, StreamTicket};
use chrono::{DateTime, Utc};
use uuid::Uuid;

/// Expands to the columns a [`StreamTicketRow`] reads.
macro_rules! stream_ticket_columns {
    () => {
        "id, tenant_id, run_id, issued_by, issuer_hash, created_at, expires_at"
    };
}
pub(crate) use stream_ticket_columns;

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct StreamTicketRow {
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub run_id: Uuid,
    pub issued_by: String,
    pub issuer_hash: Option<Vec<u8>>,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}

impl TryFrom<StreamTicketRow> for StreamTicket {
    type Error = StoreError;

    fn try_from(r: StreamTicketRow) -> Result<Self, StoreError> {
        let issued_by = IssuedBy::from_parts(&r.issued_by, r.issuer_hash).ok_or_else(|| {
            corrupt(format!(
                "stream ticket {} has issuer {:?} with no matching hash",
                r.id, r.issued_by
            ))
        })?;
        Ok(StreamTicket {
            id: r.id,
            tenant: r.tenant_id.into(),
            run: r.run_id.into(),
            issued_by,
            created_at: r.created_at,
            expires_at: r.expires_at,
        })
    }
}
