//! One turn, one step at a time: ask the model, then carry out the tool calls of its
//! reply, until the model answers without tools (the turn completes) or a limit ends
//! it. Every step is a fenced append decided on the state folded from the run's events,
//! so a step cut short by a crash or a lost lease is picked up by whichever replica
//! drives the run next.
//!
//! Receipts are write-ahead: `tool.intent` is committed before a call is made and
//! `tool.result` after. An intent found without a result when the driver did not make
//! that call itself (it was left by a stopped replica, or this driver's result append
//! failed ambiguously) goes through [`Driver::recover`]: reads and idempotent tools run
//! again, mutations are held as `tool.uncertain` for a member. The engine never runs a
//! non-idempotent mutation again by itself.

use crate::agent::TurnContext;
use crate::calls::recovery::{self, Recovery};
use crate::driver::{Driver, Interrupted};
use crate::outcome::{Next, StepError, info};
use crate::provider::{
    ChatMessage, ChatRole, DeltaSink, ModelError, ModelReply, ModelRequest, ToolSpec,
};
use crate::state::Call;
use crate::tools::{self, Planned};
use baton_core::model::{RunSummary, Tool, ToolKindSpec};
use baton_core::ports::Release;
use baton_events::{
    ApprovalId, ApprovalRequested, ErrorInfo, MessageId, ModelCompleted, ReceiptId, RunCompleted,
    RunEvent, ToolCallRequest, ToolIntent, ToolOutcome, ToolResult, ToolUncertain, TurnCompleted,
    TurnFailed,
};
use tracing::Instrument;

impl Driver {
    /// Asks the model and records its answer: with tool calls the turn goes on, without
    /// them it completes in the same append.
    pub(crate) async fn ask_model(
        &mut self,
        run: &RunSummary,
        ctx: &TurnContext,
    ) -> Result<Next, StepError> {
        let request = self.model_request(ctx);
        let sink = self.delta_sink(run);
        let reply = {
            // A model call may not outlast the turn.
            let ms = ctx.agent.limits.turn_timeout_ms;
            let left = self.state.time_left(ms, self.shared.ports.clock.now());
            let provider = ctx.agent.provider.kind();
            let span = tracing::info_span!("model_call", provider, otel.name = "model call");
            let call = async {
                let started = std::time::Instant::now();
                let reply =
                    tokio::time::timeout(left, ctx.provider.complete(&request, sink.as_ref()))
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
            match self.interruptible(call).await {
                Interrupted::Done(reply) => reply,
                Interrupted::Cancel => return self.cancel(run).await,
                Interrupted::Shutdown => return Ok(Next::Continue),
            }
        };
        let reply = match reply {
            Ok(reply) => reply,
            Err(ModelError { code, message }) => {
                return Err(StepError::Turn(info(code, message)));
            }
        };
        let turn = self.state.turn;
        let step = self.state.step + 1;
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
            return self.append(run, events, None).await;
        }
        events.push(RunEvent::TurnCompleted(TurnCompleted {
            turn,
            finish_reason: Some(finish_reason),
        }));
        if complete_run {
            events.push(RunEvent::RunCompleted(RunCompleted {}));
        }
        self.append(run, events, Some(Release::Idle)).await
    }

    /// Asks a member to approve `call` of `tool` before it runs.
    pub(crate) async fn ask_approval(
        &mut self,
        run: &RunSummary,
        call: &Call,
        tool: &Tool,
    ) -> Result<Next, StepError> {
        let receipt = ReceiptId::new();
        let asked = RunEvent::ApprovalRequested(ApprovalRequested {
            approval_id: ApprovalId::new(),
            receipt_id: receipt,
            turn: self.state.turn,
            call_id: call.request.id.clone(),
            tool_id: tool.id,
            tool: tool.name.clone(),
            effect: tool.effect,
            arguments: arguments(&call.request),
        });
        self.append(run, vec![asked], None).await
    }

    /// A member asked to call an uncertain call again: records its intent anew and
    /// makes the call, once the agent is checked to still have the tool.
    pub(crate) async fn retry(
        &mut self,
        run: &RunSummary,
        ctx: &TurnContext,
        call: &Call,
        intent: &ToolIntent,
    ) -> Result<Next, StepError> {
        let tool = self.permitted(ctx, intent).await?;
        let (intent, tool) = match recovery::retry(intent, tool, self.state.turn) {
            Ok(retried) => retried,
            Err(error) => return self.reject(run, call, error).await,
        };
        let p = tools::plan(&*self.shared.ports.secrets, run.tenant, intent, tool).await?;
        self.execute(run, vec![p]).await
    }

    /// Records the intents of `calls` and, for `http` tools, makes the calls and
    /// records their results; `client` calls wait for the API client.
    pub(crate) async fn run_calls(
        &mut self,
        run: &RunSummary,
        calls: Vec<(Call, Tool)>,
    ) -> Result<Next, StepError> {
        let mut planned = Vec::with_capacity(calls.len());
        for (call, tool) in calls {
            let receipt = call.receipt.unwrap_or_default();
            let intent = ToolIntent {
                receipt_id: receipt,
                turn: self.state.turn,
                call_id: call.request.id.clone(),
                tool_id: tool.id,
                tool: tool.name.clone(),
                kind: tool.kind(),
                effect: tool.effect,
                idempotent: tool.idempotent,
                arguments: arguments(&call.request),
                idempotency_key: receipt.to_string(),
            };
            planned.push(tools::plan(&*self.shared.ports.secrets, run.tenant, intent, tool).await?);
        }
        if planned
            .iter()
            .any(|p| matches!(p.tool.kind, ToolKindSpec::Client))
        {
            let intents = planned
                .into_iter()
                .map(|p| RunEvent::ToolIntent(p.intent))
                .collect();
            return self.append(run, intents, None).await;
        }
        self.execute(run, planned).await
    }

    /// Commits the intents, makes the calls (concurrently when several), and commits
    /// their results. A cancel while they run aborts them: reads end `cancelled`,
    /// mutations `uncertain`.
    async fn execute(
        &mut self,
        run: &RunSummary,
        planned: Vec<Planned>,
    ) -> Result<Next, StepError> {
        let intents = planned
            .iter()
            .map(|p| RunEvent::ToolIntent(p.intent.clone()))
            .collect();
        let Some(after_intents) = self.commit(run.version, intents, None).await? else {
            return Ok(Next::Continue);
        };
        let http = self.shared.http.clone();
        let calls = planned
            .iter()
            .map(|p| tools::call(&http, p, p.tool.safe_to_repeat()));
        let all = futures::future::join_all(calls);
        let results: Vec<ToolResult> = match self.interruptible_by_cancel(all).await {
            Some(results) => results,
            None => return self.cancel(&after_intents).await,
        };
        for r in &results {
            self.unsaved.insert(r.receipt_id, r.clone());
        }
        let ids: Vec<ReceiptId> = results.iter().map(|r| r.receipt_id).collect();
        let events = results.into_iter().map(RunEvent::ToolResult).collect();
        if self.append_wrote(&after_intents, events, None).await? {
            self.unsaved.retain(|id, _| !ids.contains(id));
        }
        Ok(Next::Continue)
    }

    /// An intent without a result that this driver is not making: the recovery rule.
    pub(crate) async fn recover(
        &mut self,
        run: &RunSummary,
        ctx: &TurnContext,
        call: &Call,
        intent: &ToolIntent,
    ) -> Result<Next, StepError> {
        let tool = self.permitted(ctx, intent).await?;
        match recovery::recover(intent, tool) {
            Recovery::Rerun(tool) => {
                tracing::info!(receipt = %intent.receipt_id, tool = %tool.name, "re-running an interrupted call that is safe to repeat");
                metrics::counter!("baton_tool_calls_recovered_total", "how" => "rerun")
                    .increment(1);
                let p = tools::plan(
                    &*self.shared.ports.secrets,
                    run.tenant,
                    intent.clone(),
                    tool,
                )
                .await?;
                self.rerun(run, p).await
            }
            Recovery::Reject(error) => self.reject(run, call, error).await,
            Recovery::HoldUncertain => self.hold_uncertain(run, intent).await,
        }
    }

    /// Runs again a call whose intent is already recorded, and records its result.
    async fn rerun(&mut self, run: &RunSummary, p: Planned) -> Result<Next, StepError> {
        let call = tools::call(&self.shared.http, &p, true);
        let Some(result) = self.interruptible_by_cancel(call).await else {
            return self.cancel(run).await;
        };
        let id = result.receipt_id;
        self.unsaved.insert(id, result.clone());
        if self
            .append_wrote(run, vec![RunEvent::ToolResult(result)], None)
            .await?
        {
            self.unsaved.remove(&id);
        }
        Ok(Next::Continue)
    }

    async fn hold_uncertain(
        &mut self,
        run: &RunSummary,
        intent: &ToolIntent,
    ) -> Result<Next, StepError> {
        tracing::warn!(receipt = %intent.receipt_id, tool = %intent.tool, "an interrupted mutation waits for a member");
        metrics::counter!("baton_tool_calls_recovered_total", "how" => "uncertain").increment(1);
        let held = RunEvent::ToolUncertain(ToolUncertain {
            receipt_id: intent.receipt_id,
            reason: "the call was interrupted before its result was recorded; it may or may not \
                     have taken effect"
                .into(),
        });
        self.append(run, vec![held], None).await
    }

    /// The tool of an intent, if the tenant still has it and the run's agent may still
    /// call it (re-checked before anything runs again).
    async fn permitted(
        &self,
        ctx: &TurnContext,
        intent: &ToolIntent,
    ) -> Result<Option<Tool>, StepError> {
        if !ctx.agent.tools.contains(&intent.tool_id) {
            return Ok(None);
        }
        Ok(self
            .shared
            .ports
            .tools
            .get_tool(ctx.agent.tenant, intent.tool_id)
            .await?)
    }

    /// Records an error result for a call that did not run; the model sees it next.
    pub(crate) async fn reject(
        &mut self,
        run: &RunSummary,
        call: &Call,
        error: ErrorInfo,
    ) -> Result<Next, StepError> {
        let result = RunEvent::ToolResult(ToolResult {
            receipt_id: call.receipt.unwrap_or_default(),
            call_id: call.request.id.clone(),
            tool: call.request.name.clone(),
            outcome: ToolOutcome::Error,
            output: format!("Error ({}): {}", error.code, error.message),
            error: Some(error),
            duration_ms: 0,
            truncated: false,
            from_client: false,
        });
        self.append(run, vec![result], None).await
    }

    pub(crate) async fn fail_turn(
        &mut self,
        run: &RunSummary,
        error: ErrorInfo,
    ) -> Result<Next, StepError> {
        tracing::warn!(code = %error.code, "the turn failed");
        self.refresh(run).await?;
        let mut events = self.settle_calls(&format!("the turn failed ({})", error.code));
        events.push(RunEvent::TurnFailed(TurnFailed {
            turn: run.turn_count,
            error,
        }));
        self.append(run, events, Some(Release::Idle)).await
    }

    fn model_request(&self, ctx: &TurnContext) -> ModelRequest {
        let mut messages = Vec::with_capacity(self.state.conversation.len() + 1);
        if !ctx.agent.instructions.trim().is_empty() {
            messages.push(ChatMessage::text(ChatRole::System, &ctx.agent.instructions));
        }
        messages.extend(self.state.conversation.iter().cloned());
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
    fn delta_sink(&self, run: &RunSummary) -> Box<DeltaSink> {
        let bus = self.shared.ports.recorder.bus.clone();
        let (tenant, run_id) = (run.tenant, run.id);
        let (turn, step) = (self.state.turn, self.state.step + 1);
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
}

/// The arguments as JSON (they were checked to parse before anything ran; text that
/// does not parse is kept as a string).
fn arguments(call: &ToolCallRequest) -> serde_json::Value {
    serde_json::from_str(&call.arguments)
        .unwrap_or_else(|_| serde_json::Value::String(call.arguments.clone()))
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
