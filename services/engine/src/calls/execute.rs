//! Carrying out a step's tool calls on the run's stream, as the decision chose them:
//! ask for an approval, record intents and make the calls (results recorded after,
//! write-ahead), hand `client` calls to the API client, record an error result, and
//! apply the recovery rule or a member's retry to an interrupted call.

use super::promote;
use super::recovery::{self, Recovery};
use crate::agent::TurnContext;
use crate::delegate;
use crate::interrupt::{Interrupted, Interrupts};
use crate::outcome::{Next, StepError};
use crate::settle;
use crate::shared::Shared;
use crate::state::Call;
use crate::stream::RunStream;
use crate::tools::{self, Called, Planned};
use crate::workspace;
use baton_core::model::{RunSummary, Tool, ToolKindSpec};
use baton_egress::TenantEgress;
use baton_events::{
    ApprovalId, ApprovalRequested, ErrorInfo, ReceiptId, RunEvent, ToolCallRequest, ToolIntent,
    ToolOutcome, ToolResult, ToolUncertain,
};
use futures::future::BoxFuture;

/// One step's calls of the run, carried out on its stream.
pub(crate) struct Calls<'a> {
    pub(crate) stream: &'a mut RunStream,
    pub(crate) waits: &'a Interrupts,
    /// The run the step was decided on.
    pub(crate) run: &'a RunSummary,
    /// The client of the calls, under the tenant's egress allowlist.
    pub(crate) egress: &'a TenantEgress,
}

impl<'a> Calls<'a> {
    /// Asks a member to approve `call` of `tool` before it runs.
    pub(crate) async fn ask_approval(
        &mut self,
        call: &Call,
        tool: &Tool,
    ) -> Result<Next, StepError> {
        let receipt = ReceiptId::new();
        let asked = RunEvent::ApprovalRequested(ApprovalRequested {
            approval_id: ApprovalId::new(),
            receipt_id: receipt,
            turn: self.stream.state.turn,
            call_id: call.request.id.clone(),
            tool_id: tool.id,
            tool: tool.name.clone(),
            effect: tool.effect,
            arguments: arguments(&call.request),
        });
        self.stream.append(self.run, vec![asked], None).await
    }

    /// Records the intents of `calls` and, for `http` tools, makes the calls and
    /// records their results; `client` calls wait for the API client.
    pub(crate) async fn run(&mut self, calls: Vec<(Call, Tool)>) -> Result<Next, StepError> {
        let mut planned = Vec::with_capacity(calls.len());
        for (call, tool) in calls {
            let receipt = call.receipt.unwrap_or_default();
            let intent = ToolIntent {
                receipt_id: receipt,
                turn: self.stream.state.turn,
                call_id: call.request.id.clone(),
                tool_id: tool.id,
                tool: tool.name.clone(),
                kind: tool.kind(),
                effect: tool.effect,
                idempotent: tool.idempotent,
                arguments: arguments(&call.request),
                idempotency_key: receipt.to_string(),
            };
            planned.push(self.plan(intent, tool).await?);
        }
        if planned
            .iter()
            .any(|p| matches!(p.tool.kind, ToolKindSpec::Client))
        {
            let intents = planned
                .into_iter()
                .map(|p| RunEvent::ToolIntent(p.intent))
                .collect();
            return self.stream.append(self.run, intents, None).await;
        }
        self.execute(planned).await
    }

    /// Records an error result for a call that did not run; the model sees it next.
    pub(crate) async fn reject(
        &mut self,
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
            attempts: None,
            delegated_run: None,
        });
        self.stream.append(self.run, vec![result], None).await
    }

    /// Records a result this driver made but could not write before.
    pub(crate) async fn save(&mut self, result: ToolResult) -> Result<Next, StepError> {
        self.stream
            .append(self.run, vec![RunEvent::ToolResult(result)], None)
            .await
    }

    /// An intent without a result that this driver is not making: the recovery rule.
    pub(crate) async fn recover(
        &mut self,
        ctx: &TurnContext,
        call: &Call,
        intent: &ToolIntent,
    ) -> Result<Next, StepError> {
        let tool = permitted(&self.stream.shared, ctx, intent).await?;
        match recovery::recover(intent, tool) {
            Recovery::Rerun(tool) => {
                tracing::info!(receipt = %intent.receipt_id, tool = %tool.name, "re-running an interrupted call that is safe to repeat");
                metrics::counter!("baton_tool_calls_recovered_total", "how" => "rerun")
                    .increment(1);
                let p = self.plan(intent.clone(), tool).await?;
                self.rerun(p).await
            }
            Recovery::Reject(error) => self.reject(call, error).await,
            Recovery::HoldUncertain => self.hold_uncertain(intent).await,
        }
    }

    /// A member asked to call an uncertain call again: records its intent anew and
    /// makes the call, once the agent is checked to still have the tool.
    pub(crate) async fn retry(
        &mut self,
        ctx: &TurnContext,
        call: &Call,
        intent: &ToolIntent,
    ) -> Result<Next, StepError> {
        let tool = permitted(&self.stream.shared, ctx, intent).await?;
        let (intent, tool) = match recovery::retry(intent, tool, self.stream.state.turn) {
            Ok(retried) => retried,
            Err(error) => return self.reject(call, error).await,
        };
        let p = self.plan(intent, tool).await?;
        self.execute(vec![p]).await
    }

    /// The call `intent` records, its secret headers revealed.
    async fn plan(&self, intent: ToolIntent, tool: Tool) -> Result<Planned, StepError> {
        tools::plan(&self.stream.shared.ports, self.run.tenant, intent, tool).await
    }

    /// Commits the intents, makes the calls (concurrently when several), and commits
    /// their results. A cancel while they run aborts them: reads end `cancelled`,
    /// mutations `uncertain`.
    async fn execute(&mut self, planned: Vec<Planned>) -> Result<Next, StepError> {
        let intents = planned
            .iter()
            .map(|p| RunEvent::ToolIntent(p.intent.clone()))
            .collect();
        let Some(after_intents) = self.stream.commit(self.run, intents, None).await? else {
            return Ok(Next::Continue);
        };
        let calls = planned
            .iter()
            .map(|p| self.call(p, p.tool.safe_to_repeat()));
        let all = futures::future::join_all(calls);
        let called: Vec<Called> = if may_hand_off(&planned) {
            match self.waits.interruptible_by_cancel_or_shutdown(all).await {
                Interrupted::Done(called) => called,
                Interrupted::Cancel => return settle::cancel(self.stream, &after_intents).await,
                // Shutting down: the run is handed off, and its next driver runs the
                // calls again (a delegation finds its child).
                Interrupted::Interrupt | Interrupted::Shutdown => return Ok(Next::Continue),
            }
        } else {
            match self.waits.interruptible_by_cancel(all).await {
                Some(called) => called,
                None => return settle::cancel(self.stream, &after_intents).await,
            }
        };
        self.record(&after_intents, &planned, called).await
    }

    /// Makes planned call `p` (`retry`: it is safe to repeat): a `delegate` tool starts
    /// its child run and waits for it; an `http` tool is called through the egress
    /// client.
    fn call<'p>(&self, p: &'p Planned, retry: bool) -> BoxFuture<'p, Called>
    where
        'a: 'p,
    {
        match p.tool.kind {
            ToolKindSpec::Delegate { .. } => {
                let shared = self.stream.shared.clone();
                let (tenant, run, depth) = (self.run.tenant, self.run.id, self.stream.state.depth);
                Box::pin(async move { delegate::call(&shared, tenant, run, depth, p).await })
            }
            ToolKindSpec::Workspace { op, .. } => {
                let shared = self.stream.shared.clone();
                let turn = workspace::Turn {
                    tenant: self.run.tenant,
                    run: self.run.id,
                    actor: self.stream.state.turn_actor.clone(),
                    egress: self.egress.clone(),
                };
                Box::pin(async move { workspace::call(&shared, &turn, p, op).await })
            }
            _ => Box::pin(tools::call(self.egress, p, retry, self.progress_sink(p))),
        }
    }

    /// Publishes planned call `p`'s progress to the run's live subscribers (never
    /// stored).
    fn progress_sink(&self, p: &Planned) -> tools::ProgressSink {
        let bus = self.stream.shared.ports.recorder.bus.clone();
        let (tenant, run) = (self.run.tenant, self.run.id);
        let (turn, step) = (self.stream.state.turn, self.stream.state.step);
        let (receipt_id, tool) = (p.intent.receipt_id, p.tool.name.clone());
        Box::new(move |progress: baton_egress::mcp::Progress| {
            bus.publish_delta(
                tenant,
                run,
                baton_events::MessageDelta {
                    turn,
                    step,
                    attempt: 0,
                    content: String::new(),
                    reasoning: false,
                    progress: Some(baton_events::ToolProgress {
                        receipt_id,
                        tool: tool.clone(),
                        progress: progress.progress,
                        total: progress.total,
                        message: progress.message,
                    }),
                },
            );
        })
    }

    /// Records what calls came to on the stream (read at `after`): results, and the
    /// uncertainty of a mutation sent without an answer. A result this driver could not
    /// write is kept to write later; a refusal by the egress policy goes to the tenant's
    /// audit stream too.
    async fn record(
        &mut self,
        after: &RunSummary,
        planned: &[Planned],
        mut called: Vec<Called>,
    ) -> Result<Next, StepError> {
        // A workspace write or command runs alone (`batch.rs`): its files land with it.
        if let [Called::Promote(..)] = called.as_slice()
            && let Some(Called::Promote(result, promotion)) = called.pop()
        {
            return promote::land(self.stream, after, result, promotion).await;
        }
        for c in &called {
            if let Called::Result(r) = c {
                self.stream.unsaved.insert(r.receipt_id, r.clone());
            }
            let call = planned.iter().find(|p| p.intent.receipt_id == c.receipt());
            if let (Some(refusal), Some(p)) = (c.denied(), call) {
                audit_refused_tool_call(&self.stream.shared, after, p, refusal).await;
            }
        }
        let ids: Vec<ReceiptId> = called.iter().map(Called::receipt).collect();
        let events = called.into_iter().map(Called::into_event).collect();
        if self.stream.append_wrote(after, events, None).await? {
            self.stream.unsaved.retain(|id, _| !ids.contains(id));
        }
        Ok(Next::Continue)
    }

    /// Runs again a call whose intent is already recorded, and records its result.
    async fn rerun(&mut self, p: Planned) -> Result<Next, StepError> {
        let call = self.call(&p, true);
        let called = if may_hand_off(std::slice::from_ref(&p)) {
            match self.waits.interruptible_by_cancel_or_shutdown(call).await {
                Interrupted::Done(called) => called,
                Interrupted::Cancel => return settle::cancel(self.stream, self.run).await,
                Interrupted::Interrupt | Interrupted::Shutdown => return Ok(Next::Continue),
            }
        } else {
            let Some(called) = self.waits.interruptible_by_cancel(call).await else {
                return settle::cancel(self.stream, self.run).await;
            };
            called
        };
        let run = self.run.clone();
        self.record(&run, std::slice::from_ref(&p), vec![called])
            .await
    }

    async fn hold_uncertain(&mut self, intent: &ToolIntent) -> Result<Next, StepError> {
        tracing::warn!(receipt = %intent.receipt_id, tool = %intent.tool, "an interrupted mutation waits for a member");
        metrics::counter!("baton_tool_calls_recovered_total", "how" => "uncertain").increment(1);
        let held = RunEvent::ToolUncertain(ToolUncertain {
            receipt_id: intent.receipt_id,
            reason: "the call was interrupted before its result was recorded; it may or may not \
                     have taken effect"
                .into(),
        });
        self.stream.append(self.run, vec![held], None).await
    }
}

/// Whether a replica shutting down may stop waiting on `planned` and hand the run off:
/// they include a delegation (which may wait on its child for minutes) and are all safe
/// to run again.
fn may_hand_off(planned: &[Planned]) -> bool {
    planned
        .iter()
        .any(|p| matches!(p.tool.kind, ToolKindSpec::Delegate { .. }))
        && planned.iter().all(|p| p.tool.safe_to_repeat())
}

/// Records that the egress policy refused a tool call of the run.
async fn audit_refused_tool_call(shared: &Shared, run: &RunSummary, p: &Planned, refusal: &str) {
    let url = match &p.tool.kind {
        ToolKindSpec::Http { url, .. } => Some(url.as_str()),
        ToolKindSpec::Mcp { .. } => p.server_url(),
        ToolKindSpec::Client | ToolKindSpec::Delegate { .. } | ToolKindSpec::Workspace { .. } => {
            None
        }
    };
    let details = serde_json::json!({
        "tool": p.tool.name,
        "receipt": p.intent.receipt_id,
        "rule": refusal.trim_start_matches("egress denied: "),
    });
    shared.audit_refusal(run, url, details).await;
}

/// The tool of an intent, if the tenant still has it and the run's agent may still
/// call it (re-checked before anything runs again).
async fn permitted(
    shared: &Shared,
    ctx: &TurnContext,
    intent: &ToolIntent,
) -> Result<Option<Tool>, StepError> {
    if !ctx.agent.tools.contains(&intent.tool_id) {
        return Ok(None);
    }
    // The version the turn loaded: the run's own, unless it is gone since.
    let Some(loaded) = ctx.tools.iter().find(|t| t.id == intent.tool_id) else {
        return Ok(None);
    };
    Ok(shared
        .ports
        .tools
        .get_tool_version(ctx.agent.tenant, intent.tool_id, loaded.version)
        .await?)
}

/// The arguments as JSON (they were checked to parse before anything ran; text that
/// does not parse is kept as a string).
fn arguments(call: &ToolCallRequest) -> serde_json::Value {
    serde_json::from_str(&call.arguments)
        .unwrap_or_else(|_| serde_json::Value::String(call.arguments.clone()))
}
