//! `/v1/retention`: how long the tenant's ended runs are kept, and what the retention job
//! has deleted (admins). An agent's `limits.retention_days` overrides the default for its
//! runs.

use crate::auth::Caller;
use crate::error::{ApiResult, Problem};
use crate::extract::ApiJson;
use crate::state::AppState;
use axum::extract::State;
use baton_core::retention::{NewRetentionPolicy, RetentionView};

/// The tenant's retention policy, the job's progress on it, and how many ended runs are
/// due for deletion now (admin). `run_days` and `updated_at` are null when it never set
/// one: ended runs are kept until deleted.
#[utoipa::path(get, path = "/v1/retention", operation_id = "getRetention", tag = "retention",
    responses((status = 200, body = RetentionView), (status = "4XX", body = Problem)))]
pub async fn get(
    State(st): State<AppState>,
    Caller(p): Caller,
) -> ApiResult<axum::Json<RetentionView>> {
    Ok(axum::Json(st.retention.get(&p).await?))
}

/// Set how many days the tenant's ended runs are kept after their last change (admin), 1
/// to 36500, or null to keep them. The retention job deletes runs past it at its next
/// round (every minute by default), with everything recorded of them; live streams of a
/// deleted run end with `run.deleted`. Runs of an agent with `limits.retention_days` keep
/// the agent's.
#[utoipa::path(put, path = "/v1/retention", operation_id = "setRetention", tag = "retention",
    request_body = NewRetentionPolicy,
    responses((status = 200, body = RetentionView), (status = "4XX", body = Problem)))]
pub async fn put(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiJson(new): ApiJson<NewRetentionPolicy>,
) -> ApiResult<axum::Json<RetentionView>> {
    Ok(axum::Json(st.retention.set(&p, new).await?))
}
