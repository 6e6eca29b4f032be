//! `/v1/tools`: define, update, get, list, archive, restore and delete the tenant's tools
//! (admins change them, everyone reads).

use super::{ToolPage, parse_cursor};
use crate::auth::Caller;
use crate::error::{ApiResult, Problem};
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::routes::agents::ListQuery;
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use baton_core::ToolId;
use baton_core::model::Tool;
use baton_core::tools::NewTool;

/// Define a tool (admin).
#[utoipa::path(post, path = "/v1/tools", operation_id = "createTool", tag = "tools", request_body = NewTool,
    responses((status = 201, body = Tool), (status = "4XX", body = Problem)))]
pub async fn create(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiJson(new): ApiJson<NewTool>,
) -> ApiResult<(StatusCode, axum::Json<Tool>)> {
    let tool = st.tools.create(&p, new).await?;
    Ok((StatusCode::CREATED, axum::Json(tool)))
}

/// List tools, newest first.
#[utoipa::path(get, path = "/v1/tools", operation_id = "listTools", tag = "tools", params(ListQuery),
    responses((status = 200, body = ToolPage), (status = "4XX", body = Problem)))]
pub async fn list(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> ApiResult<axum::Json<ToolPage>> {
    let cursor = parse_cursor::<ToolId>(q.cursor.as_deref())?;
    let archived = q.archived.unwrap_or(false);
    Ok(axum::Json(
        st.tools.list(&p, archived, cursor, q.limit).await?.into(),
    ))
}

/// Archive a tool (admin): no new agent version may name it; the versions that do keep
/// calling it. Archiving an archived tool changes nothing.
#[utoipa::path(post, path = "/v1/tools/{tool_id}/archive", operation_id = "archiveTool", tag = "tools",
    params(("tool_id" = ToolId, Path, description = "Tool id")),
    responses((status = 200, body = Tool), (status = "4XX", body = Problem)))]
pub async fn archive(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(id): ApiPath<ToolId>,
) -> ApiResult<axum::Json<Tool>> {
    Ok(axum::Json(st.tools.set_archived(&p, id, true).await?))
}

/// Restore an archived tool (admin).
#[utoipa::path(post, path = "/v1/tools/{tool_id}/restore", operation_id = "restoreTool", tag = "tools",
    params(("tool_id" = ToolId, Path, description = "Tool id")),
    responses((status = 200, body = Tool), (status = "4XX", body = Problem)))]
pub async fn restore(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(id): ApiPath<ToolId>,
) -> ApiResult<axum::Json<Tool>> {
    Ok(axum::Json(st.tools.set_archived(&p, id, false).await?))
}

/// Get one tool.
#[utoipa::path(get, path = "/v1/tools/{tool_id}", operation_id = "getTool", tag = "tools",
    params(("tool_id" = ToolId, Path, description = "Tool id")),
    responses((status = 200, body = Tool), (status = "4XX", body = Problem)))]
pub async fn get(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(id): ApiPath<ToolId>,
) -> ApiResult<axum::Json<Tool>> {
    Ok(axum::Json(st.tools.get(&p, id).await?))
}

/// Replace a tool's definition (admin): stores a new version. Runs created from now on
/// call it; runs created before keep the version they started with. An archived tool
/// answers 409 `wrong_state`; a name another tool has, 409 `already_exists`.
#[utoipa::path(put, path = "/v1/tools/{tool_id}", operation_id = "updateTool", tag = "tools",
    request_body = NewTool,
    params(("tool_id" = ToolId, Path, description = "Tool id")),
    responses((status = 200, body = Tool), (status = "4XX", body = Problem)))]
pub async fn update(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(id): ApiPath<ToolId>,
    ApiJson(new): ApiJson<NewTool>,
) -> ApiResult<axum::Json<Tool>> {
    Ok(axum::Json(st.tools.update(&p, id, new).await?))
}

/// Delete an archived tool with every version of it (admin). 409 `wrong_state` for a tool
/// not archived; 409 `in_use` while a run not ended yet calls it or an agent not archived
/// names it.
#[utoipa::path(delete, path = "/v1/tools/{tool_id}", operation_id = "deleteTool", tag = "tools",
    params(("tool_id" = ToolId, Path, description = "Tool id")),
    responses((status = 204), (status = "4XX", body = Problem)))]
pub async fn delete(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(id): ApiPath<ToolId>,
) -> ApiResult<StatusCode> {
    st.tools.delete(&p, id).await?;
    Ok(StatusCode::NO_CONTENT)
}
