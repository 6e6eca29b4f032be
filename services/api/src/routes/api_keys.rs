//! `/v1/api-keys`: create, list and revoke the tenant's API keys (admins only). A key's
//! token is in the answer that creates it and in no other answer: listings show its
//! prefix, role and last use.

use super::{ApiKeyPage, parse_cursor};
use crate::auth::Caller;
use crate::error::{ApiResult, Problem};
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::routes::agents::ListQuery;
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use baton_core::api_keys::{CreatedApiKey, NewApiKey};
use uuid::Uuid;

/// Create an API key of a role no higher than the caller's (admin). The answer holds the
/// token, shown this once.
#[utoipa::path(post, path = "/v1/api-keys", operation_id = "createApiKey", tag = "api-keys", request_body = NewApiKey,
    responses((status = 201, body = CreatedApiKey), (status = "4XX", body = Problem)))]
pub async fn create(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiJson(new): ApiJson<NewApiKey>,
) -> ApiResult<(StatusCode, axum::Json<CreatedApiKey>)> {
    let created = st.api_keys.create(&p, new).await?;
    Ok((StatusCode::CREATED, axum::Json(created)))
}

/// List the tenant's API keys, newest first, revoked and expired ones included (admin).
#[utoipa::path(get, path = "/v1/api-keys", operation_id = "listApiKeys", tag = "api-keys", params(ListQuery),
    responses((status = 200, body = ApiKeyPage), (status = "4XX", body = Problem)))]
pub async fn list(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> ApiResult<axum::Json<ApiKeyPage>> {
    let cursor = parse_cursor::<Uuid>(q.cursor.as_deref())?;
    Ok(axum::Json(
        st.api_keys.list(&p, cursor, q.limit).await?.into(),
    ))
}

/// Revoke an API key (admin; the caller's own key too, but no key of a role above the
/// caller's). It fails from the next request on, on every replica. Revoking a revoked
/// key again answers `204` and keeps its first `revoked_at`.
#[utoipa::path(delete, path = "/v1/api-keys/{key_id}", operation_id = "revokeApiKey", tag = "api-keys",
    params(("key_id" = Uuid, Path, description = "API key id")),
    responses((status = 204), (status = "4XX", body = Problem)))]
pub async fn revoke(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> ApiResult<StatusCode> {
    st.api_keys.revoke(&p, id).await?;
    Ok(StatusCode::NO_CONTENT)
}
