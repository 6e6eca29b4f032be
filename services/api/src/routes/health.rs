//! `/livez` (the process answers) and `/readyz` (it can serve requests: its database
//! answers). A bus outage is reported but does not fail readiness: every replica shares
//! the same bus, so failing them all would turn a degraded service (live events arrive
//! late, from the database) into no service at all.

use crate::error::{ApiError, Code};
use crate::state::AppState;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// Liveness: the process serves HTTP.
#[utoipa::path(get, path = "/livez", tag = "health", responses((status = 200)))]
pub async fn livez() -> Response {
    axum::Json(json!({ "status": "ok" })).into_response()
}

/// Readiness: the database answers and the server is not shutting down. The body says
/// whether the bus is up (`"bus": "ok" | "unavailable"`) and which replica answered.
#[utoipa::path(get, path = "/readyz", tag = "health",
    responses((status = 200), (status = 503, body = crate::error::Problem)))]
pub async fn readyz(State(st): State<AppState>) -> Response {
    if st.shutdown.is_cancelled() {
        return ApiError::new(Code::Unavailable, "shutting down").into_response();
    }
    if let Err(e) = st.runs.log.store.ping().await {
        tracing::warn!(error = %e, "readiness: database check failed");
        return ApiError::new(Code::Unavailable, "not ready: the database is unavailable")
            .into_response();
    }
    let bus = match st.runs.bus().ping().await {
        Ok(()) => "ok",
        Err(e) => {
            tracing::warn!(error = %e, "readiness: the bus is unavailable; serving degraded");
            "unavailable"
        }
    };
    axum::Json(json!({ "status": "ready", "bus": bus, "replica": st.replica })).into_response()
}
