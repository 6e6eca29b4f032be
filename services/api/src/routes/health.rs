//! `/livez` (the process answers) and `/readyz` (its database and bus answer too).

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

/// Readiness: the database and the bus answer.
#[utoipa::path(get, path = "/readyz", tag = "health",
    responses((status = 200), (status = 503, body = crate::error::Problem)))]
pub async fn readyz(State(st): State<AppState>) -> Response {
    if st.shutdown.is_cancelled() {
        return ApiError::new(Code::Unavailable, "shutting down").into_response();
    }
    let store = st.runs.log.store.ping().await;
    let bus = st.runs.bus().ping().await;
    match (store, bus) {
        (Ok(()), Ok(())) => axum::Json(json!({ "status": "ready" })).into_response(),
        (store, bus) => {
            let mut down = Vec::new();
            if let Err(e) = store {
                tracing::warn!(error = %e, "readiness: database check failed");
                down.push("database");
            }
            if let Err(e) = bus {
                tracing::warn!(error = %e, "readiness: bus check failed");
                down.push("bus");
            }
            ApiError::new(
                Code::Unavailable,
                format!("not ready: {} unavailable", down.join(" and ")),
            )
            .into_response()
        }
    }
}
