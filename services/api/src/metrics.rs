//! HTTP metrics: a duration histogram per request labelled by method, matched route
//! (never the raw path, which would explode the label set) and status.

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;

pub async fn track(req: Request, next: Next) -> Response {
    let started = std::time::Instant::now();
    let method = req.method().as_str().to_owned();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let res = next.run(req).await;
    metrics::histogram!(
        "baton_http_request_duration_seconds",
        "method" => method,
        "route" => route,
        "status" => res.status().as_u16().to_string(),
    )
    .record(started.elapsed().as_secs_f64());
    res
}

/// Counts a live SSE subscriber for as long as it is held.
pub struct SseSubscriber(());

impl SseSubscriber {
    pub fn start() -> Self {
        metrics::gauge!("baton_sse_subscribers").increment(1.0);
        SseSubscriber(())
    }
}

impl Drop for SseSubscriber {
    fn drop(&mut self) {
        metrics::gauge!("baton_sse_subscribers").decrement(1.0);
    }
}
