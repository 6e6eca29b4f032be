//! `/v1/agents`: create, get, list.

use super::{PageBody, parse_cursor};
use crate::auth::Caller;
use crate::error::{ApiResult, Problem};
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use baton_core::AgentId;
use baton_core::agents::NewAgent;
use baton_core::model::{Agent, ProviderSpec};
use serde::Deserialize;

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateAgentBody {
    pub name: String,
    #[serde(default)]
    pub instructions: String,
    /// Only `scripted` so far: a deterministic provider for tests and demos.
    pub provider: ProviderSpec,
}

#[derive(Deserialize, utoipa::IntoParams)]
pub struct ListQuery {
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// Page size, 1 to 500 (default 50).
    pub limit: Option<u32>,
}

/// Create an agent (admin).
#[utoipa::path(post, path = "/v1/agents", tag = "agents", request_body = CreateAgentBody,
    responses((status = 201, body = Agent), (status = "4XX", body = Problem)))]
pub async fn create(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiJson(body): ApiJson<CreateAgentBody>,
) -> ApiResult<(StatusCode, axum::Json<Agent>)> {
    let new = NewAgent {
        name: body.name,
        instructions: body.instructions,
        provider: body.provider,
    };
    let agent = st.agents.create(&p, new).await?;
    Ok((StatusCode::CREATED, axum::Json(agent)))
}

/// List agents, newest first.
#[utoipa::path(get, path = "/v1/agents", tag = "agents", params(ListQuery),
    responses((status = 200, body = PageBody<Agent>), (status = "4XX", body = Problem)))]
pub async fn list(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> ApiResult<axum::Json<PageBody<Agent>>> {
    let cursor = parse_cursor::<AgentId>(q.cursor.as_deref())?;
    Ok(axum::Json(
        st.agents.list(&p, cursor, q.limit).await?.into(),
    ))
}

/// Get one agent.
#[utoipa::path(get, path = "/v1/agents/{agent_id}", tag = "agents",
    params(("agent_id" = String, Path, description = "Agent id")),
    responses((status = 200, body = Agent), (status = "4XX", body = Problem)))]
pub async fn get(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(id): ApiPath<AgentId>,
) -> ApiResult<axum::Json<Agent>> {
    Ok(axum::Json(st.agents.get(&p, id).await?))
}
