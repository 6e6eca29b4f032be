//! Stream tickets, stored by the hash of their token.

use crate::error::StoreError;
use crate::model::StreamTicket;
use async_trait::async_trait;
use baton_events::RunId;
use chrono::{DateTime, Utc};

#[async_trait]
pub trait StreamTicketStore: Send + Sync {
    /// Stores `ticket` under the hash of its token, and forgets the tenant's tickets that
    /// expired before the new one was made.
    async fn create_stream_ticket(
        &self,
        ticket: &StreamTicket,
        token_hash: &[u8],
    ) -> Result<(), StoreError>;

    /// Uses up the ticket of `run` whose token hashes to `token_hash`, if it is unused and
    /// not expired at `now`: of any number of redemptions at once, exactly one gets it. A
    /// ticket of another run is left as it is.
    async fn redeem_stream_ticket(
        &self,
        token_hash: &[u8],
        run: RunId,
        now: DateTime<Utc>,
    ) -> Result<Option<StreamTicket>, StoreError>;
}
