//! `/v1/tools`: define, get, list, archive and restore the tenant's tools (admins define
//! and archive, everyone reads).

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
