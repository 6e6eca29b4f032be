//! `/v1/runs`: create (optionally waiting for the first turn), get, list (filtered and
//! searched), update (title and metadata), cancel; and a run's messages.

use super::{MessagePage, RunPage, parse_cursor};
use crate::RequestStart;
use crate::auth::{Caller, Streaming};
use crate::error::{ApiError, ApiResult, Code, Problem};
use crate::extract::{ApiJson, ApiPath, ApiQuery, OptionalJson};
use crate::state::AppState;
use axum::Extension;
use axum::extract::{RawQuery, State};
use axum::http::{StatusCode, header::LOCATION};
use axum::response::{IntoResponse, Response};
use baton_core::CoreError;
use baton_core::model::{Message, MessageStrategy, Principal, RunStatus, RunSummary};
use baton_core::ports::RunFilter;
use baton_core::runs::metadata::RunPatch;
use baton_core::runs::{
    CreateRun, CreatedRun, PostMessage, Posted, PostedMessage, QueuedMessage, TurnResult,
};
use baton_core::{AgentId, RunId};
use baton_events::Metadata;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use std::time::Duration;
use tokio::time::Instant;

/// Longest `wait`, in seconds.
pub const MAX_WAIT_SECONDS: u32 = 60;
/// How long before the request deadline a wait gives up, so its 202 is still answered.
const WAIT_MARGIN: Duration = Duration::from_secs(1);

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateRunBody {
    pub agent_id: AgentId,
    /// At most 200 characters.
    #[schema(max_length = 200)]
    pub title: Option<String>,
    /// Labels to find the run by: at most 16 keys of 1 to 64 ASCII letters, digits, `_`,
    /// `-` or `.`, each with a string value of at most 512 characters.
    #[schema(value_type = Option<std::collections::BTreeMap<String, String>>)]
    pub metadata: Option<Metadata>,
    /// A first user message (1 to 200000 characters, not blank); the run starts its first
    /// turn at once.
    #[schema(min_length = 1, max_length = 200000)]
    pub message: Option<String>,
    /// Idempotency key (1 to 200 characters, not starting with `schedule:` or
    /// `delegate:`): repeating it returns the original run.
    #[schema(min_length = 1, max_length = 200)]
    pub request_id: Option<String>,
    /// Seconds (0 to 60) to wait for the first turn to settle; needs `message`. See
    /// `postRunMessage` for what comes back.
    #[schema(minimum = 0, maximum = 60)]
    pub wait: Option<u32>,
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PostMessageBody {
    /// 1 to 200000 characters, not blank.
    #[schema(min_length = 1, max_length = 200000)]
    pub content: String,
    /// Idempotency key (1 to 200 characters, not starting with `schedule:` or
    /// `delegate:`): repeating it returns the original message, never a second one.
    #[schema(min_length = 1, max_length = 200)]
    pub request_id: Option<String>,
    /// What the message does if a turn is in progress (queued, running, or waiting for an
    /// action): `reject` answers 409 `run_busy`; `enqueue` answers 202 with the message
    /// queued, and it starts a turn of its own when the turns before it have settled;
    /// `interrupt` and `rollback` queue it first and end the turn in progress early
    /// (`rollback` also drops that turn's steps from what the model sees next). Absent:
    /// the agent's `limits.message_strategy` (`reject` unless set). A message to an idle
    /// run starts a turn whatever the strategy; to a run being cancelled, none is queued
    /// (409 `wrong_state`).
    pub strategy: Option<MessageStrategy>,
    /// Seconds (0 to 60) to wait for the turn to settle: completed, failed, waiting for an
    /// action, or the run ended. Settled in time: `result` holds the outcome, the run and
    /// the model's reply. Not settled: 202 with `Location` naming the run. The wait ends
    /// one second before the server's request timeout (`http.request_timeout_ms`) at the
    /// latest. A queued message's wait covers its time in the queue.
    #[schema(minimum = 0, maximum = 60)]
    pub wait: Option<u32>,
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
    /// Only runs of this agent.
    #[param(value_type = Option<AgentId>)]
    pub agent_id: Option<String>,
    /// Only runs a `delegate` tool call of this run started (its children).
    #[param(value_type = Option<RunId>)]
    pub parent_run_id: Option<String>,
    /// Only runs whose title contains this (1 to 200 characters), ignoring case.
    #[param(min_length = 1, max_length = 200)]
    pub q: Option<String>,
    /// Only runs created after this time (RFC 3339, e.g. `2026-12-01T00:00:00Z`).
    pub created_after: Option<DateTime<Utc>>,
    /// Only runs created before this time (RFC 3339).
    pub created_before: Option<DateTime<Utc>>,
    /// Only runs last changed after this time (RFC 3339).
    pub updated_after: Option<DateTime<Utc>>,
    /// Only runs last changed before this time (RFC 3339).
    pub updated_before: Option<DateTime<Utc>>,
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

/// Create a run, optionally with its first message (and `wait` for its first turn).
#[utoipa::path(post, path = "/v1/runs", operation_id = "createRun", tag = "runs", request_body = CreateRunBody,
    responses((status = 201, body = CreatedRun),
        (status = 202, body = CreatedRun, description = "Created; the first turn did not settle within `wait`",
            headers(("Location" = String, description = "The run"))),
        (status = "4XX", body = Problem)))]
pub async fn create(
    State(st): State<AppState>,
    start: Option<Extension<RequestStart>>,
    caller: Streaming,
    ApiJson(body): ApiJson<CreateRunBody>,
) -> ApiResult<Response> {
    let wait = wait_for(&st, body.wait, start)?;
    if wait.is_some() && body.message.is_none() {
        return Err(ApiError::new(
            Code::InvalidBody,
            "wait needs a first message: there is no turn to wait for",
        ));
    }
    baton_core::validate::client_request_id(body.request_id.as_deref())?;
    let permit = wait.map(|_| open_permit(&st, &caller)).transpose()?;
    let cmd = CreateRun {
        agent_id: body.agent_id,
        title: body.title,
        metadata: body.metadata.unwrap_or_default(),
        message: body.message,
        request_id: body.request_id,
    };
    let mut created = st.runs.create_run(&caller.principal, cmd).await?;
    let (Some(wait), Some(message)) = (wait, created.message.clone()) else {
        return Ok((StatusCode::CREATED, axum::Json(created)).into_response());
    };
    created.result = settle(&st, caller, message, 1, wait).await;
    drop(permit);
    Ok(answer(created.run.id, created.result.is_some(), created))
}

/// List runs, newest first, narrowed by every filter given.
#[utoipa::path(get, path = "/v1/runs", operation_id = "listRuns", tag = "runs",
    params(RunListQuery,
        ("metadata" = Option<Vec<String>>, Query, explode,
            description = "Only runs labelled `key:value` (repeat for several: all must hold)")),
    responses((status = 200, body = RunPage), (status = "4XX", body = Problem)))]
pub async fn list(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiQuery(q): ApiQuery<RunListQuery>,
    RawQuery(raw): RawQuery,
) -> ApiResult<axum::Json<RunPage>> {
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
    let agent = q
        .agent_id
        .as_deref()
        .map(|a| {
            a.parse::<AgentId>().map_err(|_| {
                ApiError::new(Code::InvalidQuery, format!("agent_id {a:?} is not a UUID"))
            })
        })
        .transpose()?;
    let parent = q
        .parent_run_id
        .as_deref()
        .map(|r| {
            r.parse::<RunId>().map_err(|_| {
                ApiError::new(
                    Code::InvalidQuery,
                    format!("parent_run_id {r:?} is not a UUID"),
                )
            })
        })
        .transpose()?;
    let filter = RunFilter {
        agent,
        parent,
        status,
        metadata: metadata_filters(raw.as_deref().unwrap_or_default())?,
        title_contains: q.q,
        created_after: q.created_after,
        created_before: q.created_before,
        updated_after: q.updated_after,
        updated_before: q.updated_before,
    };
    let cursor = parse_cursor::<RunId>(q.cursor.as_deref())?;
    // A query that does not parse is `invalid_query`; one whose values break a bound
    // (checked by the core, like `limit`) is `invalid_request`.
    let page = st.runs.list_runs(&p, filter, cursor, q.limit).await?;
    Ok(axum::Json(page.into()))
}

/// The `metadata=key:value` pairs of a query string, in order. The key ends at the first
/// `:` (keys never hold one); the value may hold more.
fn metadata_filters(raw: &str) -> ApiResult<Vec<(String, String)>> {
    url::form_urlencoded::parse(raw.as_bytes())
        .filter(|(name, _)| name == "metadata")
        .map(|(_, pair)| match pair.split_once(':') {
            Some((k, v)) => Ok((k.to_string(), v.to_string())),
            None => Err(ApiError::new(
                Code::InvalidQuery,
                format!("metadata filter {pair:?} is not key:value"),
            )),
        })
        .collect()
}

/// Change a run's title and metadata: a JSON merge patch, in any status (a turn in
/// progress goes on undisturbed).
#[utoipa::path(patch, path = "/v1/runs/{run_id}", operation_id = "updateRun", tag = "runs",
    params(("run_id" = RunId, Path, description = "Run id")),
    request_body = RunPatch,
    responses((status = 200, body = RunSummary), (status = "4XX", body = Problem)))]
pub async fn update(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(id): ApiPath<RunId>,
    ApiJson(patch): ApiJson<RunPatch>,
) -> ApiResult<axum::Json<RunSummary>> {
    Ok(axum::Json(st.runs.update_run(&p, id, patch).await?))
}

/// Get one run.
#[utoipa::path(get, path = "/v1/runs/{run_id}", operation_id = "getRun", tag = "runs",
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
#[utoipa::path(post, path = "/v1/runs/{run_id}/cancel", operation_id = "cancelRun", tag = "runs",
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

/// Delete a run (admin) with its events, messages, receipts and checkpoints. 409
/// `run_busy` while a turn is in progress (cancel it first); live event streams of the run
/// end with `run.deleted`.
#[utoipa::path(delete, path = "/v1/runs/{run_id}", operation_id = "deleteRun", tag = "runs",
    params(("run_id" = RunId, Path, description = "Run id")),
    responses((status = 204), (status = "4XX", body = Problem)))]
pub async fn delete(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(id): ApiPath<RunId>,
) -> ApiResult<StatusCode> {
    st.runs.delete_run(&p, id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Post a user message; starts a turn (and `wait` for it). While a turn is in progress:
/// 409 `run_busy`, or queued with `strategy: enqueue`, `interrupt` or `rollback`.
#[utoipa::path(post, path = "/v1/runs/{run_id}/messages", operation_id = "postRunMessage", tag = "messages",
    params(("run_id" = RunId, Path, description = "Run id")),
    request_body = PostMessageBody,
    responses((status = 201, body = PostedMessage, description = "The message started a turn (with `wait`: the turn settled, after the message's time in the queue if it was queued)"),
        (status = 202, body = MessageAccepted, description = "Queued behind the turn in progress (a `QueuedMessage`), or posted and the turn did not settle within `wait` (a `PostedMessage`)",
            headers(("Location" = String, description = "The run"))),
        (status = "4XX", body = Problem)))]
pub async fn post_message(
    State(st): State<AppState>,
    start: Option<Extension<RequestStart>>,
    caller: Streaming,
    ApiPath(id): ApiPath<RunId>,
    ApiJson(body): ApiJson<PostMessageBody>,
) -> ApiResult<Response> {
    let wait = wait_for(&st, body.wait, start)?;
    baton_core::validate::client_request_id(body.request_id.as_deref())?;
    let permit = wait.map(|_| open_permit(&st, &caller)).transpose()?;
    let cmd = PostMessage {
        content: body.content,
        request_id: body.request_id,
        strategy: body.strategy,
    };
    let posted = st.runs.post_message(&caller.principal, id, cmd).await?;
    let answered = match (posted, wait) {
        (Posted::Turn(posted), None) => answer(id, true, MessageAccepted::Started(posted)),
        (Posted::Queued(queued), None) => answer(id, false, MessageAccepted::Queued(queued)),
        (Posted::Turn(mut posted), Some(wait)) => {
            let message = posted.message.clone();
            posted.result = settle(&st, caller, message, posted.turn, wait).await;
            answer(
                id,
                posted.result.is_some(),
                MessageAccepted::Started(posted),
            )
        }
        (Posted::Queued(queued), Some(wait)) => {
            let (runs, resync, q) = (st.runs.clone(), st.http.sse_resync, queued.clone());
            let settled = watched(&st, caller, wait, move |p| async move {
                runs.wait_queued(&p, &q, resync).await
            });
            match settled.await.flatten() {
                Some(posted) => answer(id, true, MessageAccepted::Started(Box::new(posted))),
                None => answer(id, false, MessageAccepted::Queued(queued)),
            }
        }
    };
    drop(permit);
    Ok(answered)
}

/// What `POST /v1/runs/{run_id}/messages` answers, told apart by `state`: the message
/// `started` a turn (201, or 202 when the turn did not settle within `wait`), or is
/// `queued` behind the turn in progress (202).
#[derive(serde::Serialize, utoipa::ToSchema)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum MessageAccepted {
    #[schema(title = "PostedMessage")]
    Started(Box<PostedMessage>),
    #[schema(title = "QueuedMessage")]
    Queued(QueuedMessage),
}

/// When the checked `wait` ends: `None` for no wait (absent or 0). Counted from the
/// request's start, and at the latest [`WAIT_MARGIN`] before its deadline.
fn wait_for(
    st: &AppState,
    seconds: Option<u32>,
    start: Option<Extension<RequestStart>>,
) -> ApiResult<Option<Instant>> {
    match seconds {
        None | Some(0) => Ok(None),
        Some(s) if s > MAX_WAIT_SECONDS => Err(ApiError::new(
            Code::InvalidBody,
            format!("wait must be 0 to {MAX_WAIT_SECONDS} seconds, not {s}"),
        )),
        Some(s) => {
            let start = start.map_or_else(Instant::now, |Extension(RequestStart(at))| at);
            let cap = st.http.request_timeout.saturating_sub(WAIT_MARGIN);
            Ok(Some(start + Duration::from_secs(s.into()).min(cap)))
        }
    }
}

/// A wait holds a bus subscription as an event stream does, and counts as one: refused
/// with 429 before anything is written.
fn open_permit(st: &AppState, caller: &Streaming) -> ApiResult<crate::streams::StreamPermit> {
    st.streams
        .open(&caller.principal)
        .map_err(|e| ApiError::rate_limited(e.wait, e.what))
}

/// Waits up to `until` for `turn`, asked for by `message`, to settle.
async fn settle(
    st: &AppState,
    caller: Streaming,
    message: Message,
    turn: i64,
    until: Instant,
) -> Option<TurnResult> {
    let (runs, resync) = (st.runs.clone(), st.http.sse_resync);
    watched(st, caller, until, move |p| async move {
        runs.wait_turn(&p, &message, turn, resync).await
    })
    .await
}

/// Runs `wait` (a wait on the run use cases, as the caller) until `until`. The write it
/// follows has succeeded, so nothing here fails the request: a wait cut short by the
/// server shutting down, by the caller's credentials ending, or by an error is answered
/// as one that ran out (`None`: 202), and the client looks at the run.
async fn watched<T, Fut>(
    st: &AppState,
    caller: Streaming,
    until: Instant,
    wait: impl FnOnce(Principal) -> Fut,
) -> Option<T>
where
    Fut: std::future::Future<Output = Result<T, CoreError>>,
{
    let Streaming {
        principal,
        identity,
        token_hash,
    } = caller;
    let tenant = principal.tenant;
    let watch = st.revocations.watch(&identity, tenant);
    let ended = watch.ended(st.auth.clone(), identity, token_hash, tenant);
    let settled = wait(principal);
    tokio::select! {
        r = settled => r
            .inspect_err(|e| tracing::warn!(error = %e, "waiting for a turn failed; answering 202"))
            .ok(),
        () = tokio::time::sleep_until(until) => None,
        () = st.shutdown.cancelled() => None,
        () = ended => None,
    }
}

/// 201 with the body when the turn settled; 202 with `Location` naming the run when not.
fn answer(run: RunId, settled: bool, body: impl serde::Serialize) -> Response {
    let body = axum::Json(body);
    if settled {
        return (StatusCode::CREATED, body).into_response();
    }
    let location = format!("/v1/runs/{run}");
    (StatusCode::ACCEPTED, [(LOCATION, location)], body).into_response()
}

/// List a run's messages in order.
#[utoipa::path(get, path = "/v1/runs/{run_id}/messages", operation_id = "listRunMessages", tag = "messages",
    params(("run_id" = RunId, Path, description = "Run id"), MessageListQuery),
    responses((status = 200, body = MessagePage), (status = "4XX", body = Problem)))]
pub async fn list_messages(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(id): ApiPath<RunId>,
    ApiQuery(q): ApiQuery<MessageListQuery>,
) -> ApiResult<axum::Json<MessagePage>> {
    let after = parse_cursor::<i64>(q.cursor.as_deref())?;
    Ok(axum::Json(
        st.runs.list_messages(&p, id, after, q.limit).await?.into(),
    ))
}
