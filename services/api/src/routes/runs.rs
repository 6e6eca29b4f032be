//! `/v1/runs`: create, get, list, cancel; and a run's messages.

use super::{PageBody, parse_cursor};
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult, Code, Problem};
use crate::extract::{ApiJson, ApiPath, ApiQuery, OptionalJson};
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use baton_core::model::{Message, RunStatus, RunSummary};
use baton_core::runs::{CreateRun, CreatedRun, PostMessage, PostedMessage};
use baton_core::{AgentId, RunId};
use serde::Deserialize;

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateRunBody {
    pub agent_id: AgentId,
    /// At most 200 characters.
    #[schema(max_length = 200)]
    pub title: Option<String>,
    /// A first user message (1 to 200000 characters, not blank); the run starts its first
    /// turn at once.
    #[schema(min_length = 1, max_length = 200000)]
    pub message: Option<String>,
    /// Idempotency key (1 to 200 characters): repeating it returns the original run.
    #[schema(min_length = 1, max_length = 200)]
    pub request_id: Option<String>,
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PostMessageBody {
    /// 1 to 200000 characters, not blank.
    #[schema(min_length = 1, max_length = 200000)]
    pub content: String,
    /// Idempotency key (1 to 200 characters): repeating it returns the original message,
    /// never a second one.
    #[schema(min_length = 1, max_length = 200)]
    pub request_id: Option<String>,
}

#[derive(Deserialize, Default, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelBody {
    /// At most 200 characters.
    #[schema(max_length = 200)]
    pub reason: Option<String>,
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RunListQuery {
    /// Only runs in this status.
    #[param(value_type = Option<RunStatus>)]
    pub status: Option<String>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// Page size, 1 to 500 (default 50).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<u32>,
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct MessageListQuery {
    /// Only messages after this `seq` (the previous page's `next_cursor`).
    #[param(value_type = Option<i64>, minimum = 0)]
    pub cursor: Option<String>,
    /// Page size, 1 to 500 (default 50).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<u32>,
}

/// Create a run, optionally with its first message.
#[utoipa::path(post, path = "/v1/runs", tag = "runs", request_body = CreateRunBody,
    responses((status = 201, body = CreatedRun), (status = "4XX", body = Problem)))]
pub async fn create(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiJson(body): ApiJson<CreateRunBody>,
) -> ApiResult<(StatusCode, axum::Json<CreatedRun>)> {
    let cmd = CreateRun {
        agent_id: body.agent_id,
        title: body.title,
        message: body.message,
        request_id: body.request_id,
    };
    let created = st.runs.create_run(&p, cmd).await?;
    Ok((StatusCode::CREATED, axum::Json(created)))
}

/// List runs, newest first.
#[utoipa::path(get, path = "/v1/runs", tag = "runs", params(RunListQuery),
    responses((status = 200, body = PageBody<RunSummary>), (status = "4XX", body = Problem)))]
pub async fn list(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiQuery(q): ApiQuery<RunListQuery>,
) -> ApiResult<axum::Json<PageBody<RunSummary>>> {
    let status = q
        .status
        .as_deref()
        .map(|s| {
            RunStatus::parse(s).ok_or_else(|| {
                let all: Vec<_> = RunStatus::ALL.iter().map(RunStatus::as_str).collect();
                ApiError::new(
                    Code::InvalidQuery,
                    format!("status {s:?} is not one of {}", all.join(", ")),
                )
            })
        })
        .transpose()?;
    let cursor = parse_cursor::<RunId>(q.cursor.as_deref())?;
    Ok(axum::Json(
        st.runs.list_runs(&p, status, cursor, q.limit).await?.into(),
    ))
}

/// Get one run.
#[utoipa::path(get, path = "/v1/runs/{run_id}", tag = "runs",
    params(("run_id" = RunId, Path, description = "Run id")),
    responses((status = 200, body = RunSummary), (status = "4XX", body = Problem)))]
pub async fn get(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(id): ApiPath<RunId>,
) -> ApiResult<axum::Json<RunSummary>> {
    Ok(axum::Json(st.runs.get_run(&p, id).await?))
}

/// Cancel a run: at once when idle, at the turn's next step boundary when busy.
#[utoipa::path(post, path = "/v1/runs/{run_id}/cancel", tag = "runs",
    params(("run_id" = RunId, Path, description = "Run id")),
    request_body(content = CancelBody, description = "Optional"),
    responses((status = 200, body = RunSummary), (status = "4XX", body = Problem)))]
pub async fn cancel(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(id): ApiPath<RunId>,
    OptionalJson(body): OptionalJson<CancelBody>,
) -> ApiResult<axum::Json<RunSummary>> {
    Ok(axum::Json(st.runs.cancel_run(&p, id, body.reason).await?))
}

/// Post a user message; starts a turn. 409 `run_busy` while a turn runs.
#[utoipa::path(post, path = "/v1/runs/{run_id}/messages", tag = "runs",
    params(("run_id" = RunId, Path, description = "Run id")),
    request_body = PostMessageBody,
    responses((status = 201, body = PostedMessage), (status = "4XX", body = Problem)))]
pub async fn post_message(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(id): ApiPath<RunId>,
    ApiJson(body): ApiJson<PostMessageBody>,
) -> ApiResult<(StatusCode, axum::Json<PostedMessage>)> {
    let cmd = PostMessage {
        content: body.content,
        request_id: body.request_id,
    };
    let posted = st.runs.post_message(&p, id, cmd).await?;
    Ok((StatusCode::CREATED, axum::Json(posted)))
}

/// List a run's messages in order.
#[utoipa::path(get, path = "/v1/runs/{run_id}/messages", tag = "runs",
    params(("run_id" = RunId, Path, description = "Run id"), MessageListQuery),
    responses((status = 200, body = PageBody<Message>), (status = "4XX", body = Problem)))]
pub async fn list_messages(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(id): ApiPath<RunId>,
    ApiQuery(q): ApiQuery<MessageListQuery>,
) -> ApiResult<axum::Json<PageBody<Message>>> {
    let after = parse_cursor::<i64>(q.cursor.as_deref())?;
    Ok(axum::Json(
        st.runs.list_messages(&p, id, after, q.limit).await?.into(),
    ))
}
