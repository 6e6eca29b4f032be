//! `AgentStore` for both adapters: agent rows keyed by (tenant, id), listed newest first.

/// Implements `AgentStore` for `$store`, whose `app` pool is a `sqlx::Pool<$db>`, mapping
/// driver errors with `$classify`. Invoked through [`super::impl_ports!`].
macro_rules! impl_agent_store {
    ($store:ty, $db:ty, $classify:path) => {
        const _: () = {
            use async_trait::async_trait;
            use baton_core::StoreError;
            use baton_core::model::Agent;
            use baton_core::ports::AgentStore;
            use baton_events::{AgentId, TenantId};
            use sqlx::QueryBuilder;
            use sqlx::types::Json;
            use $crate::plan::micros;
            use $crate::rows::{AgentRow, agent_columns, map_all, provider_json};

            #[async_trait]
            impl AgentStore for $store {
                /// A duplicate id is `Conflict { expected: 0, actual: 0 }` ("already exists").
                async fn create_agent(
                    &self,
                    tenant: TenantId,
                    agent: &Agent,
                ) -> Result<(), StoreError> {
                    sqlx::query(concat!(
                        "INSERT INTO agents (",
                        agent_columns!(),
                        ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
                    ))
                    .bind(tenant.as_uuid())
                    .bind(agent.id.as_uuid())
                    .bind(&agent.name)
                    .bind(&agent.instructions)
                    .bind(Json(provider_json(agent)?))
                    .bind(agent.version)
                    .bind(micros(agent.created_at))
                    .bind(micros(agent.updated_at))
                    .execute(&self.app)
                    .await
                    .map_err($classify)?;
                    Ok(())
                }

                async fn get_agent(
                    &self,
                    tenant: TenantId,
                    id: AgentId,
                ) -> Result<Option<Agent>, StoreError> {
                    let row: Option<AgentRow> = sqlx::query_as(concat!(
                        "SELECT ",
                        agent_columns!(),
                        " FROM agents WHERE tenant_id = $1 AND id = $2"
                    ))
                    .bind(tenant.as_uuid())
                    .bind(id.as_uuid())
                    .fetch_optional(&self.app)
                    .await
                    .map_err($classify)?;
                    row.map(Agent::try_from).transpose()
                }

                async fn list_agents(
                    &self,
                    tenant: TenantId,
                    before: Option<AgentId>,
                    limit: u32,
                ) -> Result<Vec<Agent>, StoreError> {
                    let mut q: QueryBuilder<$db> = QueryBuilder::new(concat!(
                        "SELECT ",
                        agent_columns!(),
                        " FROM agents WHERE tenant_id = "
                    ));
                    q.push_bind(tenant.as_uuid());
                    if let Some(before) = before {
                        q.push(" AND id < ").push_bind(before.as_uuid());
                    }
                    q.push(" ORDER BY id DESC LIMIT ")
                        .push_bind(i64::from(limit));
                    let rows: Vec<AgentRow> = q
                        .build_query_as()
                        .fetch_all(&self.app)
                        .await
                        .map_err($classify)?;
                    map_all(rows)
                }
            }
        };
    };
}
pub(crate) use impl_agent_store;
