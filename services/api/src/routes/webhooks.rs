//! `/v1/webhooks`: the tenant's webhook endpoints (admins): register, list, get, replace,
//! rotate the secret, enable again, delete; and each endpoint's deliveries, with their
//! attempts, to read and replay.

use super::{DeliveryPage, PageQuery, WebhookPage, parse_cursor};
use crate::auth::Caller;
use crate::error::{ApiResult, Problem};
use crate::extract::{ApiJson, ApiPath, ApiQuery, OptionalJson};
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use baton_core::WebhookId;
use baton_core::model::{DeliveryState, Webhook, WebhookSpec};
use baton_core::webhooks::{CreatedWebhook, DeliveryDetail, RotateSecret};
use serde::Deserialize;

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DeliveryQuery {
    /// Only deliveries in this state.
    pub state: Option<DeliveryState>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// Page size, 1 to 500 (default 50).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<u32>,
}

/// Register a webhook endpoint (admin). The answer holds its signing secret, shown this
/// once.
#[utoipa::path(post, path = "/v1/webhooks", operation_id = "createWebhook", tag = "webhooks",
    request_body = WebhookSpec,
    responses((status = 201, body = CreatedWebhook), (status = "4XX", body = Problem)))]
pub async fn create(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiJson(spec): ApiJson<WebhookSpec>,
) -> ApiResult<(StatusCode, axum::Json<CreatedWebhook>)> {
    let created = st.webhooks.create(&p, spec).await?;
    Ok((StatusCode::CREATED, axum::Json(created)))
}

/// List webhook endpoints, newest first (admin).
#[utoipa::path(get, path = "/v1/webhooks", operation_id = "listWebhooks", tag = "webhooks",
    params(PageQuery),
    responses((status = 200, body = WebhookPage), (status = "4XX", body = Problem)))]
pub async fn list(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiQuery(q): ApiQuery<PageQuery>,
) -> ApiResult<axum::Json<WebhookPage>> {
    let cursor = parse_cursor::<WebhookId>(q.cursor.as_deref())?;
    Ok(axum::Json(
        st.webhooks.list(&p, cursor, q.limit).await?.into(),
    ))
}

/// Get a webhook endpoint (admin).
#[utoipa::path(get, path = "/v1/webhooks/{webhook_id}", operation_id = "getWebhook", tag = "webhooks",
    params(("webhook_id" = WebhookId, Path, description = "Webhook id")),
    responses((status = 200, body = Webhook), (status = "4XX", body = Problem)))]
pub async fn get(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(id): ApiPath<WebhookId>,
) -> ApiResult<axum::Json<Webhook>> {
    Ok(axum::Json(st.webhooks.get(&p, id).await?))
}

/// Replace a webhook endpoint's URL, description and events (admin); its secret stays.
#[utoipa::path(put, path = "/v1/webhooks/{webhook_id}", operation_id = "updateWebhook", tag = "webhooks",
    request_body = WebhookSpec,
    params(("webhook_id" = WebhookId, Path, description = "Webhook id")),
    responses((status = 200, body = Webhook), (status = "4XX", body = Problem)))]
pub async fn update(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(id): ApiPath<WebhookId>,
    ApiJson(spec): ApiJson<WebhookSpec>,
) -> ApiResult<axum::Json<Webhook>> {
    Ok(axum::Json(st.webhooks.update(&p, id, spec).await?))
}

/// Delete a webhook endpoint with its deliveries (admin).
#[utoipa::path(delete, path = "/v1/webhooks/{webhook_id}", operation_id = "deleteWebhook", tag = "webhooks",
    params(("webhook_id" = WebhookId, Path, description = "Webhook id")),
    responses((status = 204), (status = "4XX", body = Problem)))]
pub async fn delete(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(id): ApiPath<WebhookId>,
) -> ApiResult<StatusCode> {
    st.webhooks.delete(&p, id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Make a new signing secret (admin), shown this once; the old one keeps signing beside
/// it for `overlap_secs` (default a day), so receivers switch without missing one.
#[utoipa::path(post, path = "/v1/webhooks/{webhook_id}/rotate-secret", operation_id = "rotateWebhookSecret", tag = "webhooks",
    request_body(content = RotateSecret, description = "Optional"),
    params(("webhook_id" = WebhookId, Path, description = "Webhook id")),
    responses((status = 200, body = CreatedWebhook), (status = "4XX", body = Problem)))]
pub async fn rotate_secret(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(id): ApiPath<WebhookId>,
    OptionalJson(body): OptionalJson<RotateSecret>,
) -> ApiResult<axum::Json<CreatedWebhook>> {
    Ok(axum::Json(st.webhooks.rotate_secret(&p, id, body).await?))
}

/// Enable a webhook endpoint again (admin) after it was disabled for failing.
#[utoipa::path(post, path = "/v1/webhooks/{webhook_id}/enable", operation_id = "enableWebhook", tag = "webhooks",
    params(("webhook_id" = WebhookId, Path, description = "Webhook id")),
    responses((status = 200, body = Webhook), (status = "4XX", body = Problem)))]
pub async fn enable(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(id): ApiPath<WebhookId>,
) -> ApiResult<axum::Json<Webhook>> {
    Ok(axum::Json(st.webhooks.enable(&p, id).await?))
}

/// List an endpoint's deliveries, newest first (admin).
#[utoipa::path(get, path = "/v1/webhooks/{webhook_id}/deliveries", operation_id = "listWebhookDeliveries", tag = "webhooks",
    params(("webhook_id" = WebhookId, Path, description = "Webhook id"), DeliveryQuery),
    responses((status = 200, body = DeliveryPage), (status = "4XX", body = Problem)))]
pub async fn deliveries(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(id): ApiPath<WebhookId>,
    ApiQuery(q): ApiQuery<DeliveryQuery>,
) -> ApiResult<axum::Json<DeliveryPage>> {
    let cursor = parse_cursor::<uuid::Uuid>(q.cursor.as_deref())?;
    Ok(axum::Json(
        st.webhooks
            .list_deliveries(&p, id, q.state, cursor, q.limit)
            .await?
            .into(),
    ))
}

/// Get a delivery with its attempts (admin).
#[utoipa::path(get, path = "/v1/webhooks/{webhook_id}/deliveries/{delivery_id}", operation_id = "getWebhookDelivery", tag = "webhooks",
    params(("webhook_id" = WebhookId, Path, description = "Webhook id"),
        ("delivery_id" = uuid::Uuid, Path, description = "Delivery id (its `webhook-id`)")),
    responses((status = 200, body = DeliveryDetail), (status = "4XX", body = Problem)))]
pub async fn delivery(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath((id, delivery)): ApiPath<(WebhookId, uuid::Uuid)>,
) -> ApiResult<axum::Json<DeliveryDetail>> {
    Ok(axum::Json(
        st.webhooks.get_delivery(&p, id, delivery).await?,
    ))
}

/// Deliver again (admin): the delivery is pending and due now, with the same
/// `webhook-id`.
#[utoipa::path(post, path = "/v1/webhooks/{webhook_id}/deliveries/{delivery_id}/replay", operation_id = "replayWebhookDelivery", tag = "webhooks",
    params(("webhook_id" = WebhookId, Path, description = "Webhook id"),
        ("delivery_id" = uuid::Uuid, Path, description = "Delivery id (its `webhook-id`)")),
    responses((status = 200, body = DeliveryDetail), (status = "4XX", body = Problem)))]
pub async fn replay(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath((id, delivery)): ApiPath<(WebhookId, uuid::Uuid)>,
) -> ApiResult<axum::Json<DeliveryDetail>> {
    Ok(axum::Json(st.webhooks.replay(&p, id, delivery).await?))
}
