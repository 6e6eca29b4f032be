//! The OpenAPI document served at `/openapi.json`: what utoipa derives from the route
//! attributes and the `ToSchema` types, finished so that validators accept it and client
//! generators make usable code from it. It describes the API; it must never change what
//! a route does.
//!
//! [`base`] is what the routes are added to; [`finish`] turns the result into the
//! document as served. Passes over the JSON do what utoipa's attributes cannot say:
//! - [`responses`]: the `429`, `503` and `5XX` answers every operation may give, once;
//! - [`unions`]: tagged enums as discriminated unions of named variants;
//! - [`events`]: the run event envelope, typed by event type.

mod events;
mod responses;
mod unions;

#[cfg(test)]
mod tests;

use crate::error;
use utoipa::OpenApi;

#[derive(OpenApi)]
#[openapi(
    info(title = "Baton API", description = "Durable control plane for AI agent runs."),
    servers((url = "/", description = "The server that serves this document")),
    tags(
        (name = "agents", description = "Agent definitions: instructions, model provider, tools, limits"),
        (name = "tools", description = "Tools an agent may call"),
        (name = "runs", description = "Runs of an agent: create, read, cancel"),
        (name = "messages", description = "A run's messages; posting one starts a turn"),
        (name = "events", description = "A run's events: a JSON page or a Server-Sent Events stream"),
        (name = "receipts", description = "A run's tool calls: their receipts, client tool outputs, uncertain calls"),
        (name = "approvals", description = "Tool calls that wait for a member's approval"),
        (name = "checkpoints", description = "Sealed snapshots of a run's engine state"),
        (name = "files", description = "A run's workspace files: list, download, upload"),
        (name = "secrets", description = "Write-only tenant secrets"),
        (name = "encryption-keys", description = "Which keys seal the tenant's data; resealing"),
        (name = "api-keys", description = "The tenant's API keys"),
        (name = "members", description = "The tenant's users and their roles"),
        (name = "invitations", description = "Invitations to join a tenant"),
        (name = "audit", description = "The tenant's audit stream"),
        (name = "egress", description = "The hosts the tenant's tools and providers may call"),
        (name = "environments", description = "Where the tenant's workspace commands run"),
        (name = "retention", description = "How long the tenant's ended runs are kept"),
        (name = "schedules", description = "Runs of an agent started on a timetable"),
        (name = "mcp-servers", description = "Model Context Protocol servers: discovery of their tools, and enabling them"),
        (name = "webhooks", description = "Signed notifications of what happens to runs and schedules"),
        (name = "sessions", description = "Logging in and out; who the caller is"),
        (name = "health", description = "Probes")
    ),
    components(schemas(baton_events::Envelope)),
    security(("bearer" = [])),
    modifiers(&BearerAuth)
)]
struct ApiDoc;

/// The document the routes are added to: info, servers, tags, security.
pub(crate) fn base() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

/// The document as served, once every route is in.
pub(crate) fn finish(mut doc: utoipa::openapi::OpenApi) -> serde_json::Value {
    utoipa::Modify::modify(&FinishResponses, &mut doc);
    // The router's catch-all `{*path}` is an ordinary parameter to OpenAPI.
    doc.paths.paths = std::mem::take(&mut doc.paths.paths)
        .into_iter()
        .map(|(path, item)| (path.replace("{*", "{"), item))
        .collect();
    // utoipa's document types are plain data: serializing them cannot fail.
    let mut doc = serde_json::to_value(doc).unwrap_or_default();
    responses::add_shared(&mut doc);
    unions::discriminate(&mut doc);
    events::type_events(&mut doc);
    doc
}

/// Every route but the probes and `POST /v1/login` needs `Authorization: Bearer <token>`
/// (in the embedded tier on loopback with auth off, requests without one act as the local
/// owner).
struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{
            ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme,
        };
        let scheme = HttpBuilder::new()
            .scheme(HttpAuthScheme::Bearer)
            .description(Some(
                "An API key (from `baton admin create-tenant` or `POST /v1/api-keys`), or the \
                 token of a login session (`POST /v1/login`). A page on the server's own \
                 origin may instead keep its session in the `__Host-baton_session` cookie \
                 (`POST /v1/login` with `cookie: true`), sending its `Baton-CSRF` header \
                 with every request that changes anything.",
            ))
            .build();
        let ticket = ApiKey::Query(ApiKeyValue::with_description(
            "ticket",
            "A stream ticket (`POST /v1/runs/{run_id}/stream-tickets`): opens that run's \
             events once, before it expires",
        ));
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme("bearer", SecurityScheme::Http(scheme));
        components.add_security_scheme("ticket", SecurityScheme::ApiKey(ticket));
    }
}

/// What every documented response gets once the routes are in: error answers are
/// `application/problem+json` ([`error::PROBLEM_JSON`]) whatever route gives them, so every
/// response documented with a [`error::Problem`] body says so (routes keep writing
/// `(status = "4XX", body = Problem)`); and every response has the description OpenAPI 3.1
/// requires (its status's reason phrase when the route gave none).
struct FinishResponses;

impl utoipa::Modify for FinishResponses {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::RefOr;
        const PROBLEM_REF: &str = "#/components/schemas/Problem";
        for item in doc.paths.paths.values_mut() {
            let operations = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
                &mut item.head,
                &mut item.options,
                &mut item.trace,
                &mut item.query,
            ];
            for op in operations.into_iter().flatten() {
                for (status, response) in op.responses.responses.iter_mut() {
                    let RefOr::T(response) = response else {
                        continue;
                    };
                    let is_problem = response.content.get("application/json").is_some_and(|c| {
                        matches!(c, RefOr::T(c)
                            if matches!(&c.schema, Some(RefOr::Ref(r)) if r.ref_location == PROBLEM_REF))
                    });
                    if is_problem
                        && let Some(content) = response.content.shift_remove("application/json")
                    {
                        response
                            .content
                            .insert(error::PROBLEM_JSON.to_string(), content);
                    }
                    if response.description.is_empty() {
                        response.description = if is_problem {
                            "An error: a problem+json body with a stable `code`".into()
                        } else {
                            status
                                .parse::<u16>()
                                .ok()
                                .and_then(|s| axum::http::StatusCode::from_u16(s).ok())
                                .and_then(|s| s.canonical_reason())
                                .unwrap_or("The answer")
                                .into()
                        };
                    }
                }
            }
        }
    }
}

/// The operations of a document's `paths`, mutably: `(path, method, operation)`.
fn operations_mut(
    doc: &mut serde_json::Value,
) -> impl Iterator<Item = (&String, &String, &mut serde_json::Value)> {
    doc["paths"]
        .as_object_mut()
        .into_iter()
        .flat_map(|paths| paths.iter_mut())
        .filter_map(|(path, item)| Some((path, item.as_object_mut()?)))
        .flat_map(|(path, item)| item.iter_mut().map(move |(m, op)| (path, m, op)))
}
