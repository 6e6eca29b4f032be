//! `/v1/mcp-servers`: the tenant's MCP servers. Admins register, replace and delete them
//! and enable discovered tools; members ask for a discovery; anyone in the tenant reads.

use super::{McpServerPage, PageQuery, parse_cursor};
use crate::auth::Caller;
use crate::error::{ApiResult, Problem};
use crate::extract::{ApiJson, ApiPath, ApiQuery, OptionalJson};
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use baton_core::McpServerId;
use baton_core::mcp_servers::{DiscoveryReport, EnableMcpTool, McpToolList, NewMcpServer};
use baton_core::model::{McpServer, Tool};

/// Register an MCP server (admin). Its URL must pass the installation's egress policy
/// and the tenant's allowlist. Nothing is asked of the server until a discovery.
#[utoipa::path(post, path = "/v1/mcp-servers", operation_id = "createMcpServer", tag = "mcp-servers",
    request_body = NewMcpServer,
    responses((status = 201, body = McpServer), (status = "4XX", body = Problem)))]
pub async fn create(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiJson(new): ApiJson<NewMcpServer>,
) -> ApiResult<(StatusCode, axum::Json<McpServer>)> {
    let created = st.mcp_servers.create(&p, new).await?;
    Ok((StatusCode::CREATED, axum::Json(created)))
}

/// List MCP servers, newest first.
#[utoipa::path(get, path = "/v1/mcp-servers", operation_id = "listMcpServers", tag = "mcp-servers",
    params(PageQuery),
    responses((status = 200, body = McpServerPage), (status = "4XX", body = Problem)))]
pub async fn list(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiQuery(q): ApiQuery<PageQuery>,
) -> ApiResult<axum::Json<McpServerPage>> {
    let cursor = parse_cursor::<McpServerId>(q.cursor.as_deref())?;
    Ok(axum::Json(
        st.mcp_servers.list(&p, cursor, q.limit).await?.into(),
    ))
}

/// Get an MCP server.
#[utoipa::path(get, path = "/v1/mcp-servers/{server_id}", operation_id = "getMcpServer", tag = "mcp-servers",
    params(("server_id" = McpServerId, Path, description = "MCP server id")),
    responses((status = 200, body = McpServer), (status = "4XX", body = Problem)))]
pub async fn get(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(id): ApiPath<McpServerId>,
) -> ApiResult<axum::Json<McpServer>> {
    Ok(axum::Json(st.mcp_servers.get(&p, id).await?))
}

/// Replace an MCP server's name, URL, headers and timeout (admin); its enabled tools
/// call the new URL from their next call.
#[utoipa::path(put, path = "/v1/mcp-servers/{server_id}", operation_id = "updateMcpServer", tag = "mcp-servers",
    request_body = NewMcpServer,
    params(("server_id" = McpServerId, Path, description = "MCP server id")),
    responses((status = 200, body = McpServer), (status = "4XX", body = Problem)))]
pub async fn update(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(id): ApiPath<McpServerId>,
    ApiJson(new): ApiJson<NewMcpServer>,
) -> ApiResult<axum::Json<McpServer>> {
    Ok(axum::Json(st.mcp_servers.replace(&p, id, new).await?))
}

/// Delete an MCP server and its discoveries (admin); refused (`in_use`) while tools
/// enabled from it exist.
#[utoipa::path(delete, path = "/v1/mcp-servers/{server_id}", operation_id = "deleteMcpServer", tag = "mcp-servers",
    params(("server_id" = McpServerId, Path, description = "MCP server id")),
    responses((status = 204), (status = "4XX", body = Problem)))]
pub async fn delete(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(id): ApiPath<McpServerId>,
) -> ApiResult<StatusCode> {
    st.mcp_servers.delete(&p, id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Ask the server for its tools now (member) and store the answer as its next discovery,
/// with what changed since the one before. Enabled tools are not changed by it. A server
/// that cannot be reached or breaks the protocol answers `502 upstream_failed`.
#[utoipa::path(post, path = "/v1/mcp-servers/{server_id}/discover", operation_id = "discoverMcpTools", tag = "mcp-servers",
    params(("server_id" = McpServerId, Path, description = "MCP server id")),
    responses((status = 200, body = DiscoveryReport), (status = "4XX", body = Problem),
        (status = 502, body = Problem, description = "The server could not be reached or broke the protocol")))]
pub async fn discover(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(id): ApiPath<McpServerId>,
) -> ApiResult<axum::Json<DiscoveryReport>> {
    Ok(axum::Json(st.mcp_servers.discover(&p, id).await?))
}

/// The server's tools as its latest discovery listed them (and enabled ones it no longer
/// lists), each with its status: `available`, `enabled`, `changed` (awaiting acceptance)
/// or `removed`.
#[utoipa::path(get, path = "/v1/mcp-servers/{server_id}/tools", operation_id = "listMcpServerTools", tag = "mcp-servers",
    params(("server_id" = McpServerId, Path, description = "MCP server id")),
    responses((status = 200, body = McpToolList), (status = "4XX", body = Problem)))]
pub async fn tools(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(id): ApiPath<McpServerId>,
) -> ApiResult<axum::Json<McpToolList>> {
    Ok(axum::Json(st.mcp_servers.tools(&p, id).await?))
}

/// Enable a discovered tool (admin) as a Baton tool agents may attach, with Baton's
/// effect and approval policy (default: a mutation, no approval), whatever the server's
/// annotations say; on a tool enabled already, accept its latest definition (a new
/// version of that tool).
#[utoipa::path(post, path = "/v1/mcp-servers/{server_id}/tools/{name}/enable", operation_id = "enableMcpTool", tag = "mcp-servers",
    request_body(content = EnableMcpTool, description = "Optional"),
    params(("server_id" = McpServerId, Path, description = "MCP server id"),
        ("name" = String, Path, description = "The tool's name on the server")),
    responses((status = 200, body = Tool), (status = "4XX", body = Problem)))]
pub async fn enable(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath((id, name)): ApiPath<(McpServerId, String)>,
    OptionalJson(how): OptionalJson<EnableMcpTool>,
) -> ApiResult<axum::Json<Tool>> {
    Ok(axum::Json(st.mcp_servers.enable(&p, id, &name, how).await?))
}
