//! `/v1/schedules`: an agent's runs started on a timetable. Create, list, get (with the
//! next fire times), replace, pause, resume, delete, and run now. Members manage them;
//! viewers read them. The runs a schedule started carry its id in the `schedule_id`
//! label (`GET /v1/runs?metadata=schedule_id:<id>`).

use super::{SchedulePage, parse_cursor};
use crate::auth::Caller;
use crate::error::{ApiResult, Problem};
use crate::extract::{ApiJson, ApiPath, ApiQuery, OptionalJson};
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use baton_core::model::{Schedule, ScheduleSpec};
use baton_core::runs::CreatedRun;
use baton_core::{AgentId, ScheduleId};
use serde::Deserialize;

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only the schedules of this agent.
    pub agent_id: Option<AgentId>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// Page size, 1 to 500 (default 50).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<u32>,
}

/// A "run now" of a schedule.
#[derive(Deserialize, Default, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunNowBody {
    /// Makes the call idempotent: the same value starts the run once (at most 100
    /// characters). The run's own `request_id` is `schedule:<id>:now:<this>`.
    #[schema(max_length = 100)]
    pub request_id: Option<String>,
}

/// Create a schedule (member): each fire time of its cron expression, read in its time
/// zone, starts one run of its agent with the rendered message, on behalf of the
/// caller.
#[utoipa::path(post, path = "/v1/schedules", operation_id = "createSchedule", tag = "schedules",
    request_body = ScheduleSpec,
    responses((status = 201, body = Schedule), (status = "4XX", body = Problem)))]
pub async fn create(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiJson(spec): ApiJson<ScheduleSpec>,
) -> ApiResult<(StatusCode, axum::Json<Schedule>)> {
    let s = st.schedules.create(&p, spec).await?;
    Ok((StatusCode::CREATED, axum::Json(s)))
}

/// List schedules, newest first.
#[utoipa::path(get, path = "/v1/schedules", operation_id = "listSchedules", tag = "schedules",
    params(ListQuery),
    responses((status = 200, body = SchedulePage), (status = "4XX", body = Problem)))]
pub async fn list(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> ApiResult<axum::Json<SchedulePage>> {
    let cursor = parse_cursor::<ScheduleId>(q.cursor.as_deref())?;
    Ok(axum::Json(
        st.schedules
            .list(&p, q.agent_id, cursor, q.limit)
            .await?
            .into(),
    ))
}

/// Get a schedule, with its next fire time and the ones after.
#[utoipa::path(get, path = "/v1/schedules/{schedule_id}", operation_id = "getSchedule", tag = "schedules",
    params(("schedule_id" = ScheduleId, Path, description = "Schedule id")),
    responses((status = 200, body = Schedule), (status = "4XX", body = Problem)))]
pub async fn get(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(id): ApiPath<ScheduleId>,
) -> ApiResult<axum::Json<Schedule>> {
    Ok(axum::Json(st.schedules.get(&p, id).await?))
}

/// Replace a schedule's definition (member); the caller becomes its owner. An active
/// schedule goes on from the new timetable's first fire time from now.
#[utoipa::path(put, path = "/v1/schedules/{schedule_id}", operation_id = "updateSchedule", tag = "schedules",
    request_body = ScheduleSpec,
    params(("schedule_id" = ScheduleId, Path, description = "Schedule id")),
    responses((status = 200, body = Schedule), (status = "4XX", body = Problem)))]
pub async fn update(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(id): ApiPath<ScheduleId>,
    ApiJson(spec): ApiJson<ScheduleSpec>,
) -> ApiResult<axum::Json<Schedule>> {
    Ok(axum::Json(st.schedules.update(&p, id, spec).await?))
}

/// Pause a schedule (member): it fires no more until resumed.
#[utoipa::path(post, path = "/v1/schedules/{schedule_id}/pause", operation_id = "pauseSchedule", tag = "schedules",
    params(("schedule_id" = ScheduleId, Path, description = "Schedule id")),
    responses((status = 200, body = Schedule), (status = "4XX", body = Problem)))]
pub async fn pause(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(id): ApiPath<ScheduleId>,
) -> ApiResult<axum::Json<Schedule>> {
    Ok(axum::Json(st.schedules.pause(&p, id).await?))
}

/// Resume a paused schedule (member) from its first fire time from now; fire times that
/// passed while it was paused are not fired. The caller becomes its owner.
#[utoipa::path(post, path = "/v1/schedules/{schedule_id}/resume", operation_id = "resumeSchedule", tag = "schedules",
    params(("schedule_id" = ScheduleId, Path, description = "Schedule id")),
    responses((status = 200, body = Schedule), (status = "4XX", body = Problem)))]
pub async fn resume(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(id): ApiPath<ScheduleId>,
) -> ApiResult<axum::Json<Schedule>> {
    Ok(axum::Json(st.schedules.resume(&p, id).await?))
}

/// Delete a schedule (member); the runs it started stay.
#[utoipa::path(delete, path = "/v1/schedules/{schedule_id}", operation_id = "deleteSchedule", tag = "schedules",
    params(("schedule_id" = ScheduleId, Path, description = "Schedule id")),
    responses((status = 204), (status = "4XX", body = Problem)))]
pub async fn delete(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(id): ApiPath<ScheduleId>,
) -> ApiResult<StatusCode> {
    st.schedules.delete(&p, id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Start a run of the schedule now (whoever may create runs): audited, counted as a
/// fire, labelled `trigger: now`.
#[utoipa::path(post, path = "/v1/schedules/{schedule_id}/run", operation_id = "runScheduleNow", tag = "schedules",
    request_body(content = RunNowBody, description = "Optional"),
    params(("schedule_id" = ScheduleId, Path, description = "Schedule id")),
    responses((status = 201, body = CreatedRun), (status = "4XX", body = Problem)))]
pub async fn run_now(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(id): ApiPath<ScheduleId>,
    OptionalJson(body): OptionalJson<RunNowBody>,
) -> ApiResult<(StatusCode, axum::Json<CreatedRun>)> {
    let created = st.schedules.run_now(&p, id, body.request_id).await?;
    Ok((StatusCode::CREATED, axum::Json(created)))
}
