//! Stream tickets: short-lived, single-use credentials that open one run's event stream
//! from a browser, whose `EventSource` cannot send an `Authorization` header.

use baton_events::{RunId, TenantId};
use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

/// The credentials a ticket was issued with: the stream it opens acts as them, and ends
/// when they do (revoked, expired, a member removed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IssuedBy {
    /// The embedded tier's local owner.
    Local,
    /// An API key, by the SHA-256 of its token.
    Key { token_hash: Vec<u8> },
    /// A login session, by the SHA-256 of its token.
    Session { token_hash: Vec<u8> },
}

impl IssuedBy {
    /// How `kind` is stored: `local`, `key` or `session`.
    pub fn kind(&self) -> &'static str {
        match self {
            IssuedBy::Local => "local",
            IssuedBy::Key { .. } => "key",
            IssuedBy::Session { .. } => "session",
        }
    }

    /// The stored token hash, if the credentials have one.
    pub fn token_hash(&self) -> Option<&[u8]> {
        match self {
            IssuedBy::Local => None,
            IssuedBy::Key { token_hash } | IssuedBy::Session { token_hash } => Some(token_hash),
        }
    }

    /// From the stored kind and hash; `None` for a combination never stored.
    pub fn from_parts(kind: &str, token_hash: Option<Vec<u8>>) -> Option<IssuedBy> {
        match (kind, token_hash) {
            ("local", None) => Some(IssuedBy::Local),
            ("key", Some(token_hash)) => Some(IssuedBy::Key { token_hash }),
            ("session", Some(token_hash)) => Some(IssuedBy::Session { token_hash }),
            _ => None,
        }
    }
}

/// A ticket as stored (its token is never stored, only its hash).
#[derive(Debug, Clone)]
pub struct StreamTicket {
    pub id: Uuid,
    pub tenant: TenantId,
    /// The one run whose events it opens.
    pub run: RunId,
    pub issued_by: IssuedBy,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}

/// A new ticket, shown this once.
#[derive(Serialize, utoipa::ToSchema)]
pub struct IssuedTicket {
    /// Pass as `?ticket=` on the run's event stream (`GET /v1/runs/{run_id}/events`
    /// with `Accept: text/event-stream`, what `EventSource` sends). It opens one stream,
    /// once, before `expires_at`.
    pub ticket: String,
    /// The stream URL's path and query, ready for `new EventSource(base + url)`.
    pub url: String,
    pub expires_at: DateTime<Utc>,
}

impl std::fmt::Debug for IssuedTicket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IssuedTicket")
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}
