//! `StreamTicketStore`: `stream_tickets`, on the `app` pool. Making a ticket is scoped
//! to its tenant; redeeming one finds it by its hash before the tenant is known
//! (`Scope::CrossTenant`, as an API key's lookup), in one `UPDATE … RETURNING` that both
//! databases run atomically: of two redemptions at once, one sees the row unused.

use super::Result;
use super::reads::commit;
use crate::backend::Backend;
use crate::plan::micros;
use crate::pools::{PoolKind, Scope};
use crate::query::Query;
use crate::rows::stream_tickets::{StreamTicketRow, stream_ticket_columns};
use crate::store::Store;
use async_trait::async_trait;
use baton_core::model::StreamTicket;
use baton_core::ports::StreamTicketStore;
use baton_events::RunId;
use chrono::{DateTime, Utc};

#[async_trait]
impl<B: Backend> StreamTicketStore for Store<B> {
    #[tracing::instrument(name = "store.create_stream_ticket", skip_all)]
    async fn create_stream_ticket(&self, ticket: &StreamTicket, token_hash: &[u8]) -> Result<()> {
        let tenant = ticket.tenant;
        let mut tx = self
            .pools
            .write(PoolKind::App, Scope::Tenant(tenant))
            .await?;
        Query::new("DELETE FROM stream_tickets WHERE tenant_id = $1 AND expires_at < $2")
            .bind(tenant.as_uuid())
            .bind(micros(ticket.created_at))
            .execute(&mut tx)
            .await?;
        Query::new(concat!(
            "INSERT INTO stream_tickets (",
            stream_ticket_columns!(),
            ", token_hash) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
        ))
        .bind(ticket.id)
        .bind(tenant.as_uuid())
        .bind(ticket.run.as_uuid())
        .bind(ticket.issued_by.kind())
        .bind(ticket.issued_by.token_hash().map(<[u8]>::to_vec))
        .bind(micros(ticket.created_at))
        .bind(micros(ticket.expires_at))
        .bind(token_hash.to_vec())
        .execute(&mut tx)
        .await?;
        commit(tx).await
    }

    #[tracing::instrument(name = "store.redeem_stream_ticket", skip_all)]
    async fn redeem_stream_ticket(
        &self,
        token_hash: &[u8],
        run: RunId,
        now: DateTime<Utc>,
    ) -> Result<Option<StreamTicket>> {
        let mut tx = self.pools.write(PoolKind::App, Scope::CrossTenant).await?;
        let row: Option<StreamTicketRow> = Query::new(concat!(
            "UPDATE stream_tickets SET used_at = $2 \
             WHERE token_hash = $1 AND run_id = $3 AND used_at IS NULL AND expires_at > $2 \
             RETURNING ",
            stream_ticket_columns!()
        ))
        .bind(token_hash.to_vec())
        .bind(micros(now))
        .bind(run.as_uuid())
        .fetch_optional(&mut tx)
        .await?;
        commit(tx).await?;
        row.map(StreamTicket::try_from).transpose()
    }
}
