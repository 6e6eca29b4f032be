//! Stream tickets: how a browser page opens a run's event stream without a long-lived
//! secret in its URL. `EventSource` cannot send an `Authorization` header, so a caller
//! with credentials (an app's back end with its API key, or a page with its session)
//! asks for a ticket, and the page passes it as `?ticket=`.
//!
//! A ticket opens one run's stream, once, within [`StreamTickets::lifetime`] of being
//! made: redeeming is one atomic statement, so of two connections with the same ticket
//! exactly one opens. Only its SHA-256 is stored. The stream it opens acts as the
//! credentials that asked for it, read again when it is redeemed (revoked or expired
//! credentials open nothing) and watched while it lasts, like any stream of theirs.

use crate::auth::AuthError;
use crate::crypto::tokens;
use crate::error::CoreError;
use crate::model::{Action, IssuedBy, IssuedTicket, Principal, StreamTicket};
use crate::ports::{Clock, RunReader, StreamTicketStore};
use baton_events::RunId;
use chrono::TimeDelta;
use std::sync::Arc;
use uuid::Uuid;

/// The stream ticket use cases.
#[derive(Clone)]
pub struct StreamTickets {
    pub store: Arc<dyn StreamTicketStore>,
    pub runs: Arc<dyn RunReader>,
    pub clock: Arc<dyn Clock>,
    /// How long a new ticket may wait for its stream (`auth.stream_ticket_lifetime_secs`).
    pub lifetime: TimeDelta,
}

impl StreamTickets {
    /// A ticket to `run`'s events for `p`, whose credentials are `issued_by`. Anyone who
    /// may read the run may have one; another tenant's run is `NotFound`.
    #[tracing::instrument(name = "stream_tickets.issue", skip_all, fields(run_id = %run))]
    pub async fn issue(
        &self,
        p: &Principal,
        issued_by: IssuedBy,
        run: RunId,
    ) -> Result<IssuedTicket, CoreError> {
        p.require(Action::ReadRuns)?;
        self.runs
            .get_run(p.tenant, run)
            .await?
            .ok_or(CoreError::NotFound("run"))?;
        let issued = tokens::issue_ticket();
        let now = self.clock.now();
        let ticket = StreamTicket {
            id: Uuid::now_v7(),
            tenant: p.tenant,
            run,
            issued_by,
            created_at: now,
            expires_at: now + self.lifetime,
        };
        self.store
            .create_stream_ticket(&ticket, &issued.hash)
            .await?;
        tracing::info!(ticket_id = %ticket.id, "stream ticket issued");
        Ok(IssuedTicket {
            url: format!("/v1/runs/{run}/events?ticket={}", issued.token),
            ticket: issued.token,
            expires_at: ticket.expires_at,
        })
    }

    /// Uses up `token` to open `run`'s stream: the ticket, or why it opens nothing (a
    /// ticket of another run is not used up).
    #[tracing::instrument(name = "stream_tickets.redeem", skip_all, fields(run_id = %run))]
    pub async fn redeem(&self, token: &str, run: RunId) -> Result<StreamTicket, AuthError> {
        if !tokens::is_well_formed_ticket(token) {
            return Err(AuthError::UnknownTicket);
        }
        self.store
            .redeem_stream_ticket(&tokens::hash_token(token), run, self.clock.now())
            .await?
            .ok_or(AuthError::UnknownTicket)
    }
}
