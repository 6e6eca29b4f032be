//! `/v1/encryption-keys`: which encryption keys seal the tenant's secrets and checkpoints, and a
//! reseal of them under the active key, run in the background on the replica that took
//! the request (admins only). Key ids only: no answer carries key material or anything a
//! record holds.

use crate::auth::Caller;
use crate::error::{ApiResult, Problem};
use crate::extract::ApiQuery;
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::http::header::LOCATION;
use baton_core::encryption_keys::{ResealJob, TenantKeys};
use serde::{Deserialize, Serialize};

/// Where a reseal's progress shows.
const STATUS_URL: &str = "/v1/encryption-keys";

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ResealQuery {
    /// Records re-sealed per transaction, 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub batch: Option<u32>,
}

/// A reseal accepted: it runs in the background; its progress shows at `status_url`.
#[derive(Serialize, utoipa::ToSchema)]
pub struct ResealAccepted {
    /// `/v1/encryption-keys`.
    pub status_url: String,
    /// The reseal as it stands: just started, or the one already running.
    pub reseal: ResealJob,
}

/// Per encryption key id, the tenant's secrets and checkpoints sealed under it; the active
/// key; the tenant's latest reseal on this replica (admin).
#[utoipa::path(get, path = "/v1/encryption-keys", operation_id = "getEncryptionKeyStatus", tag = "encryption-keys",
    responses((status = 200, body = TenantKeys), (status = "4XX", body = Problem)))]
pub async fn status(
    State(st): State<AppState>,
    Caller(p): Caller,
) -> ApiResult<axum::Json<TenantKeys>> {
    Ok(axum::Json(st.encryption_keys.status(&p).await?))
}

/// Re-seal the tenant's secrets and checkpoints that are not under the active key under it
/// (admin): in the background on this replica, in batches of one transaction each.
/// Answers at once; `GET /v1/encryption-keys` shows the progress. While a reseal of the tenant runs
/// on this replica, this answers with that one rather than starting another.
#[utoipa::path(post, path = "/v1/encryption-keys/reseal", operation_id = "startReseal", tag = "encryption-keys", params(ResealQuery),
    responses(
        (status = 202, body = ResealAccepted,
         headers(("location" = String, description = "Where the progress shows: `/v1/encryption-keys`"))),
        (status = "4XX", body = Problem)))]
pub async fn reseal(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiQuery(q): ApiQuery<ResealQuery>,
) -> ApiResult<(
    StatusCode,
    [(axum::http::HeaderName, &'static str); 1],
    axum::Json<ResealAccepted>,
)> {
    let (job, task) = st.encryption_keys.start_reseal(&p, q.batch)?;
    if let Some(task) = task {
        // Stops at a batch boundary when the server shuts down; a later request continues.
        let shutdown = st.shutdown.clone();
        st.tasks.spawn(task.run(move || shutdown.is_cancelled()));
    }
    Ok((
        StatusCode::ACCEPTED,
        [(LOCATION, STATUS_URL)],
        axum::Json(ResealAccepted {
            status_url: STATUS_URL.to_string(),
            reseal: job,
        }),
    ))
}
