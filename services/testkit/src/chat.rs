//! A local stand-in for an OpenAI-compatible chat-completions server, for tests of
//! model providers.
//!
//! [`ChatServer`] listens on a free loopback port and answers
//! `POST /v1/chat/completions` with the responses pushed onto its script, first in first
//! out: a reply (a JSON completion, or an event stream when the request asks for
//! `stream`), an error status, a stream that breaks off, or any of those after a delay.
//! With the script empty it answers 500. Every request's JSON body and `Authorization`
//! header are recorded. The server stops when the handle drops.

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::task::JoinHandle;

/// What the server answers to one request.
#[derive(Debug, Clone, PartialEq)]
pub enum ChatResponse {
    /// A successful completion, streamed when the request asks for `stream`.
    Reply(ScriptedChat),
    /// An error status with this body, and a `Retry-After` header (seconds) if given.
    Status {
        status: u16,
        retry_after: Option<u64>,
        body: String,
    },
    /// An event stream that sends these content deltas, then ends without
    /// `data: [DONE]` (whether or not the request asked for a stream).
    BrokenStream { content_pieces: Vec<String> },
    /// Waits, then answers with `then`.
    Delay { ms: u64, then: Box<ChatResponse> },
}

impl ChatResponse {
    /// A plain text reply.
    pub fn text(content: &str) -> Self {
        ChatResponse::Reply(ScriptedChat::text(content))
    }

    /// An error status without `Retry-After`, with OpenAI's error JSON as the body.
    pub fn status(status: u16, message: &str) -> Self {
        ChatResponse::Status {
            status,
            retry_after: None,
            body: json!({ "error": { "message": message } }).to_string(),
        }
    }

    /// `self`, after `ms` milliseconds.
    pub fn delayed(self, ms: u64) -> Self {
        ChatResponse::Delay {
            ms,
            then: Box::new(self),
        }
    }
}

/// A completion the server returns.
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptedChat {
    pub content: Option<String>,
    /// Sent as `reasoning_content`, before the content (word by word when streamed).
    pub reasoning: Option<String>,
    /// `(id, name, arguments JSON text)`, in order.
    pub tool_calls: Vec<(String, String, String)>,
    pub finish_reason: String,
    /// `(prompt_tokens, completion_tokens)`.
    pub usage: (u64, u64),
}

impl ScriptedChat {
    /// Content only; finish reason `stop`, usage (10, 5).
    pub fn text(content: &str) -> Self {
        Self {
            content: Some(content.to_owned()),
            reasoning: None,
            tool_calls: Vec::new(),
            finish_reason: "stop".into(),
            usage: (10, 5),
        }
    }

    /// Tool calls `(id, name, arguments)` only; finish reason `tool_calls`, usage (10, 5).
    pub fn tool_calls(calls: Vec<(&str, &str, &str)>) -> Self {
        Self {
            content: None,
            reasoning: None,
            tool_calls: calls
                .into_iter()
                .map(|(id, name, args)| (id.to_owned(), name.to_owned(), args.to_owned()))
                .collect(),
            finish_reason: "tool_calls".into(),
            usage: (10, 5),
        }
    }

    pub fn with_content(mut self, content: &str) -> Self {
        self.content = Some(content.to_owned());
        self
    }

    /// With `reasoning` sent apart from the content, as `reasoning_content`.
    pub fn with_reasoning(mut self, reasoning: &str) -> Self {
        self.reasoning = Some(reasoning.to_owned());
        self
    }

    pub fn with_usage(mut self, prompt_tokens: u64, completion_tokens: u64) -> Self {
        self.usage = (prompt_tokens, completion_tokens);
        self
    }
}

/// One request the server received.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    /// The JSON body (`Value::Null` if it was not JSON).
    pub body: Value,
    /// The `Authorization` header, if sent.
    pub authorization: Option<String>,
}

#[derive(Default)]
struct Shared {
    script: Mutex<VecDeque<ChatResponse>>,
    requests: Mutex<Vec<RecordedRequest>>,
}

/// A running stub server; it stops when dropped.
pub struct ChatServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl ChatServer {
    /// Starts a server on a free port of 127.0.0.1.
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("cannot bind a loopback port for the chat stub");
        let addr = listener
            .local_addr()
            .expect("the chat stub's listener has no address");
        let shared = Arc::new(Shared::default());
        let app = Router::new()
            .route("/v1/chat/completions", post(completions))
            .with_state(shared.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { addr, shared, task }
    }

    /// `http://127.0.0.1:PORT/v1`, the base URL a provider is given.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Adds a response to the end of the script.
    pub fn push(&self, response: ChatResponse) {
        lock(&self.shared.script).push_back(response);
    }

    /// The requests received so far, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.requests).clone()
    }

    pub fn request_count(&self) -> usize {
        lock(&self.shared.requests).len()
    }
}

impl Drop for ChatServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl std::fmt::Debug for ChatServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

async fn completions(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    lock(&shared.requests).push(RecordedRequest {
        body: body.clone(),
        authorization,
    });
    let Some(response) = lock(&shared.script).pop_front() else {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({ "error": { "message": "chat stub: no scripted response left" } })),
        )
            .into_response();
    };
    answer(response, &body).await
}

/// The HTTP response for one scripted response to a request with this body.
async fn answer(mut response: ChatResponse, request: &Value) -> Response {
    let model = request["model"].as_str().unwrap_or("stub-model");
    loop {
        return match response {
            ChatResponse::Delay { ms, then } => {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                response = *then;
                continue;
            }
            ChatResponse::Reply(chat) if request["stream"] == true => {
                let usage = request["stream_options"]["include_usage"] == true;
                let mut events = stream_chunks(model, &chat, usage);
                events.push("[DONE]".to_owned());
                event_stream(events)
            }
            ChatResponse::Reply(chat) => Json(completion(model, &chat)).into_response(),
            ChatResponse::Status {
                status,
                retry_after,
                body,
            } => {
                let status =
                    StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                let mut response = (status, body).into_response();
                if let Some(seconds) = retry_after {
                    response
                        .headers_mut()
                        .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
                }
                response
            }
            ChatResponse::BrokenStream { content_pieces } => event_stream(
                content_pieces
                    .iter()
                    .map(|piece| {
                        let choices = json!([{ "index": 0, "delta": { "content": piece } }]);
                        chunk(model, choices, None)
                    })
                    .collect(),
            ),
        };
    }
}

/// A whole completion, as a non-streaming request gets it.
fn completion(model: &str, chat: &ScriptedChat) -> Value {
    let tool_calls: Vec<Value> = chat
        .tool_calls
        .iter()
        .map(|(id, name, arguments)| {
            json!({ "id": id, "type": "function", "function": { "name": name, "arguments": arguments } })
        })
        .collect();
    let mut message = json!({ "role": "assistant", "content": chat.content });
    if let Some(reasoning) = &chat.reasoning {
        message["reasoning_content"] = json!(reasoning);
    }
    if !tool_calls.is_empty() {
        message["tool_calls"] = Value::Array(tool_calls);
    }
    json!({
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{ "index": 0, "message": message, "finish_reason": chat.finish_reason }],
        "usage": usage(chat),
    })
}

/// The `data:` payloads of a streamed completion, without `[DONE]`: the role, the
/// reasoning and then the content word by word, each tool call (its arguments in two pieces), the finish
/// reason and, if asked for, the usage.
fn stream_chunks(model: &str, chat: &ScriptedChat, include_usage: bool) -> Vec<String> {
    let delta = |delta: Value| json!([{ "index": 0, "delta": delta, "finish_reason": null }]);
    let mut chunks = vec![chunk(model, delta(json!({ "role": "assistant" })), None)];
    for word in chat.reasoning.as_deref().unwrap_or("").split_inclusive(' ') {
        chunks.push(chunk(
            model,
            delta(json!({ "reasoning_content": word })),
            None,
        ));
    }
    for word in chat.content.as_deref().unwrap_or("").split_inclusive(' ') {
        chunks.push(chunk(model, delta(json!({ "content": word })), None));
    }
    for (index, (id, name, arguments)) in chat.tool_calls.iter().enumerate() {
        let call = json!({ "index": index, "id": id, "type": "function", "function": { "name": name, "arguments": "" } });
        chunks.push(chunk(model, delta(json!({ "tool_calls": [call] })), None));
        let middle = arguments
            .char_indices()
            .map(|(i, _)| i)
            .nth(arguments.chars().count() / 2)
            .unwrap_or(arguments.len());
        for piece in [&arguments[..middle], &arguments[middle..]] {
            let call = json!({ "index": index, "function": { "arguments": piece } });
            chunks.push(chunk(model, delta(json!({ "tool_calls": [call] })), None));
        }
    }
    let finish = json!([{ "index": 0, "delta": {}, "finish_reason": chat.finish_reason }]);
    chunks.push(chunk(model, finish, None));
    if include_usage {
        chunks.push(chunk(model, json!([]), Some(usage(chat))));
    }
    chunks
}

fn chunk(model: &str, choices: Value, usage: Option<Value>) -> String {
    json!({
        "id": "chatcmpl-stub",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": model,
        "choices": choices,
        "usage": usage,
    })
    .to_string()
}

fn usage(chat: &ScriptedChat) -> Value {
    let (prompt, completion) = chat.usage;
    json!({ "prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion })
}

/// A `text/event-stream` response with one `data:` event per payload, each its own
/// body chunk.
fn event_stream(payloads: Vec<String>) -> Response {
    let frames = payloads
        .into_iter()
        .map(|data| Ok::<_, Infallible>(Bytes::from(format!("data: {data}\n\n"))));
    (
        [(header::CONTENT_TYPE, "text/event-stream")],
        Body::from_stream(futures::stream::iter(frames)),
    )
        .into_response()
}
