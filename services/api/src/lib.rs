//! Baton's HTTP API: the axum router under `/v1`, authentication, problem+json errors,
//! SSE, and the OpenAPI document at `/openapi.json`.
//!
//! [`router`] builds the whole app from an [`AppState`]; the server and the tests call it.

pub mod auth;
mod browser;
pub mod error;
pub mod extract;
pub mod limits;
mod local;
pub mod metrics;
mod problem;
pub mod routes;
pub mod state;

pub use auth::AuthMode;
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
        (name = "api-keys"), (name = "health")
    )
)]
struct ApiDoc;

/// The OpenAPI document and the routes it describes.
fn api() -> (Router<AppState>, utoipa::openapi::OpenApi) {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
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
        .routes(routes!(routes::api_keys::create, routes::api_keys::list))
        .routes(routes!(routes::api_keys::revoke))
        .routes(routes!(health::livez))
        .routes(routes!(health::readyz))
        .split_for_parts()
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
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            local::guard,
        ))
        .layer(axum::middleware::from_fn(metrics::track))
        .layer(axum::middleware::from_fn(trace_context))
        .with_state(state)
        .merge(extra)
        .layer(axum::middleware::from_fn_with_state(
            guarded,
            browser::guard,
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
