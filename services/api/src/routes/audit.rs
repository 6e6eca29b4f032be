//! `/v1/audit`: the tenant's audit stream, newest first (admins only): who changed its
//! members, API keys, secrets, agents and tools, when and from where. Entries carry ids,
//! names and roles; never a secret's value or a token.

use super::{AuditEntryPage, parse_cursor};
use crate::auth::Caller;
use crate::error::{ApiResult, Problem};
use crate::extract::ApiQuery;
use crate::state::AppState;
use axum::extract::State;
use baton_core::model::AuditAction;
use serde::Deserialize;
use uuid::Uuid;

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AuditParams {
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// Page size, 1 to 500 (default 50).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<u32>,
    /// Only entries of this action.
    #[param(inline)]
    pub action: Option<AuditAction>,
}

/// The tenant's audit entries, newest first, of one action when `action` is given (admin).
#[utoipa::path(get, path = "/v1/audit", operation_id = "listAuditEntries", tag = "audit", params(AuditParams),
    responses((status = 200, body = AuditEntryPage), (status = "4XX", body = Problem)))]
pub async fn list(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiQuery(q): ApiQuery<AuditParams>,
) -> ApiResult<axum::Json<AuditEntryPage>> {
    let before = parse_cursor::<Uuid>(q.cursor.as_deref())?;
    Ok(axum::Json(
        st.audit.list(&p, before, q.action, q.limit).await?.into(),
    ))
}
