//! `/livez` (the process answers) and `/readyz` (it can serve requests: its database
//! answers). A bus outage is reported but does not fail readiness: every replica shares
//! the same bus, so failing them all would turn a degraded service (live events arrive
//! late, from the database) into no service at all.

use crate::error::{ApiError, Code};
use crate::state::AppState;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// `/livez`'s answer.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Live {
    /// Always `ok`.
    #[schema(example = "ok")]
    pub status: &'static str,
}

/// `/readyz`'s answer when ready.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Ready {
    /// Always `ready`.
    #[schema(example = "ready")]
    pub status: &'static str,
    /// `ok`, or `unavailable` while the bus is down (live events then arrive late, from
    /// the database).
    #[schema(example = "ok")]
    pub bus: &'static str,
    /// `ok`, or `unavailable` when this replica cannot run workspace commands (no
    /// usable bubblewrap: its start-up log says why); the replica serves everything else.
    #[schema(example = "ok")]
    pub code_tools: &'static str,
    /// The replica that answered.
    pub replica: String,
}

/// Liveness: the process serves HTTP.
#[utoipa::path(get, path = "/livez", operation_id = "getLiveness", tag = "health", security(()),
    responses((status = 200, body = Live)))]
pub async fn livez() -> Response {
    axum::Json(Live { status: "ok" }).into_response()
}

/// Readiness: the database answers and the server is not shutting down. The body says
/// whether the bus is up (`"bus": "ok" | "unavailable"`), whether workspace commands can
/// run here (`"code_tools"`), and which replica answered.
#[utoipa::path(get, path = "/readyz", operation_id = "getReadiness", tag = "health", security(()),
    responses((status = 200, body = Ready), (status = 503, body = crate::error::Problem)))]
pub async fn readyz(State(st): State<AppState>) -> Response {
    if st.shutdown.is_cancelled() {
        return ApiError::new(Code::Unavailable, "shutting down").into_response();
    }
    if let Err(e) = st.runs.reader.ping().await {
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
    axum::Json(Ready {
        status: "ready",
        bus,
        code_tools: if st.code_tools_unavailable.is_some() {
            "unavailable"
        } else {
            "ok"
        },
        replica: st.replica.clone(),
    })
    .into_response()
}
