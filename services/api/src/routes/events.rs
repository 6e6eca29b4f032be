//! `/v1/runs/{run_id}/events`: a JSON page of events after a version, or — with
//! `Accept: text/event-stream` — an SSE stream that replays from the database after
//! `Last-Event-ID` (or `?after=`) and then follows live events until the run ends.

use crate::auth::Caller;
use crate::error::{ApiError, ApiResult, Code, Problem};
use crate::extract::{ApiPath, ApiQuery};
use crate::state::AppState;
use axum::extract::State;
use axum::http::header::ACCEPT;
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use baton_core::RunId;
use baton_core::runs::follow;
use baton_events::Envelope;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use std::convert::Infallible;
use std::time::Duration;

/// Sent first on every stream: how long a client should wait before reconnecting.
const RETRY_HINT: Duration = Duration::from_secs(1);

#[derive(Deserialize, utoipa::IntoParams)]
pub struct EventsQuery {
    /// Only events with a version greater than this (default 0: from the start).
    pub after: Option<String>,
    /// Page size for the JSON form, 1 to 500 (default 50).
    pub limit: Option<u32>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct EventsPage {
    pub events: Vec<Envelope>,
    /// Pass as `after` to fetch the next page.
    pub next_after: i64,
}

/// A run's events: a JSON page, or an SSE stream with `Accept: text/event-stream`.
///
/// SSE frames carry `id` = the event's version, `event` = its type and `data` = the
/// envelope. Reconnect with `Last-Event-ID` to resume without gaps or duplicates. A
/// stream whose run has ended and whose cursor is at the end answers 204.
#[utoipa::path(get, path = "/v1/runs/{run_id}/events", tag = "runs",
    params(("run_id" = String, Path, description = "Run id"), EventsQuery,
        ("Last-Event-ID" = Option<String>, Header, description = "SSE resume cursor")),
    responses((status = 200, body = EventsPage,
        description = "JSON page, or `text/event-stream` when asked for"),
        (status = 204, description = "SSE asked for an ended run with nothing after the cursor"),
        (status = "4XX", body = Problem)))]
pub async fn events(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(id): ApiPath<RunId>,
    ApiQuery(q): ApiQuery<EventsQuery>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let after = q
        .after
        .as_deref()
        .map(|a| parse_version(a, Code::InvalidQuery, "after"))
        .transpose()?;
    let wants_sse = headers
        .get(ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"));
    if !wants_sse {
        let events = st.runs.read_events(&p, id, after, q.limit).await?;
        let next_after = events.last().map_or(after.unwrap_or(0), |e| e.version);
        return Ok(axum::Json(EventsPage { events, next_after }).into_response());
    }
    let cursor = match headers.get("last-event-id") {
        Some(v) => parse_version(
            v.to_str().unwrap_or("\u{fffd}"),
            Code::InvalidLastEventId,
            "Last-Event-ID",
        )?,
        None => after.unwrap_or(0),
    };
    let Some(live) = follow(&st.runs, &p, id, cursor, st.http.sse_resync).await? else {
        // The run has ended and the client has every event: 204 tells EventSource to stop
        // reconnecting.
        return Ok(StatusCode::NO_CONTENT.into_response());
    };
    let subscriber = crate::metrics::SseSubscriber::start();
    let frames = live.map(move |item| {
        let _counted = &subscriber;
        Ok::<_, Infallible>(frame(item))
    });
    let hint = futures::stream::once(async {
        Ok::<_, Infallible>(Event::default().retry(RETRY_HINT).comment("baton"))
    });
    let stream = hint
        .chain(frames)
        .take_until(st.shutdown.clone().cancelled_owned());
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(st.http.sse_keepalive))
        .into_response())
}

fn frame(item: Result<Envelope, baton_core::CoreError>) -> Event {
    match item {
        Ok(env) => {
            let base = Event::default()
                .id(env.version.to_string())
                .event(env.event_type.clone());
            match serde_json::to_string(&env) {
                Ok(json) => base.data(json),
                Err(e) => base.comment(format!("unencodable event: {e}")),
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "event stream failed; the client will resume");
            Event::default()
                .event("error")
                .data(r#"{"code":"unavailable","detail":"stream interrupted; reconnect with Last-Event-ID"}"#)
        }
    }
}

fn parse_version(raw: &str, code: Code, what: &str) -> Result<i64, ApiError> {
    raw.trim()
        .parse::<i64>()
        .ok()
        .filter(|v| *v >= 0)
        .ok_or_else(|| {
            ApiError::new(
                code,
                format!("{what} must be a non-negative event version, got {raw:?}"),
            )
        })
}
