//! Row types, one module per port as in `crate::adapter`, and their mapping to the domain
//! model. Rows hold only database-neutral types (UUIDs, strings, integers, JSON,
//! timestamps) so one `#[derive(FromRow)]` serves Postgres and SQLite; each table's column
//! list is a macro (`run_columns!()`, …) so a statement can `concat!` it. Nothing here runs
//! a query.

pub(crate) mod agents;
pub(crate) mod api_keys;
pub(crate) mod audit;
pub(crate) mod checkpoints;
pub(crate) mod egress_allowlists;
pub(crate) mod environments;
pub(crate) mod invitations;
pub(crate) mod mcp;
pub(crate) mod receipts;
pub(crate) mod runs;
pub(crate) mod schedules;
pub(crate) mod secrets;
pub(crate) mod stream_tickets;
pub(crate) mod tenants;
pub(crate) mod tools;
pub(crate) mod users;
pub(crate) mod webhooks;
pub(crate) mod workspace;

use baton_core::StoreError;

/// Maps every row of a result, failing on the first that does not fit the model.
pub(crate) fn map_all<R, T>(rows: Vec<R>) -> Result<Vec<T>, StoreError>
where
    T: TryFrom<R, Error = StoreError>,
{
    rows.into_iter().map(T::try_from).collect()
}

/// A value for a JSON column.
pub(crate) fn to_json<T: serde::Serialize>(
    what: &str,
    value: &T,
) -> Result<serde_json::Value, StoreError> {
    serde_json::to_value(value)
        .map_err(|e| StoreError::Other(format!("{what} does not serialize: {e}")))
}

/// A row this build cannot read: written by a newer version, or damaged.
fn corrupt(msg: String) -> StoreError {
    StoreError::Unreadable(msg)
}
