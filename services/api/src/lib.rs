//! Baton's HTTP API: the axum router under `/v1`, authentication, problem+json errors,
//! SSE, and the OpenAPI document at `/openapi.json`.
//!
//! [`router`] builds the whole app from an [`AppState`]; the server and the tests call it.

pub mod accounts;
pub mod auth;
mod browser;
pub mod console;
pub mod error;
pub mod extract;
pub mod limits;
pub mod metrics;
pub mod openapi;
mod problem;
pub mod revocations;
pub mod routes;
pub mod state;
pub mod streams;

pub use state::{AppState, HttpSettings, Services};

use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request};
use error::{ApiError, Code};
use routes::{actions, agents, events, health, runs, secrets, tools};
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// The routes and the OpenAPI document that describes them.
fn api() -> (Router<AppState>, serde_json::Value) {
    let (routes, doc) = OpenApiRouter::with_openapi(openapi::base())
        .routes(routes!(agents::create, agents::list))
        .routes(routes!(agents::get, agents::update, agents::delete))
        .routes(routes!(agents::archive))
        .routes(routes!(agents::restore))
        .routes(routes!(tools::create, tools::list))
        .routes(routes!(tools::get, tools::update, tools::delete))
        .routes(routes!(tools::archive))
        .routes(routes!(tools::restore))
        .routes(routes!(runs::create, runs::list))
        .routes(routes!(runs::get, runs::update, runs::delete))
        .routes(routes!(runs::cancel))
        .routes(routes!(runs::post_message, runs::list_messages))
        .routes(routes!(events::events))
        .routes(routes!(events::create_stream_ticket))
        .routes(routes!(actions::receipts))
        .routes(routes!(actions::decide_approval))
        .routes(routes!(actions::tool_outputs))
        .routes(routes!(actions::resolve))
        .routes(routes!(actions::checkpoints))
        .routes(routes!(routes::files::list))
        .routes(routes!(routes::files::download, routes::files::upload))
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
        .routes(routes!(routes::retention::get, routes::retention::put))
        .routes(routes!(routes::environments::list))
        .routes(routes!(
            routes::environments::put,
            routes::environments::delete
        ))
        .routes(routes!(routes::schedules::create, routes::schedules::list))
        .routes(routes!(
            routes::schedules::get,
            routes::schedules::update,
            routes::schedules::delete
        ))
        .routes(routes!(routes::schedules::pause))
        .routes(routes!(routes::schedules::resume))
        .routes(routes!(routes::schedules::run_now))
        .routes(routes!(
            routes::mcp_servers::create,
            routes::mcp_servers::list
        ))
        .routes(routes!(
            routes::mcp_servers::get,
            routes::mcp_servers::update,
            routes::mcp_servers::delete
        ))
        .routes(routes!(routes::mcp_servers::discover))
        .routes(routes!(routes::mcp_servers::tools))
        .routes(routes!(routes::mcp_servers::enable))
        .routes(routes!(routes::webhooks::create, routes::webhooks::list))
        .routes(routes!(
            routes::webhooks::get,
            routes::webhooks::update,
            routes::webhooks::delete
        ))
        .routes(routes!(routes::webhooks::rotate_secret))
        .routes(routes!(routes::webhooks::enable))
        .routes(routes!(routes::webhooks::deliveries))
        .routes(routes!(routes::webhooks::delivery))
        .routes(routes!(routes::webhooks::replay))
        .routes(routes!(routes::sessions::login))
        .routes(routes!(routes::sessions::logout))
        .routes(routes!(routes::sessions::me))
        .routes(routes!(health::livez))
        .routes(routes!(health::readyz))
        .split_for_parts();
    (routes, openapi::finish(doc))
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

/// The span of one request, with OpenTelemetry's HTTP attribute names; `tenant_id` is
/// recorded once the caller is known ([`auth`]), the status by [`access_log`].
fn request_span(req: &Request) -> tracing::Span {
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
        http.request.method = %req.method(),
        http.route = route,
        http.response.status_code = tracing::field::Empty,
        request_id,
        tenant_id = tracing::field::Empty,
        otel.name = format!("{} {route}", req.method()),
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
    );
    // The caller's trace, when it sent one, is this request's parent.
    let traceparent = req
        .headers()
        .get("traceparent")
        .and_then(|v| v.to_str().ok());
    baton_core::trace::adopt(&span, traceparent);
    span
}

/// When a response's head is ready: its status on the request's span (a 5xx marks the
/// span an error, as OpenTelemetry's conventions say for servers) and one access-log line
/// at `info` on the target `baton_api::access`, inside the span, so it carries the method,
/// route, request id and tenant. Turn the lines off with the log filter
/// (`info,baton_api::access=off`). An event stream's latency is the time to its head.
fn access_log(res: &axum::response::Response, latency: std::time::Duration, span: &tracing::Span) {
    let status = res.status().as_u16();
    span.record("http.response.status_code", status);
    if res.status().is_server_error() {
        span.record("otel.status_code", "ERROR");
    }
    tracing::info!(
        target: "baton_api::access",
        status,
        latency_ms = latency.as_micros() as f64 / 1000.0,
        "request"
    );
}

/// The OpenAPI document, as `/openapi.json` serves it.
pub fn openapi() -> serde_json::Value {
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
        .merge(console::routes())
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
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(request_span)
                .on_request(())
                .on_response(access_log)
                .on_failure(()),
        )
        .layer(PropagateRequestIdLayer::x_request_id())
        .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid));
    // Outside everything else: a preflight is answered before routing or auth.
    let app = match cors {
        Some(cors) => app.layer(cors),
        None => app,
    };
    app.layer(axum::middleware::from_fn(security_headers))
}

/// When the request's deadline began counting: waits inside a handler end by this plus
/// the request timeout, whatever reading the body and authenticating took.
#[derive(Debug, Clone, Copy)]
pub struct RequestStart(pub tokio::time::Instant);

/// Answers `408 request_timeout` when a request is not read and answered within
/// `http.request_timeout_ms`: a body that trickles in holds a connection no longer than that.
/// An event stream counts until its first frame is ready; it may stay open after.
async fn deadline(
    axum::extract::State(limit): axum::extract::State<std::time::Duration>,
    req: Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let mut req = req;
    req.extensions_mut()
        .insert(RequestStart(tokio::time::Instant::now()));
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

/// Headers every answer carries: the API serves JSON and event streams, so browsers may
/// not sniff another type, frame it, run anything from it, or keep it. The console's
/// files ([`console`]) set their own policy and caching, which stay.
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
