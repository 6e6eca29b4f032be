//! `/v1/egress-allowlist`: the hosts the tenant's tools and model providers may call
//! (admins). It narrows the installation's egress policy and never widens it; empty, the
//! policy alone decides.

use crate::auth::Caller;
use crate::error::{ApiResult, Problem};
use crate::extract::ApiJson;
use crate::state::AppState;
use axum::extract::State;
use baton_core::egress_allowlists::NewEgressAllowlist;
use baton_core::model::EgressAllowlist;

/// The tenant's egress allowlist (admin): empty, with `updated_at` null, when it never
/// set one.
#[utoipa::path(get, path = "/v1/egress-allowlist", operation_id = "getEgressAllowlist", tag = "egress",
    responses((status = 200, body = EgressAllowlist), (status = "4XX", body = Problem)))]
pub async fn get(
    State(st): State<AppState>,
    Caller(p): Caller,
) -> ApiResult<axum::Json<EgressAllowlist>> {
    Ok(axum::Json(st.egress_allowlists.get(&p).await?))
}

/// Replace the tenant's egress allowlist (admin): host names, `*.` and a domain, addresses
/// or ranges, at most 100; an empty list leaves the installation's policy alone. Existing
/// tools and agents are not changed: their calls outside the list are refused
/// (`egress_denied`) from the next turn on.
#[utoipa::path(put, path = "/v1/egress-allowlist", operation_id = "setEgressAllowlist", tag = "egress",
    request_body = NewEgressAllowlist,
    responses((status = 200, body = EgressAllowlist), (status = "4XX", body = Problem)))]
pub async fn put(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiJson(new): ApiJson<NewEgressAllowlist>,
) -> ApiResult<axum::Json<EgressAllowlist>> {
    Ok(axum::Json(st.egress_allowlists.set(&p, new).await?))
}
