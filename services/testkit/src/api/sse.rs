//! A run's event stream as an SSE client sees it: opening it (optionally after a
//! `Last-Event-ID`) and reading its frames as [`Frame`]s, each checked to be a
//! well-formed envelope whose id and event name match its JSON. Leaves what the events
//! mean to the tests.

use super::Api;
use eventsource_stream::{Event, EventStreamError, Eventsource};
use futures::StreamExt;
use futures::stream::BoxStream;
use serde_json::Value;
use std::time::{Duration, SystemTime};

/// An open SSE stream: the server's events as `eventsource-stream` parsed them.
pub type Stream = BoxStream<'static, Result<Event, EventStreamError<reqwest::Error>>>;

/// One event as an SSE client got it.
#[derive(Clone, Debug)]
pub struct Frame {
    /// The event's version: the SSE `id`, equal to the envelope's `version`.
    pub version: i64,
    /// The event's type: the SSE `event` name, equal to the envelope's `type`.
    pub event_type: String,
    /// The event envelope (the SSE `data`).
    pub envelope: Value,
    /// When the client decoded it.
    pub received_at: SystemTime,
}

impl Frame {
    /// (version, type), what most stream checks compare.
    pub fn pair(&self) -> (i64, String) {
        (self.version, self.event_type.clone())
    }
}

/// The (version, type) pairs of `frames`, in order.
pub fn pairs(frames: &[Frame]) -> Vec<(i64, String)> {
    frames.iter().map(Frame::pair).collect()
}

impl Api {
    /// A `GET` of the run's events as `text/event-stream`, with `Last-Event-ID` when given
    /// (any text, to test refusals); never time-bounded.
    pub fn sse_req(&self, run: &str, last_event_id: Option<&str>) -> reqwest::RequestBuilder {
        let r = self
            .unbounded(reqwest::Method::GET, &format!("/v1/runs/{run}/events"))
            .header("accept", "text/event-stream");
        match last_event_id {
            Some(id) => r.header("last-event-id", id),
            None => r,
        }
    }

    /// Opens the run's SSE stream after version `last_event_id` (from the start when
    /// `None`); `None` when the server answers 204 (the run ended and nothing follows).
    /// Panics on any other status than 200 and 204.
    pub async fn sse(&self, run: &str, last_event_id: Option<i64>) -> Option<Stream> {
        let after = last_event_id.map(|v| v.to_string());
        let res = self
            .sse_req(run, after.as_deref())
            .send()
            .await
            .expect("sse request");
        match res.status().as_u16() {
            200 => Some(res.bytes_stream().eventsource().boxed()),
            204 => None,
            other => panic!("sse for {run} after {last_event_id:?}: {other}"),
        }
    }
}

/// The name of the ephemeral events carrying a streaming model reply's deltas.
pub const DELTA: &str = "message.delta";

/// Decodes one SSE event; `None` for frames without data (comments, retry hints) and
/// for ephemeral deltas (see [`decode_delta`]). Panics unless the data is JSON whose
/// `version` and `type` are the frame's id and event name.
pub fn decode(ev: &Event) -> Option<Frame> {
    if ev.data.is_empty() || ev.event == DELTA {
        return None;
    }
    let envelope: Value = serde_json::from_str(&ev.data).expect("envelope JSON");
    let version: i64 = ev.id.parse().expect("numeric id");
    assert_eq!(envelope["version"], version, "id matches the envelope");
    assert_eq!(envelope["type"], ev.event.as_str());
    Some(Frame {
        version,
        event_type: ev.event.clone(),
        envelope,
        received_at: SystemTime::now(),
    })
}

/// The payload of an ephemeral `message.delta` event; `None` for any other frame.
pub fn decode_delta(ev: &Event) -> Option<Value> {
    if ev.event != DELTA {
        return None;
    }
    Some(serde_json::from_str(&ev.data).expect("delta JSON"))
}

/// The next event of a stream that must stay well-formed; `None` when it ends.
pub async fn next_frame(stream: &mut Stream) -> Option<Frame> {
    while let Some(ev) = stream.next().await {
        let ev = ev.expect("well-formed SSE");
        if let Some(frame) = decode(&ev) {
            return Some(frame);
        }
    }
    None
}

/// The next event of a stream that may be cut (its server is going away): a transport
/// error ends it like a clean close.
pub async fn next_frame_or_cut(stream: &mut Stream) -> Option<Frame> {
    while let Some(Ok(ev)) = stream.next().await {
        if let Some(frame) = decode(&ev) {
            return Some(frame);
        }
    }
    None
}

/// Reads events until the stream ends or, when given, `limit` of them arrived; panics
/// with what it got if that takes longer than `timeout`.
pub async fn read_frames(
    stream: &mut Stream,
    limit: Option<usize>,
    timeout: Duration,
) -> Vec<Frame> {
    let mut got = Vec::new();
    let read = async {
        while limit.is_none_or(|n| got.len() < n) {
            match next_frame(stream).await {
                Some(frame) => got.push(frame),
                None => return,
            }
        }
    };
    if tokio::time::timeout(timeout, read).await.is_err() {
        panic!("stream did not end in time; got {got:?}");
    }
    got
}
