//! The OpenAI-compatible chat-completions provider (OpenAI, vLLM, Ollama, llama.cpp).
//!
//! One model step is one `POST {base_url}/chat/completions`, streamed (server-sent
//! events, deltas forwarded to the [`DeltaSink`] as they arrive) or not.
//!
//! - Each attempt — request, response and the whole stream — is bounded by
//!   `request_timeout_ms`; all attempts and the waits between them fit in
//!   `retry_budget_ms`.
//! - A 408, a 429, a 5xx, a transport error, a timeout and a broken stream (one that
//!   ends or fails before `data: [DONE]`, or carries a chunk that cannot be read) are
//!   retried up to `max_retries` times, after an exponential, jittered back-off or the
//!   server's `Retry-After`. Any other 4xx fails at once.
//! - Deltas carry the attempt number (from 1), so a client can drop what a broken
//!   attempt had streamed.
//! - The API key is sent as a bearer token and appears in no log, error or `Debug`
//!   output.

use super::chat::{ChatMessage, ChatRole, Delta, DeltaSink, ModelError, ModelReply, ModelRequest};
use super::chat::{Provider, ToolSpec};
use super::reasoning::{Split, ThinkSplitter};
use baton_core::model::OpenAiSpec;
use baton_egress::{Egress, Mask, TenantEgress};
use baton_events::{ToolCallRequest, Usage};
use bytes::Bytes;
use eventsource_stream::{EventStreamError, Eventsource};
use futures::StreamExt;
use reqwest::StatusCode;
use reqwest::header::{self, HeaderMap};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};

/// The first back-off; it doubles after each retry, up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
const MAX_BACKOFF: Duration = Duration::from_secs(8);
/// At most this much of a server's error message goes into a [`ModelError`].
const MAX_SERVER_MESSAGE_CHARS: usize = 300;

/// Calls an OpenAI-compatible chat-completions endpoint.
pub struct OpenAiProvider {
    egress: TenantEgress,
    spec: OpenAiSpec,
    api_key: Option<String>,
    /// The API key, masked in whatever the server sends back.
    mask: Mask,
    /// `{base_url}/chat/completions`.
    url: String,
}

impl OpenAiProvider {
    /// A provider for `spec`, sending `api_key` (the resolved secret, if any) as a
    /// bearer token.
    pub fn new(egress: TenantEgress, spec: OpenAiSpec, api_key: Option<String>) -> Self {
        let url = format!("{}/chat/completions", spec.base_url.trim_end_matches('/'));
        Self {
            egress,
            mask: Mask::new(api_key.clone()),
            spec,
            api_key,
            url,
        }
    }

    /// One HTTP attempt, from sending the request to the end of the reply.
    async fn attempt(&self, body: &Bytes, attempt: u32, deltas: &DeltaSink) -> Outcome {
        let url = url::Url::parse(&self.url)
            .map_err(|_| Failure::BadResponse("the provider's base URL does not parse".into()))?;
        let mut request = self
            .egress
            .request(reqwest::Method::POST, &url)
            .map_err(|denied| Failure::Denied(denied.rule))?
            .header(header::CONTENT_TYPE, "application/json")
            .body(body.clone());
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let response = request.send().await.map_err(transport)?;
        let status = response.status();
        if !status.is_success() {
            let retry_after = retry_after(response.headers());
            let text = response.text().await.unwrap_or_default();
            return Err(Failure::Status {
                status,
                retry_after,
                message: self.server_message(&text),
            });
        }
        if self.spec.stream && is_event_stream(response.headers()) {
            self.read_stream(response, attempt, deltas).await
        } else {
            let bytes = response.bytes().await.map_err(transport)?;
            parse_completion(&bytes)
        }
    }

    /// Reads a streamed reply up to `data: [DONE]`, forwarding content deltas.
    async fn read_stream(
        &self,
        response: reqwest::Response,
        attempt: u32,
        deltas: &DeltaSink,
    ) -> Outcome {
        let mut events = response.bytes_stream().eventsource();
        let mut reply = StreamedReply::default();
        while let Some(event) = events.next().await {
            let event = event.map_err(|e| {
                Failure::Broken(match e {
                    EventStreamError::Transport(e) => baton_egress::describe(&e).to_string(),
                    other => format!("the stream could not be read: {other}"),
                })
            })?;
            let data = event.data.trim();
            if data == "[DONE]" {
                return Ok(reply.finish());
            }
            if data.is_empty() {
                continue;
            }
            let chunk: WireChunk = serde_json::from_str(data)
                .map_err(|e| Failure::Broken(format!("a chunk could not be read: {e}")))?;
            if let Some(error) = chunk.error {
                return Err(Failure::Broken(format!(
                    "the server reported an error mid-stream: {}",
                    self.server_message(&error.to_string())
                )));
            }
            for (reasoning, piece) in reply.add(chunk) {
                deltas(Delta {
                    attempt,
                    content: piece,
                    reasoning,
                });
            }
        }
        Err(Failure::Broken("the stream ended before [DONE]".into()))
    }

    /// The server's error message from an error body: `error.message` when the body is
    /// OpenAI's error JSON, else the text itself; with the API key masked should the
    /// server echo it, then shortened.
    fn server_message(&self, text: &str) -> String {
        let message = serde_json::from_str::<serde_json::Value>(text)
            .ok()
            .and_then(|v| {
                v.pointer("/error/message")
                    .or_else(|| v.get("message"))
                    .or_else(|| v.get("error"))
                    .and_then(|m| m.as_str().map(str::to_owned))
            })
            .unwrap_or_else(|| text.trim().to_owned());
        let message = self.mask.apply(&message);
        match message.char_indices().nth(MAX_SERVER_MESSAGE_CHARS) {
            Some((end, _)) => format!("{}…", &message[..end]),
            None => message,
        }
    }

    fn request_body(&self, request: &ModelRequest) -> Result<Bytes, ModelError> {
        let body = WireRequest {
            model: &self.spec.model,
            messages: request.messages.iter().map(WireMessage::from).collect(),
            tools: request.tools.iter().map(WireTool::from).collect(),
            max_tokens: request.max_output_tokens,
            temperature: self.spec.temperature,
            stream: self.spec.stream,
            stream_options: self.spec.stream.then_some(StreamOptions {
                include_usage: true,
            }),
        };
        serde_json::to_vec(&body).map(Bytes::from).map_err(|e| {
            ModelError::new(
                "model_rejected",
                format!("the request could not be encoded: {e}"),
            )
        })
    }
}

impl fmt::Debug for OpenAiProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiProvider")
            .field("url", &self.url)
            .field("model", &self.spec.model)
            .field("stream", &self.spec.stream)
            .field("request_timeout_ms", &self.spec.request_timeout_ms)
            .field("max_retries", &self.spec.max_retries)
            .field("retry_budget_ms", &self.spec.retry_budget_ms)
            .field("has_api_key", &self.api_key.is_some())
            .finish_non_exhaustive()
    }
}

#[async_trait::async_trait]
impl Provider for OpenAiProvider {
    async fn complete(
        &self,
        request: &ModelRequest,
        deltas: &DeltaSink,
    ) -> Result<ModelReply, ModelError> {
        let body = self.request_body(request)?;
        let started = Instant::now();
        let budget = Duration::from_millis(self.spec.retry_budget_ms);
        let request_timeout = Duration::from_millis(self.spec.request_timeout_ms);
        let mut backoff = FIRST_BACKOFF;
        let mut attempt: u32 = 1;
        loop {
            let left = budget.saturating_sub(started.elapsed());
            let limit = request_timeout.min(left);
            tracing::debug!(model = %self.spec.model, attempt, "calling the model");
            let failure =
                match tokio::time::timeout(limit, self.attempt(&body, attempt, deltas)).await {
                    Ok(Ok(reply)) => return Ok(reply),
                    Ok(Err(failure)) => failure,
                    Err(_) => Failure::Timeout(limit),
                };
            if !failure.retryable() || attempt > self.spec.max_retries {
                return Err(failure.into_error(attempt, None));
            }
            let wait = match failure.retry_after() {
                Some(wait) => wait,
                None => jittered(backoff),
            };
            if started.elapsed() + wait >= budget {
                tracing::warn!(
                    model = %self.spec.model,
                    attempt,
                    failure = %failure.summary(),
                    wait_ms = wait.as_millis() as u64,
                    "model call failed and the retry budget is spent"
                );
                return Err(failure.into_error(attempt, Some(self.spec.retry_budget_ms)));
            }
            tracing::warn!(
                model = %self.spec.model,
                attempt,
                failure = %failure.summary(),
                wait_ms = wait.as_millis() as u64,
                "model call failed; retrying"
            );
            tokio::time::sleep(wait).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
            attempt += 1;
        }
    }
}

type Outcome = Result<ModelReply, Failure>;

/// Why one attempt failed.
#[derive(Debug)]
enum Failure {
    /// The egress policy refused the call: its rule.
    Denied(String),
    Timeout(Duration),
    Status {
        status: StatusCode,
        retry_after: Option<Duration>,
        message: String,
    },
    Transport(String),
    Broken(String),
    BadResponse(String),
}

impl Failure {
    fn retryable(&self) -> bool {
        match self {
            Failure::Timeout(_) | Failure::Transport(_) | Failure::Broken(_) => true,
            Failure::Status { status, .. } => retryable_status(*status),
            Failure::BadResponse(_) | Failure::Denied(_) => false,
        }
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            Failure::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// A short description for logs (no server message: it is not ours to log).
    fn summary(&self) -> String {
        match self {
            Failure::Denied(rule) => format!("egress denied: {rule}"),
            Failure::Timeout(limit) => format!("timed out after {} ms", limit.as_millis()),
            Failure::Status { status, .. } => format!("status {status}"),
            Failure::Transport(e) => format!("transport error: {e}"),
            Failure::Broken(e) => format!("broken stream: {e}"),
            Failure::BadResponse(e) => format!("bad response: {e}"),
        }
    }

    /// The error after `attempts` attempts; `budget_ms` when the retry budget ended them.
    fn into_error(self, attempts: u32, budget_ms: Option<u64>) -> ModelError {
        let tries = match attempts {
            1 => "1 attempt".to_owned(),
            n => format!("{n} attempts"),
        };
        let tries = match budget_ms {
            Some(ms) => format!("{tries} (retry budget of {ms} ms spent)"),
            None => tries,
        };
        match self {
            Failure::Denied(rule) => ModelError::denied(rule),
            Failure::Timeout(limit) => ModelError::new(
                "model_timeout",
                format!(
                    "the model server did not answer within {} ms, after {tries}",
                    limit.as_millis()
                ),
            ),
            Failure::Status {
                status, message, ..
            } if retryable_status(status) => ModelError::new(
                "model_unavailable",
                format!("the model server answered {status} after {tries}: {message}"),
            ),
            Failure::Status {
                status, message, ..
            } => ModelError::new(
                "model_rejected",
                format!(
                    "the model server rejected the request with {status} after {tries}: {message}"
                ),
            ),
            Failure::Transport(e) => ModelError::new(
                "model_unavailable",
                format!("could not reach the model server after {tries}: {e}"),
            ),
            Failure::Broken(e) => ModelError::new(
                "model_stream_broken",
                format!("the reply stream broke after {tries}: {e}"),
            ),
            Failure::BadResponse(e) => ModelError::new(
                "model_bad_response",
                format!("the model server's reply could not be read after {tries}: {e}"),
            ),
        }
    }
}

fn retryable_status(status: StatusCode) -> bool {
    status == StatusCode::TOO_MANY_REQUESTS
        || status == StatusCode::REQUEST_TIMEOUT
        || status.is_server_error()
}

/// `Retry-After` in seconds (the HTTP-date form is ignored).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(header::RETRY_AFTER)?.to_str().ok()?;
    value.trim().parse::<u64>().ok().map(Duration::from_secs)
}

fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("text/event-stream"))
}

/// Between half and all of `backoff`, at random.
fn jittered(backoff: Duration) -> Duration {
    use std::hash::BuildHasher;
    let random = std::collections::hash_map::RandomState::new().hash_one(Instant::now());
    let half = backoff / 2;
    let spread = half.as_millis().max(1) as u64;
    half + Duration::from_millis(random % spread)
}

/// A transport error: the policy's refusal, or the kind of failure, never the operating
/// system's words or an address.
fn transport(error: reqwest::Error) -> Failure {
    match Egress::denied(&error) {
        Some(denied) => Failure::Denied(denied.rule),
        None => Failure::Transport(baton_egress::describe(&error).to_string()),
    }
}

fn parse_completion(bytes: &[u8]) -> Outcome {
    let completion: WireCompletion = serde_json::from_slice(bytes)
        .map_err(|e| Failure::BadResponse(format!("invalid JSON: {e}")))?;
    let choice = completion
        .choices
        .into_iter()
        .next()
        .ok_or_else(|| Failure::BadResponse("the reply has no choices".into()))?;
    let message = choice.message.unwrap_or_default();
    let tool_calls = message
        .tool_calls
        .into_iter()
        .map(|call| {
            let function = call.function.unwrap_or_default();
            ToolCallRequest {
                id: call.id.unwrap_or_default(),
                name: function.name.unwrap_or_default(),
                arguments: arguments_text(function.arguments),
            }
        })
        .collect();
    let (split, thought) = ThinkSplitter::split(message.content.as_deref().unwrap_or(""));
    let mut reasoning = message
        .reasoning_content
        .or(message.reasoning)
        .unwrap_or_default();
    reasoning.push_str(&split.reasoning);
    Ok(ModelReply {
        content: answer(split.answer, thought),
        reasoning: Some(reasoning).filter(|r| !r.is_empty()),
        tool_calls,
        finish_reason: choice.finish_reason.unwrap_or_else(|| "stop".into()),
        usage: completion.usage.map(WireUsage::into_usage),
        model: completion.model,
        complete_run: false,
    })
}

/// The answer as kept: none when empty; without the blank lines a model leaves between
/// its `</think>` and its answer.
fn answer(text: String, thought: bool) -> Option<String> {
    let text = match thought {
        true => text.trim().to_owned(),
        false => text,
    };
    Some(text).filter(|t| !t.is_empty())
}

/// Tool-call arguments as text: most servers send a JSON string, some an object.
fn arguments_text(arguments: Option<serde_json::Value>) -> String {
    match arguments {
        None | Some(serde_json::Value::Null) => String::new(),
        Some(serde_json::Value::String(text)) => text,
        Some(other) => other.to_string(),
    }
}

/// A streamed reply as its chunks arrive.
#[derive(Default)]
struct StreamedReply {
    content: String,
    reasoning: String,
    /// Splits `<think>` blocks out of the content as it streams.
    think: ThinkSplitter,
    /// Tool calls by their `index`.
    tool_calls: BTreeMap<u32, ToolCallRequest>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    model: Option<String>,
}

impl StreamedReply {
    /// Takes in one chunk; returns its pieces to stream, each marked `true` when it is
    /// reasoning.
    fn add(&mut self, chunk: WireChunk) -> Vec<(bool, String)> {
        if chunk.model.is_some() {
            self.model = chunk.model;
        }
        if let Some(usage) = chunk.usage {
            self.usage = Some(usage.into_usage());
        }
        let Some(choice) = chunk.choices.into_iter().next() else {
            return Vec::new();
        };
        if let Some(reason) = choice.finish_reason {
            self.finish_reason = Some(reason);
        }
        let Some(delta) = choice.delta else {
            return Vec::new();
        };
        for piece in delta.tool_calls {
            let index = piece.index.unwrap_or_else(|| {
                // Servers that omit the index send one call after the other.
                let last = self.tool_calls.keys().next_back().copied();
                match (last, &piece.id) {
                    (Some(last), None) => last,
                    (Some(last), Some(_)) => last.saturating_add(1),
                    (None, _) => 0,
                }
            });
            let call = self.tool_calls.entry(index).or_insert(ToolCallRequest {
                id: String::new(),
                name: String::new(),
                arguments: String::new(),
            });
            if let Some(id) = piece.id.filter(|id| !id.is_empty()) {
                call.id = id;
            }
            let function = piece.function.unwrap_or_default();
            if let Some(name) = function.name {
                call.name.push_str(&name);
            }
            call.arguments.push_str(&arguments_text(function.arguments));
        }
        let mut pieces = Vec::new();
        if let Some(thinking) = delta.reasoning_content.or(delta.reasoning) {
            self.reasoning.push_str(&thinking);
            pieces.push((true, thinking));
        }
        if let Some(content) = delta.content {
            let split = self.think.feed(&content);
            self.take(split, &mut pieces);
        }
        pieces.retain(|(_, p)| !p.is_empty());
        pieces
    }

    /// Keeps a split piece of content and lists it to stream.
    fn take(&mut self, split: Split, pieces: &mut Vec<(bool, String)>) {
        self.reasoning.push_str(&split.reasoning);
        self.content.push_str(&split.answer);
        pieces.push((true, split.reasoning));
        pieces.push((false, split.answer));
    }

    fn finish(mut self) -> ModelReply {
        let rest = self.think.finish();
        self.take(rest, &mut Vec::new());
        ModelReply {
            content: answer(self.content, self.think.seen),
            reasoning: Some(self.reasoning).filter(|r| !r.is_empty()),
            tool_calls: self.tool_calls.into_values().collect(),
            finish_reason: self.finish_reason.unwrap_or_else(|| "stop".into()),
            usage: self.usage,
            model: self.model,
            complete_run: false,
        }
    }
}

// --- The wire format -------------------------------------------------------------

#[derive(Serialize)]
struct WireRequest<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
struct WireMessage<'a> {
    role: ChatRole,
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<WireToolCall<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
}

impl<'a> From<&'a ChatMessage> for WireMessage<'a> {
    fn from(message: &'a ChatMessage) -> Self {
        Self {
            role: message.role,
            content: message.content.as_deref(),
            tool_calls: message
                .tool_calls
                .iter()
                .map(|call| WireToolCall {
                    id: &call.id,
                    kind: "function",
                    function: WireFunctionCall {
                        name: &call.name,
                        arguments: &call.arguments,
                    },
                })
                .collect(),
            tool_call_id: message.tool_call_id.as_deref(),
        }
    }
}

#[derive(Serialize)]
struct WireToolCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunctionCall<'a>,
}

#[derive(Serialize)]
struct WireFunctionCall<'a> {
    name: &'a str,
    arguments: &'a str,
}

#[derive(Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunction<'a>,
}

#[derive(Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a serde_json::Value,
}

impl<'a> From<&'a ToolSpec> for WireTool<'a> {
    fn from(tool: &'a ToolSpec) -> Self {
        Self {
            kind: "function",
            function: WireFunction {
                name: &tool.name,
                description: &tool.description,
                parameters: &tool.parameters,
            },
        }
    }
}

#[derive(Deserialize)]
struct WireCompletion {
    #[serde(default)]
    choices: Vec<WireChoice>,
    usage: Option<WireUsage>,
    model: Option<String>,
}

#[derive(Deserialize)]
struct WireChoice {
    message: Option<WireReplyMessage>,
    finish_reason: Option<String>,
}

#[derive(Deserialize, Default)]
struct WireReplyMessage {
    content: Option<String>,
    /// DeepSeek's and vLLM's field for the reasoning.
    reasoning_content: Option<String>,
    /// The same, as other servers name it.
    reasoning: Option<String>,
    #[serde(default, deserialize_with = "null_as_empty")]
    tool_calls: Vec<WireReplyToolCall>,
}

/// A tool call of a reply, whole or (streamed) in pieces.
#[derive(Deserialize)]
struct WireReplyToolCall {
    index: Option<u32>,
    id: Option<String>,
    function: Option<WireReplyFunction>,
}

#[derive(Deserialize, Default)]
struct WireReplyFunction {
    name: Option<String>,
    arguments: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct WireChunk {
    #[serde(default, deserialize_with = "null_as_empty")]
    choices: Vec<WireChunkChoice>,
    usage: Option<WireUsage>,
    model: Option<String>,
    error: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct WireChunkChoice {
    delta: Option<WireDelta>,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct WireDelta {
    content: Option<String>,
    reasoning_content: Option<String>,
    reasoning: Option<String>,
    #[serde(default, deserialize_with = "null_as_empty")]
    tool_calls: Vec<WireReplyToolCall>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    total_tokens: Option<u64>,
}

impl WireUsage {
    fn into_usage(self) -> Usage {
        Usage {
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.completion_tokens,
            total_tokens: self
                .total_tokens
                .unwrap_or(self.prompt_tokens + self.completion_tokens),
        }
    }
}

/// A list that some servers send as `null`.
fn null_as_empty<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<Vec<T>>::deserialize(deserializer)?.unwrap_or_default())
}
