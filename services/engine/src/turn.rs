//! The model step of a turn: the request (the agent's instructions, the conversation,
//! the tools on offer), the call itself — bounded by the turn's time, cut short by a
//! cancel or the shutdown, its deltas sent to live subscribers — and the append of the
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
        let span = tracing::info_span!("model_call", provider, otel.name = "model call");
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
            Interrupted::Shutdown => return Ok(Next::Continue),
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
