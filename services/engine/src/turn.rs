//! The model step of a turn: the request (the agent's instructions, the conversation,
//! the tools on offer), the call itself — bounded by the turn's time, cut short by a
//! cancel, an interrupt or the shutdown, its deltas sent to live subscribers — and the append of the
//! reply: with tool calls the turn goes on, without them it completes in that append.

use crate::agent::TurnContext;
use crate::interrupt::{Interrupted, Interrupts};
use crate::outcome::{Next, StepError, info};
use crate::provider::{
    ChatMessage, ChatRole, DeltaSink, ModelError, ModelReply, ModelRequest, ToolSpec,
};
use crate::settle;
use crate::shared::Shared;
use crate::state::RunState;
use crate::stream::RunStream;
use baton_core::model::{ProviderSpec, RunSummary};
use baton_core::ports::Release;
use baton_events::{
    MessageId, ModelCompleted, RunCompleted, RunEvent, ToolCallRequest, TurnCompleted,
};
use tracing::Instrument;

/// Asks the model and records its answer: with tool calls the turn goes on, without
/// them it completes in the same append.
pub(crate) async fn ask_model(
    stream: &mut RunStream,
    waits: &Interrupts,
    ctx: &TurnContext,
    run: &RunSummary,
) -> Result<Next, StepError> {
    let request = model_request(ctx, &stream.state);
    let sink = delta_sink(&stream.shared, run, &stream.state);
    let reply = {
        // A model call may not outlast the turn.
        let ms = ctx.agent.limits.turn_timeout_ms;
        let left = stream.state.time_left(ms, stream.shared.ports.clock.now());
        let provider = ctx.agent.provider.kind();
        let model = requested_model(&ctx.agent.provider);
        let span = model_span(provider, model);
        let call = async {
            let started = std::time::Instant::now();
            let reply = tokio::time::timeout(left, ctx.provider.complete(&request, sink.as_ref()))
                .await
                .unwrap_or_else(|_| {
                    Err(ModelError::new(
                        "turn_timeout",
                        format!("the turn took longer than {ms} ms"),
                    ))
                });
            record_reply(&tracing::Span::current(), provider, model, &reply);
            let outcome = match &reply {
                Ok(_) => "ok",
                Err(e) => {
                    metrics::counter!(
                        "baton_model_call_errors_total",
                        "provider" => provider,
                        "code" => e.code,
                    )
                    .increment(1);
                    "error"
                }
            };
            metrics::histogram!(
                "baton_model_call_duration_seconds",
                "provider" => provider,
                "outcome" => outcome,
            )
            .record(started.elapsed());
            reply
        }
        .instrument(span);
        match waits.interruptible(call).await {
            Interrupted::Done(reply) => reply,
            Interrupted::Cancel => return settle::cancel(stream, run).await,
            // Read again: the next step ends the turn for the message that came in.
            Interrupted::Interrupt | Interrupted::Shutdown => return Ok(Next::Continue),
        }
    };
    let reply = match reply {
        Ok(reply) => reply,
        Err(ModelError {
            code,
            message,
            denied,
        }) => {
            if let Some(rule) = denied {
                audit_refused_model_call(&stream.shared, ctx, run, &rule).await;
            }
            return Err(StepError::Turn(info(code, message)));
        }
    };
    let turn = stream.state.turn;
    let step = stream.state.step + 1;
    let ModelReply {
        content,
        reasoning,
        tool_calls,
        finish_reason,
        usage,
        model,
        complete_run,
    } = reply;
    let done = tool_calls.is_empty();
    let mut events = vec![RunEvent::ModelCompleted(ModelCompleted {
        turn,
        step,
        message_id: MessageId::new(),
        content,
        reasoning,
        tool_calls: unique_ids(tool_calls, step),
        finish_reason: finish_reason.clone(),
        usage,
        model,
    })];
    if !done {
        return stream.append(run, events, None).await;
    }
    events.push(RunEvent::TurnCompleted(TurnCompleted {
        turn,
        finish_reason: Some(finish_reason),
    }));
    if complete_run {
        events.push(RunEvent::RunCompleted(RunCompleted {}));
    }
    stream.append(run, events, Some(Release::Idle)).await
}

fn model_request(ctx: &TurnContext, state: &RunState) -> ModelRequest {
    let mut messages = Vec::with_capacity(state.conversation.len() + 1);
    if !ctx.agent.instructions.trim().is_empty() {
        messages.push(ChatMessage::text(ChatRole::System, &ctx.agent.instructions));
    }
    messages.extend(state.conversation.iter().cloned());
    ModelRequest {
        messages,
        tools: ctx
            .tools
            .iter()
            .map(|t| ToolSpec {
                name: t.name.clone(),
                description: t.description.clone(),
                parameters: t.input_schema.clone(),
            })
            .collect(),
        max_output_tokens: ctx.agent.limits.max_output_tokens,
    }
}

/// Where the model's token deltas go: the run's live subscribers, never the
/// database.
fn delta_sink(shared: &Shared, run: &RunSummary, state: &RunState) -> Box<DeltaSink> {
    let bus = shared.ports.recorder.bus.clone();
    let (tenant, run_id) = (run.tenant, run.id);
    let (turn, step) = (state.turn, state.step + 1);
    Box::new(move |d| {
        bus.publish_delta(
            tenant,
            run_id,
            baton_events::MessageDelta {
                turn,
                step,
                attempt: d.attempt,
                content: d.content,
                reasoning: d.reasoning,
                progress: None,
            },
        );
    })
}

/// Call ids are how results find their calls: a reply with missing or repeated ids
/// gets fresh ones.
fn unique_ids(mut calls: Vec<ToolCallRequest>, step: u32) -> Vec<ToolCallRequest> {
    let mut seen = std::collections::HashSet::new();
    let clash = calls
        .iter()
        .any(|c| c.id.is_empty() || !seen.insert(c.id.clone()));
    if clash {
        for (i, c) in calls.iter_mut().enumerate() {
            c.id = format!("call_{step}_{}", i + 1);
        }
    }
    calls
}

/// Records that the egress policy refused the run's call to its model server.
async fn audit_refused_model_call(
    shared: &Shared,
    ctx: &TurnContext,
    run: &RunSummary,
    rule: &str,
) {
    let url = match &ctx.agent.provider {
        ProviderSpec::Openai(spec) => Some(spec.base_url.as_str()),
        ProviderSpec::Scripted { .. } => None,
    };
    let details = serde_json::json!({"provider": ctx.agent.provider.kind(), "rule": rule});
    shared.audit_refusal(run, url, details).await;
}

/// The model a call asks for: the provider's setting, or `scripted`.
fn requested_model(provider: &ProviderSpec) -> &str {
    match provider {
        ProviderSpec::Openai(spec) => spec.model.as_str(),
        ProviderSpec::Scripted { .. } => "scripted",
    }
}

/// The span of one model call, named and described by OpenTelemetry's generative-AI
/// conventions (`chat <model>`, `gen_ai.*`); [`record_reply`] fills in the answer.
fn model_span(provider: &'static str, model: &str) -> tracing::Span {
    tracing::info_span!(
        "model_call",
        otel.name = format!("chat {model}"),
        otel.kind = "client",
        otel.status_code = tracing::field::Empty,
        gen_ai.operation.name = "chat",
        gen_ai.system = provider,
        gen_ai.request.model = model,
        gen_ai.response.model = tracing::field::Empty,
        gen_ai.response.finish_reasons = tracing::field::Empty,
        gen_ai.usage.input_tokens = tracing::field::Empty,
        gen_ai.usage.output_tokens = tracing::field::Empty,
        error.type = tracing::field::Empty,
    )
}

/// The answer's model, finish reason and token usage on the model call's span, or the
/// error's code; and the call and its tokens counted by provider and (bounded) model.
fn record_reply(
    span: &tracing::Span,
    provider: &'static str,
    model: &str,
    reply: &Result<ModelReply, ModelError>,
) {
    let model = baton_core::labels::bounded("model", model);
    let outcome = if reply.is_ok() { "ok" } else { "error" };
    metrics::counter!(
        "baton_model_calls_total",
        "provider" => provider,
        "model" => model.clone(),
        "outcome" => outcome,
    )
    .increment(1);
    match reply {
        Ok(reply) => {
            if let Some(answered) = &reply.model {
                span.record("gen_ai.response.model", answered.as_str());
            }
            span.record(
                "gen_ai.response.finish_reasons",
                reply.finish_reason.as_str(),
            );
            if let Some(usage) = &reply.usage {
                span.record("gen_ai.usage.input_tokens", usage.prompt_tokens);
                span.record("gen_ai.usage.output_tokens", usage.completion_tokens);
                for (direction, tokens) in [
                    ("input", usage.prompt_tokens),
                    ("output", usage.completion_tokens),
                ] {
                    metrics::counter!(
                        "baton_model_tokens_total",
                        "provider" => provider,
                        "model" => model.clone(),
                        "direction" => direction,
                    )
                    .increment(tokens);
                }
            }
        }
        Err(e) => {
            span.record("otel.status_code", "ERROR");
            span.record("error.type", e.code);
        }
    }
}
