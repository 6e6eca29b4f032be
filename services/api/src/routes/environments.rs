//! `/v1/environments`: where workspace commands (`shell` and `python` tools) run. The
//! operator's environments are configured on the servers and listed read-only; a
//! tenant's admins define environments of their own that narrow one of them.

use super::EnvironmentPage;
use crate::auth::Caller;
use crate::error::{ApiResult, Problem};
use crate::extract::{ApiJson, ApiPath};
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use baton_core::environments::NewEnvironment;
use baton_core::model::EnvironmentView;

/// The execution environments (viewer): the operator's (`source: operator`), then the
/// tenant's own (`source: tenant`).
#[utoipa::path(get, path = "/v1/environments", operation_id = "listEnvironments", tag = "environments",
    responses((status = 200, body = EnvironmentPage), (status = "4XX", body = Problem)))]
pub async fn list(
    State(st): State<AppState>,
    Caller(p): Caller,
) -> ApiResult<axum::Json<EnvironmentPage>> {
    let items = st.environments.list(&p).await?;
    Ok(axum::Json(EnvironmentPage {
        items,
        next_cursor: None,
    }))
}

/// Define or replace one of the tenant's environments (admin): a base of the operator's,
/// narrowed (network only where the base allows it, limits at most the base's, an
/// `execute_role` at least the base's). Tools that name it use it from their next call.
#[utoipa::path(put, path = "/v1/environments/{name}", operation_id = "putEnvironment", tag = "environments",
    request_body = NewEnvironment,
    params(("name" = String, Path, description = "Environment name: `[a-z0-9_-]{1,64}`, not one of the operator's",
        pattern = "^[a-z0-9_-]{1,64}$")),
    responses((status = 200, body = EnvironmentView), (status = "4XX", body = Problem)))]
pub async fn put(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(name): ApiPath<String>,
    ApiJson(new): ApiJson<NewEnvironment>,
) -> ApiResult<axum::Json<EnvironmentView>> {
    Ok(axum::Json(st.environments.put(&p, &name, new).await?))
}

/// Delete one of the tenant's environments (admin). Tools that name it fail with a clear
/// error result at their next call.
#[utoipa::path(delete, path = "/v1/environments/{name}", operation_id = "deleteEnvironment", tag = "environments",
    params(("name" = String, Path, description = "Environment name")),
    responses((status = 204), (status = "4XX", body = Problem)))]
pub async fn delete(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<StatusCode> {
    st.environments.delete(&p, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}
