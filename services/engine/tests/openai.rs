//! The OpenAI-compatible provider against a local chat-completions stub: replies
//! streamed and not, tool calls, retries, timeouts, broken streams and the request it
//! sends.

use baton_core::model::OpenAiSpec;
use baton_engine::provider::{
    ChatMessage, ChatRole, Delta, ModelError, ModelReply, ModelRequest, OpenAiProvider, Provider,
    ToolSpec,
};
use baton_events::{ToolCallRequest, Usage};
use baton_testkit::chat::{ChatResponse, ChatServer, ScriptedChat};
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// No call of these tests may take longer.
const CALL_LIMIT: Duration = Duration::from_secs(10);

fn spec(server: &ChatServer, stream: bool) -> OpenAiSpec {
    OpenAiSpec {
        // A trailing slash, to check it is trimmed.
        base_url: format!("{}/", server.base_url()),
        model: "gpt-test".into(),
        api_key_secret: None,
        request_timeout_ms: 3_000,
        max_retries: 2,
        retry_budget_ms: 8_000,
        stream,
        temperature: None,
    }
}

/// The embedded tier's client: the chat server listens on loopback.
fn egress() -> baton_egress::TenantEgress {
    baton_egress::Egress::new(baton_core::egress::EgressPolicy::local())
        .expect("the client")
        .for_tenant(Vec::new())
}

fn provider(spec: OpenAiSpec) -> OpenAiProvider {
    OpenAiProvider::new(egress(), spec, None)
}

fn hello() -> ModelRequest {
    ModelRequest {
        messages: vec![
            ChatMessage::text(ChatRole::System, "You are terse."),
            ChatMessage::text(ChatRole::User, "Say hello."),
        ],
        tools: Vec::new(),
        max_output_tokens: None,
    }
}

/// Calls the provider, collecting the deltas it streams.
async fn call(
    provider: &OpenAiProvider,
    request: &ModelRequest,
) -> (Result<ModelReply, ModelError>, Vec<Delta>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = {
        let seen = seen.clone();
        move |delta: Delta| seen.lock().expect("delta lock").push(delta)
    };
    let result = tokio::time::timeout(CALL_LIMIT, provider.complete(request, &sink))
        .await
        .expect("the model call took too long");
    let deltas = seen.lock().expect("delta lock").clone();
    (result, deltas)
}

fn joined(deltas: &[Delta], attempt: u32) -> String {
    deltas
        .iter()
        .filter(|d| d.attempt == attempt)
        .map(|d| d.content.as_str())
        .collect()
}

fn call_request(id: &str, name: &str, arguments: &str) -> ToolCallRequest {
    ToolCallRequest {
        id: id.into(),
        name: name.into(),
        arguments: arguments.into(),
    }
}

#[tokio::test]
async fn non_streaming_text() {
    let server = ChatServer::start().await;
    server.push(ChatResponse::text("Hello there."));
    let provider = provider(spec(&server, false));

    let (reply, deltas) = call(&provider, &hello()).await;

    let reply = reply.expect("a reply");
    assert_eq!(reply.content.as_deref(), Some("Hello there."));
    assert!(reply.tool_calls.is_empty());
    assert_eq!(reply.finish_reason, "stop");
    assert_eq!(
        reply.usage,
        Some(Usage {
            prompt_tokens: 10,
            completion_tokens: 5,
            total_tokens: 15
        })
    );
    assert_eq!(reply.model.as_deref(), Some("gpt-test"));
    assert!(!reply.complete_run);
    assert!(deltas.is_empty(), "no deltas without streaming: {deltas:?}");
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].body["stream"], false);
    assert!(requests[0].body.get("stream_options").is_none());
}

#[tokio::test]
async fn streaming_text() {
    let server = ChatServer::start().await;
    server.push(ChatResponse::text("The quick brown fox jumps."));
    let provider = provider(spec(&server, true));

    let (reply, deltas) = call(&provider, &hello()).await;

    let reply = reply.expect("a reply");
    assert_eq!(reply.content.as_deref(), Some("The quick brown fox jumps."));
    assert!(deltas.len() > 1, "several deltas: {deltas:?}");
    assert!(
        deltas
            .iter()
            .all(|d| d.attempt == 1 && !d.content.is_empty())
    );
    assert_eq!(joined(&deltas, 1), "The quick brown fox jumps.");
    assert_eq!(reply.finish_reason, "stop");
    assert_eq!(reply.usage.map(|u| u.total_tokens), Some(15));
    assert_eq!(reply.model.as_deref(), Some("gpt-test"));
    let body = &server.requests()[0].body;
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"]["include_usage"], true);
}

#[tokio::test]
async fn streamed_tool_calls_are_reassembled() {
    let server = ChatServer::start().await;
    server.push(ChatResponse::Reply(ScriptedChat::tool_calls(vec![
        (
            "call_1",
            "get_weather",
            r#"{"city":"Paris","unit":"celsius"}"#,
        ),
        ("call_2", "search", r#"{"query":"rust async"}"#),
    ])));
    let provider = provider(spec(&server, true));

    let (reply, deltas) = call(&provider, &hello()).await;

    let reply = reply.expect("a reply");
    assert_eq!(reply.content, None);
    assert!(deltas.is_empty(), "no content deltas: {deltas:?}");
    assert_eq!(
        reply.tool_calls,
        vec![
            call_request(
                "call_1",
                "get_weather",
                r#"{"city":"Paris","unit":"celsius"}"#
            ),
            call_request("call_2", "search", r#"{"query":"rust async"}"#),
        ]
    );
    assert_eq!(reply.finish_reason, "tool_calls");
}

#[tokio::test]
async fn non_streamed_tool_calls() {
    let server = ChatServer::start().await;
    server.push(ChatResponse::Reply(
        ScriptedChat::tool_calls(vec![("call_9", "lookup", r#"{"id":42}"#)])
            .with_content("Let me check."),
    ));
    let provider = provider(spec(&server, false));

    let (reply, _) = call(&provider, &hello()).await;

    let reply = reply.expect("a reply");
    assert_eq!(reply.content.as_deref(), Some("Let me check."));
    assert_eq!(
        reply.tool_calls,
        vec![call_request("call_9", "lookup", r#"{"id":42}"#)]
    );
    assert_eq!(reply.finish_reason, "tool_calls");
}

#[tokio::test]
async fn too_many_requests_is_retried_after_retry_after() {
    let server = ChatServer::start().await;
    server.push(ChatResponse::Status {
        status: 429,
        retry_after: Some(0),
        body: json!({"error": {"message": "slow down"}}).to_string(),
    });
    server.push(ChatResponse::text("Fine."));
    let provider = provider(spec(&server, true));

    let (reply, deltas) = call(&provider, &hello()).await;

    assert_eq!(reply.expect("a reply").content.as_deref(), Some("Fine."));
    assert_eq!(server.request_count(), 2);
    assert_eq!(joined(&deltas, 2), "Fine.");
}

#[tokio::test]
async fn server_errors_exhaust_the_retries() {
    let server = ChatServer::start().await;
    let spec = spec(&server, false);
    let attempts = spec.max_retries as usize + 1;
    for _ in 0..attempts {
        server.push(ChatResponse::status(500, "internal trouble"));
    }
    server.push(ChatResponse::text("too late"));
    let provider = provider(spec);

    let (result, _) = call(&provider, &hello()).await;

    let error = result.expect_err("the call fails");
    assert_eq!(error.code, "model_unavailable");
    assert!(error.message.contains("500"), "{}", error.message);
    assert!(
        error.message.contains(&format!("{attempts} attempts")),
        "{}",
        error.message
    );
    assert_eq!(server.request_count(), attempts);
}

#[tokio::test]
async fn bad_request_is_not_retried() {
    let server = ChatServer::start().await;
    server.push(ChatResponse::status(400, "messages[1].content is invalid"));
    server.push(ChatResponse::text("never sent"));
    let provider = provider(spec(&server, true));

    let (result, _) = call(&provider, &hello()).await;

    let error = result.expect_err("the call fails");
    assert_eq!(error.code, "model_rejected");
    assert!(error.message.contains("400"), "{}", error.message);
    assert!(
        error.message.contains("messages[1].content is invalid"),
        "{}",
        error.message
    );
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn long_server_messages_are_shortened() {
    let server = ChatServer::start().await;
    server.push(ChatResponse::status(422, &"x".repeat(5_000)));
    let provider = provider(spec(&server, false));

    let (result, _) = call(&provider, &hello()).await;

    let error = result.expect_err("the call fails");
    assert_eq!(error.code, "model_rejected");
    assert!(error.message.len() < 600, "{}", error.message.len());
}

#[tokio::test]
async fn a_broken_stream_is_retried_as_a_new_attempt() {
    let server = ChatServer::start().await;
    server.push(ChatResponse::BrokenStream {
        content_pieces: vec!["Hel".into(), "lo".into()],
    });
    server.push(ChatResponse::text("Hello world"));
    let provider = provider(spec(&server, true));

    let (reply, deltas) = call(&provider, &hello()).await;

    assert_eq!(
        reply.expect("a reply").content.as_deref(),
        Some("Hello world")
    );
    assert_eq!(joined(&deltas, 1), "Hello");
    assert_eq!(joined(&deltas, 2), "Hello world");
    let attempts: Vec<u32> = deltas.iter().map(|d| d.attempt).collect();
    assert!(
        attempts.is_sorted(),
        "attempt 2 follows attempt 1: {attempts:?}"
    );
    assert_eq!(server.request_count(), 2);
}

#[tokio::test]
async fn streams_that_always_break_fail() {
    let server = ChatServer::start().await;
    let mut spec = spec(&server, true);
    spec.max_retries = 1;
    for _ in 0..2 {
        server.push(ChatResponse::BrokenStream {
            content_pieces: vec!["partial".into()],
        });
    }
    let provider = provider(spec);

    let (result, deltas) = call(&provider, &hello()).await;

    let error = result.expect_err("the call fails");
    assert_eq!(error.code, "model_stream_broken");
    assert!(error.message.contains("2 attempts"), "{}", error.message);
    assert_eq!(server.request_count(), 2);
    assert_eq!(joined(&deltas, 1), "partial");
    assert_eq!(joined(&deltas, 2), "partial");
}

#[tokio::test]
async fn a_slow_server_times_out() {
    let server = ChatServer::start().await;
    let mut spec = spec(&server, true);
    spec.request_timeout_ms = 200;
    spec.max_retries = 0;
    server.push(ChatResponse::text("late").delayed(2_000));
    let provider = provider(spec);

    let started = Instant::now();
    let (result, _) = call(&provider, &hello()).await;

    let error = result.expect_err("the call fails");
    assert_eq!(error.code, "model_timeout");
    assert!(error.message.contains("200 ms"), "{}", error.message);
    assert!(started.elapsed() < Duration::from_millis(1_500));
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn a_retry_after_past_the_budget_ends_the_call() {
    let server = ChatServer::start().await;
    let mut spec = spec(&server, false);
    spec.retry_budget_ms = 1_000;
    server.push(ChatResponse::Status {
        status: 503,
        retry_after: Some(30),
        body: "overloaded".into(),
    });
    server.push(ChatResponse::text("never sent"));
    let provider = provider(spec);

    let started = Instant::now();
    let (result, _) = call(&provider, &hello()).await;

    let error = result.expect_err("the call fails");
    assert_eq!(error.code, "model_unavailable");
    assert!(error.message.contains("503"), "{}", error.message);
    assert!(error.message.contains("overloaded"), "{}", error.message);
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn the_request_is_in_openai_form() {
    let server = ChatServer::start().await;
    server.push(ChatResponse::text("It is sunny."));
    let mut spec = spec(&server, false);
    spec.temperature = Some(0.5);
    let provider = provider(spec);
    let request = ModelRequest {
        messages: vec![
            ChatMessage::text(ChatRole::System, "Be helpful."),
            ChatMessage::text(ChatRole::User, "Weather in Paris?"),
            ChatMessage {
                role: ChatRole::Assistant,
                content: None,
                tool_calls: vec![call_request("call_1", "get_weather", r#"{"city":"Paris"}"#)],
                tool_call_id: None,
            },
            ChatMessage::tool_output("call_1", r#"{"sky":"clear"}"#),
        ],
        tools: vec![ToolSpec {
            name: "get_weather".into(),
            description: "Current weather of a city".into(),
            parameters: json!({
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"]
            }),
        }],
        max_output_tokens: Some(256),
    };

    let (reply, _) = call(&provider, &request).await;

    reply.expect("a reply");
    let body = &server.requests()[0].body;
    assert_eq!(body["model"], "gpt-test");
    assert_eq!(body["max_tokens"], 256);
    assert_eq!(body["temperature"], 0.5);
    assert_eq!(body["stream"], false);
    assert!(body.get("tool_choice").is_none());
    assert_eq!(
        body["messages"],
        json!([
            {"role": "system", "content": "Be helpful."},
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": null,
                "tool_calls": [{
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}
                }]
            },
            {"role": "tool", "content": "{\"sky\":\"clear\"}", "tool_call_id": "call_1"}
        ])
    );
    assert_eq!(
        body["tools"],
        json!([{
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather of a city",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"]
                }
            }
        }])
    );
}

#[tokio::test]
async fn no_tools_no_limits_leave_the_fields_out() {
    let server = ChatServer::start().await;
    server.push(ChatResponse::text("Hi."));
    let provider = provider(spec(&server, false));

    let (reply, _) = call(&provider, &hello()).await;

    reply.expect("a reply");
    let request = &server.requests()[0];
    for field in ["tools", "tool_choice", "max_tokens", "temperature"] {
        assert!(request.body.get(field).is_none(), "{field} sent");
    }
    assert_eq!(request.authorization, None);
}

#[tokio::test]
async fn the_api_key_is_sent_as_a_bearer_token_and_never_shown() {
    const KEY: &str = "sk-test-very-secret-0123";
    let server = ChatServer::start().await;
    server.push(ChatResponse::text("Authorised."));
    server.push(ChatResponse::status(
        401,
        &format!("Incorrect API key provided: {KEY}"),
    ));
    let provider = OpenAiProvider::new(egress(), spec(&server, true), Some(KEY.into()));

    let (reply, _) = call(&provider, &hello()).await;
    reply.expect("a reply");
    let (result, _) = call(&provider, &hello()).await;

    assert_eq!(
        server.requests()[0].authorization.as_deref(),
        Some(format!("Bearer {KEY}").as_str())
    );
    let debug = format!("{provider:?}");
    assert!(!debug.contains(KEY), "{debug}");
    let error = result.expect_err("the second call fails");
    assert_eq!(error.code, "model_rejected");
    assert!(error.message.contains("401"), "{}", error.message);
    assert!(!error.message.contains(KEY), "{}", error.message);
    assert!(!error.to_string().contains(KEY));
}

#[tokio::test]
async fn the_api_key_is_masked_before_the_servers_message_is_shortened() {
    const KEY: &str = "sk-proj-4fQ9zX2mLw7Rk1Tb8Yp3Vn6Hc0Jd5Gs";
    // The message is shortened to 300 characters: plant the key at every offset that
    // puts it across that cut.
    for offset in 300 - KEY.len() - 2..=302 {
        let server = ChatServer::start().await;
        let message = format!("{}{KEY} was not accepted", "x".repeat(offset));
        server.push(ChatResponse::status(401, &message));
        let provider = OpenAiProvider::new(egress(), spec(&server, false), Some(KEY.into()));
        let (result, _) = call(&provider, &hello()).await;
        let error = result.expect_err("rejected");
        for i in 0..KEY.len() - 5 {
            let piece = &KEY[i..i + 6];
            assert!(
                !error.message.contains(piece),
                "offset {offset}: {piece:?} in {}",
                error.message
            );
        }
    }
}

#[tokio::test]
async fn a_model_server_the_egress_policy_refuses_is_never_called() {
    let server = ChatServer::start().await;
    server.push(ChatResponse::text("should not be seen"));
    let strict = baton_egress::Egress::new(baton_core::egress::EgressPolicy::strict())
        .expect("the client")
        .for_tenant(Vec::new());
    let provider = OpenAiProvider::new(strict, spec(&server, false), None);
    let (result, _) = call(&provider, &hello()).await;
    let error = result.expect_err("refused");
    assert_eq!(error.code, "egress_denied");
    assert!(error.message.contains("loopback"), "{}", error.message);
    assert!(server.requests().is_empty(), "the server was called");
}

/// The deltas of one kind, joined.
fn joined_kind(deltas: &[Delta], reasoning: bool) -> String {
    deltas
        .iter()
        .filter(|d| d.reasoning == reasoning)
        .map(|d| d.content.as_str())
        .collect()
}

#[tokio::test]
async fn reasoning_content_is_kept_and_streamed_apart_from_the_answer() {
    for stream in [true, false] {
        let server = ChatServer::start().await;
        server.push(ChatResponse::Reply(
            ScriptedChat::text("Hello!").with_reasoning("The user wants a greeting."),
        ));
        let (reply, deltas) = call(&provider(spec(&server, stream)), &hello()).await;
        let reply = reply.expect("a reply");
        assert_eq!(reply.content.as_deref(), Some("Hello!"), "stream {stream}");
        assert_eq!(
            reply.reasoning.as_deref(),
            Some("The user wants a greeting.")
        );
        if stream {
            assert_eq!(joined_kind(&deltas, true), "The user wants a greeting.");
            assert_eq!(joined_kind(&deltas, false), "Hello!");
            let first_answer = deltas.iter().position(|d| !d.reasoning);
            let last_thought = deltas.iter().rposition(|d| d.reasoning);
            assert!(last_thought < first_answer, "{deltas:?}");
        }
    }
}

#[tokio::test]
async fn think_blocks_in_the_content_are_reasoning_not_answer() {
    for stream in [true, false] {
        let server = ChatServer::start().await;
        server.push(ChatResponse::text(
            "<think>They said hello, so I greet back.</think>\n\nHello to you.",
        ));
        let (reply, deltas) = call(&provider(spec(&server, stream)), &hello()).await;
        let reply = reply.expect("a reply");
        assert_eq!(
            reply.content.as_deref(),
            Some("Hello to you."),
            "stream {stream}"
        );
        assert_eq!(
            reply.reasoning.as_deref(),
            Some("They said hello, so I greet back.")
        );
        if stream {
            assert_eq!(
                joined_kind(&deltas, true),
                "They said hello, so I greet back."
            );
            assert!(!joined_kind(&deltas, false).contains("think"), "{deltas:?}");
        }
    }
}
