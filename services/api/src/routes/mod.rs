//! Route handlers, thin: parse the request, call one use case, map the result.

pub mod actions;
pub mod agents;
pub mod api_keys;
pub mod audit;
pub mod egress;
pub mod encryption_keys;
pub mod events;
pub mod health;
pub mod invitations;
pub mod members;
pub mod runs;
pub mod secrets;
pub mod sessions;
pub mod tools;

use crate::error::{ApiError, Code};
use serde::Serialize;

/// A page of items and the cursor of the next page (absent on the last page).
#[derive(Serialize, utoipa::ToSchema)]
pub struct PageBody<T> {
    pub items: Vec<T>,
    pub next_cursor: Option<String>,
}

impl<T> From<baton_core::page::Page<T>> for PageBody<T> {
    fn from(p: baton_core::page::Page<T>) -> Self {
        Self {
            items: p.items,
            next_cursor: p.next_cursor,
        }
    }
}

/// Parses a list cursor (the id of the previous page's last item).
pub(crate) fn parse_cursor<T: std::str::FromStr>(
    cursor: Option<&str>,
) -> Result<Option<T>, ApiError> {
    cursor
        .map(|c| {
            c.parse().map_err(|_| {
                ApiError::new(
                    Code::InvalidCursor,
                    "cursor is not valid: pass back the next_cursor of a previous page",
                )
            })
        })
        .transpose()
}
