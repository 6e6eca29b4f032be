//! `/v1/runs/{run_id}/events`: a JSON page of events after a version, or — with
//! `Accept: text/event-stream` — an SSE stream that replays from the database after
//! `Last-Event-ID` (or `?after=`) and then follows live events until the run ends.
//! While live, the stream also carries the run's ephemeral `message.delta` frames: they
//! have no `id`, so they never move the client's `Last-Event-ID`.

use crate::auth::{StreamCaller, Streaming};
use crate::error::{ApiError, ApiResult, Code, Problem};
use crate::extract::{ApiPath, ApiQuery};
use crate::state::AppState;
use axum::extract::State;
use axum::http::header::ACCEPT;
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use baton_core::RunId;
use baton_core::model::IssuedTicket;
use baton_core::runs::{Live, follow_live};
use baton_events::{Envelope, MessageDelta, SharedEvent};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use std::convert::Infallible;
use std::time::Duration;

/// Sent first on every stream: how long a client should wait before reconnecting.
const RETRY_HINT: Duration = Duration::from_secs(1);

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// A stream ticket (`POST /v1/runs/{run_id}/stream-tickets`) instead of an
    /// `Authorization` header: it opens this run's events once, before it expires.
    pub ticket: Option<String>,
    /// Only events with a version greater than this (default 0: from the start).
    #[param(value_type = Option<i64>, minimum = 0)]
    pub after: Option<String>,
    /// Page size for the JSON form, 1 to 500 (default 50).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<u32>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct EventsPage {
    /// In version order. The document describes each as a `RunEvent`: the envelope, typed
    /// by its `type` (`crate::openapi` builds that union from `baton_events::RunEvent`).
    #[schema(value_type = Vec<baton_events::RunEvent>)]
    pub events: Vec<Envelope>,
    /// Pass as `after` to fetch the next page.
    pub next_after: i64,
}

/// A run's events: a JSON page, or an SSE stream with `Accept: text/event-stream`.
///
/// SSE frames carry `id` = the event's version, `event` = its type and `data` = the
/// envelope. Reconnect with `Last-Event-ID` to resume without gaps or duplicates. A
/// stream whose run has ended and whose cursor is at the end answers 204. While live,
/// `message.delta` frames without an `id` carry pieces of a model reply as it streams
/// (never replayed; the durable `model.completed` has the whole reply).
#[utoipa::path(get, path = "/v1/runs/{run_id}/events", operation_id = "listRunEvents", tag = "events",
    security(("bearer" = []), ("ticket" = [])),
    params(("run_id" = RunId, Path, description = "Run id"), EventsQuery,
        ("Last-Event-ID" = Option<String>, Header, description = "SSE resume cursor")),
    responses((status = 200,
        description = "A JSON page, or with `Accept: text/event-stream` an SSE stream",
        content((EventsPage = "application/json"), (StreamData = "text/event-stream"))),
        (status = 204, description = "SSE asked for an ended run with nothing after the cursor"),
        (status = "4XX", body = Problem)))]
pub async fn events(
    State(st): State<AppState>,
    StreamCaller(caller): StreamCaller,
    ApiPath(id): ApiPath<RunId>,
    ApiQuery(q): ApiQuery<EventsQuery>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let p = &caller.principal;
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
        let events = st.runs.read_events(p, id, after, q.limit).await?;
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
    let permit = st
        .streams
        .open(p)
        .map_err(|e| ApiError::rate_limited(e.wait, e.what))?;
    let Some(live) = follow_live(&st.runs, p, id, cursor, st.http.sse_resync).await? else {
        // The run has ended and the client has every event: 204 tells EventSource to stop
        // reconnecting.
        return Ok(StatusCode::NO_CONTENT.into_response());
    };
    let subscriber = crate::metrics::SseSubscriber::start();
    let frames = live.map(move |item| {
        // Both end with the stream: the client went away, or the stream closed.
        let _counted = (&subscriber, &permit);
        Ok::<_, Infallible>(match item {
            Ok(Live::Event(env)) => frame(Ok(env)),
            Ok(Live::Delta(delta)) => delta_frame(id, &delta),
            Err(e) => frame(Err(e)),
        })
    });
    let hint = futures::stream::once(async {
        Ok::<_, Infallible>(Event::default().retry(RETRY_HINT).comment("baton"))
    });
    // The stream ends with the server, or with the caller's credentials.
    let watch = st.revocations.watch(&caller.identity, p.tenant);
    let (auth, shutdown, tenant) = (st.auth.clone(), st.shutdown.clone(), p.tenant);
    let end = async move {
        tokio::select! {
            () = shutdown.cancelled_owned() => {}
            () = watch.ended(auth, caller.identity, caller.token_hash, tenant) => {}
        }
    };
    let stream = hint.chain(frames).take_until(end);
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(st.http.sse_keepalive))
        .into_response())
}

/// A ticket that opens `run_id`'s event stream once, within a minute (by default), for a
/// browser page: `new EventSource(base + url)`, as `EventSource` cannot send an
/// `Authorization` header. The stream acts as the credentials that asked for the ticket
/// and ends when they do. Anyone who may read the run may ask.
#[utoipa::path(post, path = "/v1/runs/{run_id}/stream-tickets", operation_id = "createStreamTicket",
    tag = "events",
    params(("run_id" = RunId, Path, description = "Run id")),
    responses((status = 201, body = IssuedTicket), (status = "4XX", body = Problem)))]
pub async fn create_stream_ticket(
    State(st): State<AppState>,
    caller: Streaming,
    ApiPath(id): ApiPath<RunId>,
) -> ApiResult<(StatusCode, axum::Json<IssuedTicket>)> {
    let issued_by = caller
        .identity
        .issued_by(caller.token_hash.as_deref())
        .map_err(baton_core::CoreError::from)?;
    let ticket = st
        .stream_tickets
        .issue(&caller.principal, issued_by, id)
        .await?;
    Ok((StatusCode::CREATED, axum::Json(ticket)))
}

/// An event's frame. Its `data` is [`StreamData::Event`], the envelope's JSON, encoded
/// once per replica and shared by every stream of the run.
fn frame(item: Result<SharedEvent, baton_core::CoreError>) -> Event {
    match item {
        Ok(env) => {
            let base = Event::default()
                .id(env.version.to_string())
                .event(&env.event_type);
            match env.json() {
                Ok(json) => base.data(json),
                Err(e) => base.comment(format!("unencodable event: {e}")),
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "event stream failed; the client will resume");
            let error = StreamData::Error(StreamError {
                code: "unavailable",
                detail: "stream interrupted; reconnect with Last-Event-ID",
            });
            let base = Event::default().event("error");
            match serde_json::to_string(&error) {
                Ok(json) => base.data(json),
                Err(e) => base.comment(format!("unencodable error: {e}")),
            }
        }
    }
}

/// The `data` of one frame of a run's event stream (`Accept: text/event-stream`), JSON.
/// The frame's `event` tells which: an event's type (its `id` is the event's version),
/// `message.delta` or `reasoning.delta` (no `id`) or `error`.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum StreamData<'a> {
    #[schema(value_type = baton_events::RunEvent)]
    Event(&'a Envelope),
    Delta(StreamDelta<'a>),
    Progress(StreamProgress<'a>),
    Error(StreamError),
}

/// A `message.delta` frame (a piece of the answer) or `reasoning.delta` frame (a piece of
/// the model's reasoning) of model call `step` of turn `turn`, as it streams. Never stored or replayed; show only the latest `attempt` of a step, and
/// let the step's `model.completed` event replace its deltas.
#[derive(Serialize, utoipa::ToSchema)]
pub struct StreamDelta<'a> {
    pub run_id: RunId,
    pub turn: i64,
    pub step: u32,
    /// Grows when a broken model stream is retried; the retry starts the reply over.
    pub attempt: u32,
    pub content: &'a str,
}

/// A `tool.progress` frame: how far a running tool call (an MCP tool's) has come, as its
/// server reports it. Never stored or replayed; the call's `tool.result` ends it.
#[derive(Serialize, utoipa::ToSchema)]
pub struct StreamProgress<'a> {
    pub run_id: RunId,
    pub turn: i64,
    #[schema(value_type = String, format = Uuid)]
    pub receipt_id: baton_events::ReceiptId,
    pub tool: &'a str,
    pub progress: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<&'a str>,
}

/// An `error` frame: the stream was interrupted; reconnect with `Last-Event-ID`.
#[derive(Serialize, utoipa::ToSchema)]
pub struct StreamError {
    /// `unavailable`.
    pub code: &'static str,
    pub detail: &'static str,
}

/// A delta as an SSE frame: no `id`, so the client's resume cursor stays on the last
/// durable event.
fn delta_frame(run_id: RunId, delta: &MessageDelta) -> Event {
    if let Some(p) = &delta.progress {
        let data = StreamData::Progress(StreamProgress {
            run_id,
            turn: delta.turn,
            receipt_id: p.receipt_id,
            tool: &p.tool,
            progress: p.progress,
            total: p.total,
            message: p.message.as_deref(),
        });
        let base = Event::default().event(PROGRESS_EVENT);
        return match serde_json::to_string(&data) {
            Ok(json) => base.data(json),
            Err(e) => base.comment(format!("unencodable progress: {e}")),
        };
    }
    let base = Event::default().event(if delta.reasoning {
        REASONING_EVENT
    } else {
        DELTA_EVENT
    });
    let data = StreamData::Delta(StreamDelta {
        run_id,
        turn: delta.turn,
        step: delta.step,
        attempt: delta.attempt,
        content: &delta.content,
    });
    match serde_json::to_string(&data) {
        Ok(json) => base.data(json),
        Err(e) => base.comment(format!("unencodable delta: {e}")),
    }
}

/// The SSE event name of a delta frame of the answer.
const DELTA_EVENT: &str = "message.delta";

/// The SSE event name of a tool call's progress frame.
const PROGRESS_EVENT: &str = "tool.progress";
/// The SSE event name of a delta frame of the model's reasoning.
const REASONING_EVENT: &str = "reasoning.delta";

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

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::to_bytes;

    /// The bytes an SSE response sends for these frames.
    async fn wire(frames: Vec<Event>) -> String {
        let stream = futures::stream::iter(frames.into_iter().map(Ok::<_, Infallible>));
        let body = Sse::new(stream).into_response().into_body();
        let bytes = to_bytes(body, usize::MAX).await.expect("body");
        String::from_utf8(bytes.to_vec()).expect("utf-8")
    }

    #[tokio::test]
    async fn a_delta_frame_has_no_id_and_carries_the_delta_and_its_run() {
        let run = RunId::new();
        let delta = MessageDelta {
            turn: 2,
            step: 1,
            attempt: 3,
            content: "Hel\nlo".into(),
            reasoning: false,
            progress: None,
        };
        let text = wire(vec![delta_frame(run, &delta)]).await;
        let lines: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
        assert_eq!(lines.len(), 2, "an event name and one data line: {text:?}");
        assert_eq!(lines[0], "event: message.delta");
        assert!(
            !text.lines().any(|l| l.starts_with("id")),
            "no id: the client's Last-Event-ID must not move: {text:?}"
        );
        let data = lines[1].strip_prefix("data: ").expect("a data line");
        let json: serde_json::Value = serde_json::from_str(data).expect("JSON data");
        assert_eq!(
            json,
            serde_json::json!({"run_id": run, "turn": 2, "step": 1, "attempt": 3,
                "content": "Hel\nlo"})
        );
    }

    #[tokio::test]
    async fn a_reasoning_delta_has_its_own_event_name() {
        let delta = MessageDelta {
            turn: 1,
            step: 1,
            attempt: 1,
            content: "let me think".into(),
            reasoning: true,
            progress: None,
        };
        let text = wire(vec![delta_frame(RunId::new(), &delta)]).await;
        assert!(
            text.lines().next() == Some("event: reasoning.delta"),
            "{text:?}"
        );
    }
}
