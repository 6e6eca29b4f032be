//! `/v1/secrets`: store, list and delete the tenant's secrets (admins only). Write-only:
//! no response ever carries a value, only its metadata.

use super::SecretPage;
use crate::auth::Caller;
use crate::error::{ApiResult, Problem};
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::routes::agents::ListQuery;
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use baton_core::model::SecretMeta;
use serde::Deserialize;

/// A secret's value. Not `Debug`: it is never formatted.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutSecretBody {
    /// The value: 1 byte to 64 KiB of text without NUL. Never returned.
    #[schema(min_length = 1)]
    pub value: String,
}

/// Store a secret, replacing the value of one of that name (admin).
#[utoipa::path(put, path = "/v1/secrets/{name}", operation_id = "putSecret", tag = "secrets", request_body = PutSecretBody,
    params(("name" = String, Path, description = "Secret name: `[A-Za-z0-9_-]{1,64}`",
        pattern = "^[A-Za-z0-9_-]{1,64}$")),
    responses((status = 200, body = SecretMeta), (status = "4XX", body = Problem)))]
pub async fn put(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(name): ApiPath<String>,
    ApiJson(b): ApiJson<PutSecretBody>,
) -> ApiResult<axum::Json<SecretMeta>> {
    Ok(axum::Json(st.secrets.put(&p, &name, &b.value).await?))
}

/// List secrets in name order: metadata only (admin).
#[utoipa::path(get, path = "/v1/secrets", operation_id = "listSecrets", tag = "secrets", params(ListQuery),
    responses((status = 200, body = SecretPage), (status = "4XX", body = Problem)))]
pub async fn list(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> ApiResult<axum::Json<SecretPage>> {
    Ok(axum::Json(
        st.secrets.list(&p, q.cursor, q.limit).await?.into(),
    ))
}

/// Delete a secret (admin).
#[utoipa::path(delete, path = "/v1/secrets/{name}", operation_id = "deleteSecret", tag = "secrets",
    params(("name" = String, Path, description = "Secret name",
        pattern = "^[A-Za-z0-9_-]{1,64}$")),
    responses((status = 204), (status = "4XX", body = Problem)))]
pub async fn delete(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<StatusCode> {
    st.secrets.delete(&p, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}
