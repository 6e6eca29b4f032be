//! `/v1/agents`: create, update (a new version), get, list, archive, restore and delete.

use super::{AgentPage, parse_cursor};
use crate::auth::Caller;
use crate::error::{ApiResult, Problem};
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use baton_core::AgentId;
use baton_core::ToolId;
use baton_core::agents::NewAgent;
use baton_core::model::{Agent, AgentLimits, ProviderSpec};
use serde::Deserialize;

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateAgentBody {
    /// 1 to 200 characters, not blank.
    #[schema(min_length = 1, max_length = 200)]
    pub name: String,
    /// At most 100000 characters.
    #[serde(default)]
    #[schema(max_length = 100000)]
    pub instructions: String,
    /// `openai` (any OpenAI-compatible chat-completions server) or `scripted` (a
    /// deterministic script for tests, demos and load tests; not a model).
    pub provider: ProviderSpec,
    /// Ids of the tenant's tools the agent may call, each once, at most 128.
    #[serde(default)]
    #[schema(max_items = 128)]
    pub tools: Vec<ToolId>,
    /// Bounds of one turn; omitted fields take their defaults.
    #[serde(default)]
    pub limits: AgentLimits,
}

impl From<CreateAgentBody> for NewAgent {
    fn from(b: CreateAgentBody) -> Self {
        NewAgent {
            name: b.name,
            instructions: b.instructions,
            provider: b.provider,
            tools: b.tools,
            limits: b.limits,
        }
    }
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// `true`: the archived agents instead of those in use.
    pub archived: Option<bool>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// Page size, 1 to 500 (default 50).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<u32>,
}

/// Create an agent (admin).
#[utoipa::path(post, path = "/v1/agents", operation_id = "createAgent", tag = "agents", request_body = CreateAgentBody,
    responses((status = 201, body = Agent), (status = "4XX", body = Problem)))]
pub async fn create(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiJson(body): ApiJson<CreateAgentBody>,
) -> ApiResult<(StatusCode, axum::Json<Agent>)> {
    let agent = st.agents.create(&p, body.into()).await?;
    Ok((StatusCode::CREATED, axum::Json(agent)))
}

/// Replace an agent's definition (admin): stores a new version. Runs already started
/// keep the version they started with.
#[utoipa::path(put, path = "/v1/agents/{agent_id}", operation_id = "updateAgent", tag = "agents", request_body = CreateAgentBody,
    params(("agent_id" = AgentId, Path, description = "Agent id")),
    responses((status = 200, body = Agent), (status = "4XX", body = Problem)))]
pub async fn update(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(id): ApiPath<AgentId>,
    ApiJson(body): ApiJson<CreateAgentBody>,
) -> ApiResult<axum::Json<Agent>> {
    Ok(axum::Json(st.agents.update(&p, id, body.into()).await?))
}

/// List agents, newest first.
#[utoipa::path(get, path = "/v1/agents", operation_id = "listAgents", tag = "agents", params(ListQuery),
    responses((status = 200, body = AgentPage), (status = "4XX", body = Problem)))]
pub async fn list(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> ApiResult<axum::Json<AgentPage>> {
    let cursor = parse_cursor::<AgentId>(q.cursor.as_deref())?;
    let archived = q.archived.unwrap_or(false);
    Ok(axum::Json(
        st.agents.list(&p, archived, cursor, q.limit).await?.into(),
    ))
}

/// Archive an agent (admin): it takes no new runs and no new versions; the runs it has go
/// on. Archiving an archived agent changes nothing.
#[utoipa::path(post, path = "/v1/agents/{agent_id}/archive", operation_id = "archiveAgent", tag = "agents",
    params(("agent_id" = AgentId, Path, description = "Agent id")),
    responses((status = 200, body = Agent), (status = "4XX", body = Problem)))]
pub async fn archive(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(id): ApiPath<AgentId>,
) -> ApiResult<axum::Json<Agent>> {
    Ok(axum::Json(st.agents.set_archived(&p, id, true).await?))
}

/// Restore an archived agent (admin): it takes runs again.
#[utoipa::path(post, path = "/v1/agents/{agent_id}/restore", operation_id = "restoreAgent", tag = "agents",
    params(("agent_id" = AgentId, Path, description = "Agent id")),
    responses((status = 200, body = Agent), (status = "4XX", body = Problem)))]
pub async fn restore(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(id): ApiPath<AgentId>,
) -> ApiResult<axum::Json<Agent>> {
    Ok(axum::Json(st.agents.set_archived(&p, id, false).await?))
}

/// Get one agent.
#[utoipa::path(get, path = "/v1/agents/{agent_id}", operation_id = "getAgent", tag = "agents",
    params(("agent_id" = AgentId, Path, description = "Agent id")),
    responses((status = 200, body = Agent), (status = "4XX", body = Problem)))]
pub async fn get(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(id): ApiPath<AgentId>,
) -> ApiResult<axum::Json<Agent>> {
    Ok(axum::Json(st.agents.get(&p, id).await?))
}

/// Delete an archived agent with every version of it (admin); its ended runs stay. 409
/// `wrong_state` for an agent not archived; 409 `in_use` while a run of it has not ended.
#[utoipa::path(delete, path = "/v1/agents/{agent_id}", operation_id = "deleteAgent", tag = "agents",
    params(("agent_id" = AgentId, Path, description = "Agent id")),
    responses((status = 204), (status = "4XX", body = Problem)))]
pub async fn delete(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(id): ApiPath<AgentId>,
) -> ApiResult<StatusCode> {
    st.agents.delete(&p, id).await?;
    Ok(StatusCode::NO_CONTENT)
}
