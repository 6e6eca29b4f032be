//! Baton's HTTP API: the axum router under `/v1`, authentication, problem+json errors,
//! SSE, and the OpenAPI document at `/openapi.json`.
//!
//! [`router`] builds the whole app from an [`AppState`]; the server and the tests call it.

pub mod accounts;
pub mod auth;
mod browser;
pub mod error;
pub mod extract;
pub mod limits;
pub mod metrics;
mod problem;
pub mod revocations;
pub mod routes;
pub mod state;
pub mod streams;

pub use state::{AppState, HttpSettings};

use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request};
use error::{ApiError, Code};
use routes::{actions, agents, events, health, runs, secrets, tools};
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

#[derive(OpenApi)]
#[openapi(
    info(title = "Baton API", description = "Durable control plane for AI agent runs."),
    tags(
        (name = "agents"), (name = "tools"), (name = "runs"), (name = "secrets"),
        (name = "encryption-keys"), (name = "api-keys"), (name = "members"), (name = "invitations"), (name = "audit"),
        (name = "egress"),
        (name = "sessions"), (name = "health")
    ),
    security(("bearer" = [])),
    modifiers(&BearerAuth)
)]
struct ApiDoc;

/// Every route but the probes needs `Authorization: Bearer <token>` (in the embedded tier
/// on loopback with auth off, requests without one act as the local owner).
struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let scheme = HttpBuilder::new()
            .scheme(HttpAuthScheme::Bearer)
            .description(Some(
                "An API key (from `baton admin create-tenant` or `POST /v1/api-keys`), or the \
                 token of a login session (`POST /v1/login`)",
            ))
            .build();
        doc.components
            .get_or_insert_with(Default::default)
            .add_security_scheme("bearer", SecurityScheme::Http(scheme));
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

/// The OpenAPI document and the routes it describes.
fn api() -> (Router<AppState>, utoipa::openapi::OpenApi) {
    let (routes, mut doc) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(agents::create, agents::list))
        .routes(routes!(agents::get, agents::update))
        .routes(routes!(tools::create, tools::list))
        .routes(routes!(tools::get))
        .routes(routes!(runs::create, runs::list))
        .routes(routes!(runs::get))
        .routes(routes!(runs::cancel))
        .routes(routes!(runs::post_message, runs::list_messages))
        .routes(routes!(events::events))
        .routes(routes!(actions::receipts))
        .routes(routes!(actions::decide_approval))
        .routes(routes!(actions::tool_outputs))
        .routes(routes!(actions::resolve))
        .routes(routes!(actions::checkpoints))
        .routes(routes!(secrets::put, secrets::delete))
        .routes(routes!(secrets::list))
        .routes(routes!(routes::encryption_keys::status))
        .routes(routes!(routes::encryption_keys::reseal))
        .routes(routes!(routes::api_keys::create, routes::api_keys::list))
        .routes(routes!(routes::api_keys::revoke))
        .routes(routes!(routes::members::list))
        .routes(routes!(routes::members::set_role, routes::members::remove))
        .routes(routes!(
            routes::invitations::create,
            routes::invitations::list
        ))
        .routes(routes!(routes::invitations::revoke))
        .routes(routes!(routes::invitations::mine))
        .routes(routes!(routes::invitations::accept))
        .routes(routes!(routes::invitations::decline))
        .routes(routes!(routes::audit::list))
        .routes(routes!(routes::egress::get, routes::egress::put))
        .routes(routes!(routes::sessions::login))
        .routes(routes!(routes::sessions::logout))
        .routes(routes!(routes::sessions::me))
        .routes(routes!(health::livez))
        .routes(routes!(health::readyz))
        .split_for_parts();
    // After the routes: their responses are what it finishes.
    utoipa::Modify::modify(&FinishResponses, &mut doc);
    (routes, doc)
}

/// Runs the request with the caller's W3C `traceparent` (when well formed) as the
/// current trace context: the events it appends record it.
async fn trace_context(req: Request, next: axum::middleware::Next) -> axum::response::Response {
    let traceparent = req
        .headers()
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .and_then(baton_core::trace::parse);
    baton_core::trace::scope(traceparent, next.run(req)).await
}

/// The OpenAPI document, for `/openapi.json` and for tooling.
pub fn openapi() -> utoipa::openapi::OpenApi {
    api().1
}

/// The whole HTTP app, with `extra` routes of the server's own (`/metrics`) behind the
/// same guards and headers.
pub fn router(state: AppState, extra: Router) -> Router {
    let (routes, doc) = api();
    let doc = std::sync::Arc::new(doc);
    let body_limit = state.http.body_limit_bytes;
    let cors = browser::cors(&state.http.allowed_origins);
    let guarded = state.clone();
    let request_timeout = state.http.request_timeout;
    let app = routes
        .route(
            "/openapi.json",
            axum::routing::get(move || {
                let doc = doc.clone();
                async move { axum::Json(doc.as_ref().clone()) }
            }),
        )
        .fallback(|| async { ApiError::new(Code::RouteNotFound, "no such route") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(Code::MethodNotAllowed, "method not allowed on this route")
        })
        .layer(axum::middleware::from_fn(metrics::track))
        .layer(axum::middleware::from_fn(trace_context))
        .with_state(state)
        .merge(extra)
        .layer(axum::middleware::from_fn_with_state(
            guarded,
            browser::guard,
        ))
        .layer(axum::middleware::from_fn_with_state(
            request_timeout,
            deadline,
        ))
        .layer(axum::middleware::from_fn(problem::finish_problems))
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(TraceLayer::new_for_http().make_span_with(|req: &Request| {
            let route = req
                .extensions()
                .get::<MatchedPath>()
                .map_or("unmatched", MatchedPath::as_str);
            let request_id = req
                .headers()
                .get("x-request-id")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            let span = tracing::info_span!(
                "http",
                method = %req.method(),
                route,
                request_id,
                otel.name = format!("{} {route}", req.method()),
                otel.kind = "server",
            );
            // The caller's trace, when it sent one, is this request's parent.
            let traceparent = req
                .headers()
                .get("traceparent")
                .and_then(|v| v.to_str().ok());
            baton_core::trace::adopt(&span, traceparent);
            span
        }))
        .layer(PropagateRequestIdLayer::x_request_id())
        .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid));
    // Outside everything else: a preflight is answered before routing or auth.
    let app = match cors {
        Some(cors) => app.layer(cors),
        None => app,
    };
    app.layer(axum::middleware::from_fn(security_headers))
}

/// Answers `408 request_timeout` when a request is not read and answered within
/// `http.request_timeout_ms`: a body that trickles in holds a connection no longer than that.
/// An event stream counts until its first frame is ready; it may stay open after.
async fn deadline(
    axum::extract::State(limit): axum::extract::State<std::time::Duration>,
    req: Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    match tokio::time::timeout(limit, next.run(req)).await {
        Ok(res) => res,
        Err(_) => ApiError::new(
            Code::RequestTimeout,
            format!(
                "the request was not received and answered within {} ms",
                limit.as_millis()
            ),
        )
        .into_response(),
    }
}

/// Headers every answer carries: the API serves JSON and event streams, never a page,
/// so browsers may not sniff another type, frame it, run anything from it, or keep it.
async fn security_headers(req: Request, next: axum::middleware::Next) -> axum::response::Response {
    use axum::http::{HeaderValue, header};
    let mut res = next.run(req).await;
    let h = res.headers_mut();
    let set = [
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; frame-ancestors 'none'",
        ),
        (header::REFERRER_POLICY, "no-referrer"),
        // Event streams set their own (`no-cache`); that one stays.
        (header::CACHE_CONTROL, "no-store"),
    ];
    for (name, value) in set {
        h.entry(name).or_insert(HeaderValue::from_static(value));
    }
    res
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    /// Every operation of the document: its method, path and object.
    fn operations() -> Vec<(String, String, Value)> {
        let doc = serde_json::to_value(super::openapi()).expect("the document is JSON");
        let mut ops = Vec::new();
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for (method, op) in item.as_object().expect("a path item") {
                ops.push((method.to_uppercase(), path.clone(), op.clone()));
            }
        }
        assert!(ops.len() > 20, "{ops:?}");
        ops
    }

    #[test]
    fn error_answers_are_documented_as_problem_json() {
        for (method, path, op) in operations() {
            for (status, response) in op["responses"].as_object().expect("responses") {
                let Some(content) = response["content"].as_object() else {
                    continue;
                };
                if status.starts_with('4') || status.starts_with('5') {
                    let types: Vec<&String> = content.keys().collect();
                    assert_eq!(
                        types,
                        [crate::error::PROBLEM_JSON],
                        "{method} {path} {status}"
                    );
                }
            }
        }
    }

    #[test]
    fn every_response_has_a_description() {
        for (method, path, op) in operations() {
            for (status, response) in op["responses"].as_object().expect("responses") {
                let description = response["description"].as_str().unwrap_or("");
                assert!(!description.is_empty(), "{method} {path} {status}");
            }
        }
    }

    #[test]
    fn path_parameters_are_those_of_the_template_and_the_others_are_in_the_query() {
        for (method, path, op) in operations() {
            let mut in_template: Vec<&str> = path
                .split('/')
                .filter_map(|s| s.strip_prefix('{')?.strip_suffix('}'))
                .collect();
            let params = op["parameters"].as_array().cloned().unwrap_or_default();
            let mut in_path: Vec<&str> = params
                .iter()
                .filter(|p| p["in"] == "path")
                .map(|p| p["name"].as_str().expect("a name"))
                .collect();
            in_template.sort_unstable();
            in_path.sort_unstable();
            assert_eq!(in_path, in_template, "{method} {path}: path parameters");
            for p in &params {
                assert!(
                    matches!(p["in"].as_str(), Some("path" | "query" | "header")),
                    "{method} {path}: {p}"
                );
                if p["in"] == "path" {
                    assert_eq!(p["required"], true, "{method} {path}: {p}");
                }
            }
        }
    }

    /// The bounds written into the request schemas are the ones the use cases check.
    #[test]
    fn documented_bounds_are_those_the_use_cases_check() {
        use baton_core::{agents, page, runs};
        let doc = serde_json::to_value(super::openapi()).expect("the document is JSON");
        let schemas = &doc["components"]["schemas"];
        let field = |schema: &str, name: &str, bound: &str| {
            schemas[schema]["properties"][name][bound]
                .as_u64()
                .map(|n| n as usize)
        };
        let cases = [
            (
                ("CreateAgentBody", "name", "maxLength"),
                agents::MAX_NAME_CHARS,
            ),
            (
                ("CreateAgentBody", "instructions", "maxLength"),
                agents::MAX_INSTRUCTIONS_CHARS,
            ),
            (
                ("CreateAgentBody", "tools", "maxItems"),
                agents::MAX_AGENT_TOOLS,
            ),
            (
                ("CreateRunBody", "title", "maxLength"),
                runs::MAX_TITLE_CHARS,
            ),
            (
                ("CreateRunBody", "message", "maxLength"),
                runs::MAX_CONTENT_CHARS,
            ),
            (
                ("CreateRunBody", "request_id", "maxLength"),
                runs::MAX_REQUEST_ID_CHARS,
            ),
            (
                ("PostMessageBody", "content", "maxLength"),
                runs::MAX_CONTENT_CHARS,
            ),
            (
                ("PostMessageBody", "request_id", "maxLength"),
                runs::MAX_REQUEST_ID_CHARS,
            ),
            (("CancelBody", "reason", "maxLength"), runs::MAX_TITLE_CHARS),
        ];
        for ((schema, name, bound), expected) in cases {
            assert_eq!(
                field(schema, name, bound),
                Some(expected),
                "{schema}.{name} {bound}"
            );
        }
        let pages = [
            "/v1/agents",
            "/v1/tools",
            "/v1/runs",
            "/v1/runs/{run_id}/messages",
            "/v1/runs/{run_id}/events",
            "/v1/secrets",
            "/v1/api-keys",
            "/v1/audit",
        ];
        for (method, path, op) in operations() {
            if !pages.contains(&path.as_str()) || method != "GET" {
                continue;
            }
            for p in op["parameters"].as_array().cloned().unwrap_or_default() {
                if p["name"] == "limit" {
                    assert_eq!(
                        p["schema"]["maximum"].as_u64(),
                        Some(u64::from(page::MAX_LIMIT)),
                        "{method} {path}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_document_asks_for_a_bearer_token_but_not_on_the_probes() {
        let doc = serde_json::to_value(super::openapi()).expect("the document is JSON");
        assert_eq!(doc["security"], serde_json::json!([{"bearer": []}]));
        let scheme = &doc["components"]["securitySchemes"]["bearer"];
        assert_eq!(
            (&scheme["type"], &scheme["scheme"]),
            (&"http".into(), &"bearer".into())
        );
        // The probes answer anyone (a kubelet has no key).
        for (_, path, op) in operations() {
            if matches!(path.as_str(), "/livez" | "/readyz") {
                assert_eq!(op["security"], serde_json::json!([{}]), "{path}");
            }
        }
    }
}
