//! given(events) / when(decided) / then(step): every branch of [`decide`].

use super::*;
use crate::given::{
    agent, approval_asked, approval_decided, cancel_requested, client, idempotent, intent,
    interrupting, model_asks, model_asks_raw, mutation, needing_approval, read, resolved,
    result_of, state, summary, t0, turn_requested, turn_started, uncertain,
};
use baton_core::model::AgentLimits;
use baton_core::ports::Fence;
use baton_events::{LeaseReason, Resolution, RunEvent, TurnCompleted};

/// What the driver knows, built from the run's events; by default it holds the lease
/// (announced), has folded the events and loaded an agent without tools.
struct Given {
    events: Vec<RunEvent>,
    /// Events the state has not folded yet (a client command got in after the fold).
    unfolded_tail: usize,
    lease: Option<Lease>,
    folded: bool,
    agent: Option<TurnContext>,
    unsaved: HashMap<ReceiptId, ToolResult>,
    now: DateTime<Utc>,
}

fn given(events: impl IntoIterator<Item = RunEvent>) -> Given {
    Given {
        events: events.into_iter().collect(),
        unfolded_tail: 0,
        lease: Some(Lease {
            tenant: baton_core::TenantId::new(),
            fence: Fence {
                owner: "test".into(),
                epoch: 1,
            },
            announced: true,
            reason: LeaseReason::New,
        }),
        folded: true,
        agent: Some(agent(&[], AgentLimits::default())),
        unsaved: HashMap::new(),
        now: t0() + chrono::Duration::seconds(1),
    }
}

impl Given {
    fn and(mut self, event: RunEvent) -> Self {
        self.events.push(event);
        self
    }

    /// Call `call_id` of `tool` ran: its intent and its result are recorded.
    fn ran(self, call_id: &str, tool: &Tool) -> Self {
        let (i, recorded) = intent_event(call_id, tool);
        self.and(recorded).and(RunEvent::ToolResult(result_of(&i)))
    }

    fn without_lease(mut self) -> Self {
        self.lease = None;
        self
    }

    fn lease_not_yet_announced(mut self) -> Self {
        if let Some(l) = self.lease.as_mut() {
            l.announced = false;
        }
        self
    }

    fn not_folded(mut self) -> Self {
        self.folded = false;
        self
    }

    fn state_missing_the_last(mut self, n: usize) -> Self {
        self.unfolded_tail = n;
        self
    }

    fn without_agent(mut self) -> Self {
        self.agent = None;
        self
    }

    fn tools(self, tools: &[Tool]) -> Self {
        self.tools_and_limits(tools, AgentLimits::default())
    }

    fn tools_and_limits(mut self, tools: &[Tool], limits: AgentLimits) -> Self {
        self.agent = Some(agent(tools, limits));
        self
    }

    fn holding(mut self, result: ToolResult) -> Self {
        self.unsaved.insert(result.receipt_id, result);
        self
    }

    fn at(mut self, now: DateTime<Utc>) -> Self {
        self.now = now;
        self
    }

    fn when_decided(&self) -> Step {
        self.decided_on(summary(&self.events))
    }

    /// Decided on a run that reads `running` although the turn waits for an action:
    /// the projection and the state never disagree so, but the decision stays safe.
    fn when_decided_as_running(&self) -> Step {
        let mut run = summary(&self.events);
        assert_eq!(run.status, RunStatus::RequiresAction);
        run.status = RunStatus::Running;
        self.decided_on(run)
    }

    fn decided_on(&self, run: RunSummary) -> Step {
        let state = state(&self.events[..self.events.len() - self.unfolded_tail]);
        decide(&Facts {
            run: &run,
            lease: self.lease.as_ref(),
            state: &state,
            folded: self.folded,
            agent: self.agent.as_ref(),
            unsaved: &self.unsaved,
            now: self.now,
        })
    }
}

fn limits(max_steps: u32, max_tool_calls: u32) -> AgentLimits {
    AgentLimits {
        max_steps,
        max_tool_calls,
        ..AgentLimits::default()
    }
}

/// The step of the running turn.
fn in_turn(step: Step) -> TurnStep {
    match step {
        Step::Turn(step) => *step,
        other => panic!("not a turn step: {other:?}"),
    }
}

/// The call ids of a `RunCalls` step.
fn runs_calls(step: Step) -> Vec<String> {
    match in_turn(step) {
        TurnStep::RunCalls(calls) => calls.into_iter().map(|(c, _)| c.request.id).collect(),
        other => panic!("not a RunCalls step: {other:?}"),
    }
}

/// The step rejects call `call_id` with an error `code`.
fn assert_rejects(step: Step, call_id: &str, code: &str) {
    match in_turn(step) {
        TurnStep::Reject { call, error } => {
            assert_eq!(
                (call.request.id.as_str(), error.code.as_str()),
                (call_id, code)
            );
        }
        other => panic!("not a Reject step: {other:?}"),
    }
}

fn fails_with(step: Step) -> String {
    match in_turn(step) {
        TurnStep::Fail(error) => error.code,
        other => panic!("not a Fail step: {other:?}"),
    }
}

/// A started turn whose first model step asked for `calls`.
fn asking(calls: &[(&str, &Tool)]) -> Given {
    given(turn_started()).and(model_asks(1, calls))
}

/// A started turn whose model asked for call `c1` of `tool` (the agent's only tool),
/// now awaiting a member's approval; and the call's receipt.
fn awaiting_approval(tool: Tool) -> (ReceiptId, Given) {
    let (receipt, asked) = approval_asked("c1", &tool);
    let given = asking(&[("c1", &tool)]).and(asked).tools(&[tool]);
    (receipt, given)
}

/// A started turn whose model asked for call `c1` of `tool` (the agent's only tool),
/// whose intent is recorded without a result; and the intent.
fn interrupted(tool: Tool) -> (ToolIntent, Given) {
    let (i, recorded) = intent_event("c1", &tool);
    let given = asking(&[("c1", &tool)]).and(recorded).tools(&[tool]);
    (i, given)
}

fn intent_event(call_id: &str, tool: &Tool) -> (ToolIntent, RunEvent) {
    let i = intent(call_id, tool);
    (i.clone(), RunEvent::ToolIntent(i))
}

// The run and its lease.

#[test]
fn an_idle_run_without_a_lease_has_nothing_to_do() {
    let step = given(turn_requested())
        .and(RunEvent::TurnStarted(baton_events::TurnStarted { turn: 1 }))
        .and(RunEvent::TurnCompleted(TurnCompleted {
            turn: 1,
            finish_reason: None,
        }))
        .without_lease()
        .when_decided();
    assert_eq!(step, Step::Idle);
}

#[test]
fn a_run_without_work_gives_its_lease_up() {
    let step = given(turn_started())
        .and(RunEvent::TurnCompleted(TurnCompleted {
            turn: 1,
            finish_reason: None,
        }))
        .when_decided();
    assert_eq!(step, Step::Release);
}

#[test]
fn a_run_waiting_for_an_approval_gives_its_lease_up() {
    let tool = needing_approval(mutation("pay"));
    let (_, asked) = approval_asked("c1", &tool);
    let step = asking(&[("c1", &tool)]).and(asked).when_decided();
    assert_eq!(step, Step::Release);
}

#[test]
fn an_ended_run_with_a_cancel_pending_has_no_work() {
    let step = given(turn_started())
        .and(cancel_requested())
        .and(RunEvent::RunCancelled(baton_events::RunCancelled {
            reason: None,
        }))
        .when_decided();
    assert_eq!(step, Step::Release);
}

#[test]
fn a_run_with_a_turn_to_take_and_no_lease_claims_it_first() {
    let step = given(turn_requested()).without_lease().when_decided();
    assert_eq!(step, Step::Claim);
}

#[test]
fn a_cancel_pending_on_a_run_waiting_for_an_action_is_work() {
    let (_, given) = awaiting_approval(needing_approval(mutation("pay")));
    let step = given.and(cancel_requested()).without_lease().when_decided();
    assert_eq!(step, Step::Claim);
}

#[test]
fn the_state_is_folded_before_anything_is_decided_on_it() {
    let step = given(turn_started()).not_folded().when_decided();
    assert_eq!(step, Step::Fold);
}

#[test]
fn a_pending_cancel_comes_before_the_turn() {
    let step = given(turn_started()).and(cancel_requested()).when_decided();
    assert_eq!(step, Step::Cancel);
}

#[test]
fn a_pending_cancel_ends_a_run_waiting_for_an_action() {
    let (_, given) = awaiting_approval(needing_approval(mutation("pay")));
    let step = given.and(cancel_requested()).when_decided();
    assert_eq!(step, Step::Cancel);
}

#[test]
fn a_pending_interrupt_ends_the_turn_and_a_cancel_comes_before_it() {
    let step = given(turn_started())
        .and(interrupting("stop", false))
        .when_decided();
    assert_eq!(step, Step::Interrupt);
    let step = given(turn_started())
        .and(interrupting("stop", true))
        .and(cancel_requested())
        .when_decided();
    assert_eq!(step, Step::Cancel);
}

#[test]
fn a_pending_interrupt_ends_a_turn_waiting_for_an_action() {
    let (_, given) = awaiting_approval(needing_approval(mutation("pay")));
    let step = given.and(interrupting("never mind", false)).when_decided();
    assert_eq!(step, Step::Interrupt);
}

#[test]
fn a_queued_turn_is_started() {
    let step = given(turn_requested()).when_decided();
    assert_eq!(step, Step::StartTurn);
}

#[test]
fn a_queued_turn_is_started_under_a_lease_not_yet_announced() {
    let step = given(turn_requested())
        .lease_not_yet_announced()
        .when_decided();
    assert_eq!(step, Step::StartTurn);
}

#[test]
fn a_turn_taken_over_announces_the_new_lease_first() {
    let step = given(turn_started())
        .lease_not_yet_announced()
        .when_decided();
    assert_eq!(step, Step::Announce);
}

#[test]
fn a_state_behind_the_run_is_read_again() {
    let tool = read("look");
    let step = asking(&[("c1", &tool)])
        .state_missing_the_last(1)
        .tools(&[tool])
        .when_decided();
    assert_eq!(step, Step::Reread);
}

#[test]
fn the_agent_is_loaded_before_the_turn_goes_on() {
    let step = given(turn_started()).without_agent().when_decided();
    assert_eq!(step, Step::LoadAgent);
}

#[test]
fn a_context_loaded_for_an_earlier_turn_is_loaded_again() {
    // Tools, the provider and the tenant's allowlist may have changed since turn 1.
    let message_id = baton_events::MessageId::new();
    let step = given(turn_started())
        .and(RunEvent::TurnCompleted(TurnCompleted {
            turn: 1,
            finish_reason: None,
        }))
        .and(RunEvent::MessageAppended(baton_events::MessageAppended {
            message_id,
            role: baton_events::MessageRole::User,
            content: "again".into(),
            queued: false,
        }))
        .and(RunEvent::TurnRequested(baton_events::TurnRequested {
            turn: 2,
            message_id,
        }))
        .and(RunEvent::TurnStarted(baton_events::TurnStarted { turn: 2 }))
        .when_decided();
    assert_eq!(step, Step::LoadAgent);
}

// The turn.

#[test]
fn a_started_turn_asks_the_model() {
    let step = given(turn_started()).when_decided();
    assert_eq!(in_turn(step), TurnStep::AskModel);
}

#[test]
fn a_turn_past_its_time_fails_with_turn_timeout() {
    let ms = AgentLimits::default().turn_timeout_ms;
    let late = t0() + chrono::Duration::milliseconds(ms as i64);
    let step = given(turn_started()).at(late).when_decided();
    assert_eq!(fails_with(step), "turn_timeout");
}

#[test]
fn a_turn_just_inside_its_time_goes_on() {
    let ms = AgentLimits::default().turn_timeout_ms;
    let almost = t0() + chrono::Duration::milliseconds(ms as i64 - 1);
    let step = given(turn_started()).at(almost).when_decided();
    assert_eq!(in_turn(step), TurnStep::AskModel);
}

#[test]
fn the_time_of_a_turn_counts_from_its_last_resumption() {
    let (receipt, given) = awaiting_approval(needing_approval(read("look")));
    let ms = AgentLimits::default().turn_timeout_ms;
    // Every given event is recorded at t0: the approval resumed the turn then.
    let step = given
        .and(approval_decided(receipt, true, None))
        .at(t0() + chrono::Duration::milliseconds(ms as i64 - 1))
        .when_decided();
    assert_eq!(runs_calls(step), ["c1"]);
}

#[test]
fn a_turn_whose_calls_all_have_output_asks_the_model_again() {
    let tool = read("look");
    let step = asking(&[("c1", &tool)])
        .ran("c1", &tool)
        .tools(&[tool])
        .when_decided();
    assert_eq!(in_turn(step), TurnStep::AskModel);
}

#[test]
fn a_turn_at_its_step_limit_fails_instead_of_asking_the_model_again() {
    let tool = read("look");
    let step = asking(&[("c1", &tool)])
        .ran("c1", &tool)
        .tools_and_limits(&[tool], limits(1, 10))
        .when_decided();
    assert_eq!(fails_with(step), "step_limit");
}

// Checking a new call.

#[test]
fn a_call_to_a_tool_the_agent_does_not_have_is_rejected() {
    let step = given(turn_started())
        .and(model_asks_raw(1, &[("c1", "nope", r#"{"q": "x"}"#)]))
        .tools(&[read("look")])
        .when_decided();
    assert_rejects(step, "c1", "unknown_tool");
}

#[test]
fn a_call_whose_arguments_are_not_json_is_rejected() {
    let step = given(turn_started())
        .and(model_asks_raw(1, &[("c1", "look", "{not json")]))
        .tools(&[read("look")])
        .when_decided();
    assert_rejects(step, "c1", "bad_arguments");
}

#[test]
fn a_call_whose_arguments_do_not_match_the_schema_is_rejected() {
    let step = given(turn_started())
        .and(model_asks_raw(1, &[("c1", "look", r#"{"q": 7}"#)]))
        .tools(&[read("look")])
        .when_decided();
    assert_rejects(step, "c1", "bad_arguments");
}

#[test]
fn a_call_to_a_tool_whose_schema_does_not_compile_is_rejected() {
    let mut tool = read("look");
    tool.input_schema = serde_json::json!({"type": 12});
    let step = given(turn_started())
        .and(model_asks_raw(1, &[("c1", "look", r#"{"q": "x"}"#)]))
        .tools(&[tool])
        .when_decided();
    assert_rejects(step, "c1", "bad_tool_schema");
}

#[test]
fn a_call_past_the_tool_call_limit_is_rejected() {
    let tool = read("look");
    let step = asking(&[("c1", &tool), ("c2", &tool)])
        .ran("c1", &tool)
        .tools_and_limits(&[tool], limits(10, 1))
        .when_decided();
    assert_rejects(step, "c2", "tool_call_limit");
}

#[test]
fn a_call_to_a_tool_that_needs_approval_asks_a_member() {
    let tool = needing_approval(mutation("pay"));
    let step = asking(&[("c1", &tool)])
        .tools(std::slice::from_ref(&tool))
        .when_decided();
    let TurnStep::AskApproval { call, tool: asked } = in_turn(step) else {
        panic!("no approval asked");
    };
    assert_eq!((call.request.id.as_str(), asked), ("c1", tool));
}

// Batching.

#[test]
fn consecutive_reads_run_together() {
    let (a, b) = (read("a"), read("b"));
    let step = asking(&[("c1", &a), ("c2", &b), ("c3", &a)])
        .tools(&[a, b])
        .when_decided();
    assert_eq!(runs_calls(step), ["c1", "c2", "c3"]);
}

#[test]
fn a_mutation_runs_alone() {
    let (m, r) = (mutation("pay"), read("look"));
    let step = asking(&[("c1", &m), ("c2", &r)])
        .tools(&[m, r])
        .when_decided();
    assert_eq!(runs_calls(step), ["c1"]);
}

#[test]
fn reads_stop_at_the_first_mutation_so_it_runs_in_order() {
    let (m, r) = (mutation("pay"), read("look"));
    let step = given(turn_started())
        .and(model_asks(
            1,
            &[("c1", &r), ("c2", &r), ("c3", &m), ("c4", &r)],
        ))
        .tools(&[m, r])
        .when_decided();
    assert_eq!(runs_calls(step), ["c1", "c2"]);
}

#[test]
fn an_idempotent_mutation_still_runs_alone() {
    let (m, r) = (idempotent(mutation("put")), read("look"));
    let step = asking(&[("c1", &r), ("c2", &m)])
        .tools(&[m, r])
        .when_decided();
    assert_eq!(runs_calls(step), ["c1"]);
}

#[test]
fn reads_stop_at_a_call_that_fails_its_check() {
    let r = read("look");
    let step = given(turn_started())
        .and(model_asks_raw(
            1,
            &[
                ("c1", "look", r#"{"q": "x"}"#),
                ("c2", "look", "{not json"),
                ("c3", "look", r#"{"q": "x"}"#),
            ],
        ))
        .tools(&[r])
        .when_decided();
    assert_eq!(runs_calls(step), ["c1"]);
}

#[test]
fn reads_stop_at_a_read_that_needs_approval() {
    let (r, asks) = (read("look"), needing_approval(read("peek")));
    let step = asking(&[("c1", &r), ("c2", &asks)])
        .tools(&[r, asks])
        .when_decided();
    assert_eq!(runs_calls(step), ["c1"]);
}

#[test]
fn reads_stop_at_the_tool_call_limit() {
    let r = read("look");
    let step = asking(&[("c1", &r), ("c2", &r), ("c3", &r)])
        .tools_and_limits(&[r], limits(10, 2))
        .when_decided();
    assert_eq!(runs_calls(step), ["c1", "c2"]);
}

#[test]
fn a_client_tool_call_runs_alone() {
    let (c, r) = (client("ask_user"), read("look"));
    let step = asking(&[("c1", &c), ("c2", &r)])
        .tools(&[c, r])
        .when_decided();
    assert_eq!(runs_calls(step), ["c1"]);
}

#[test]
fn reads_stop_at_a_client_tool() {
    let (c, r) = (client("ask_user"), read("look"));
    let step = asking(&[("c1", &r), ("c2", &c)])
        .tools(&[c, r])
        .when_decided();
    assert_eq!(runs_calls(step), ["c1"]);
}

#[test]
fn calls_are_taken_in_the_models_order() {
    let (m, r) = (mutation("pay"), read("look"));
    let step = asking(&[("c1", &m), ("c2", &r)])
        .ran("c1", &m)
        .tools(&[m, r])
        .when_decided();
    assert_eq!(runs_calls(step), ["c2"]);
}

// Approvals.

#[test]
fn a_call_awaiting_approval_waits() {
    let (_, given) = awaiting_approval(needing_approval(mutation("pay")));
    let step = given.when_decided_as_running();
    assert_eq!(in_turn(step), TurnStep::Wait);
}

#[test]
fn an_approved_call_runs() {
    let (receipt, given) = awaiting_approval(needing_approval(mutation("pay")));
    let step = given
        .and(approval_decided(receipt, true, None))
        .when_decided();
    assert_eq!(runs_calls(step), ["c1"]);
}

#[test]
fn an_approved_call_is_not_held_to_the_call_limit_again() {
    let tool = needing_approval(mutation("pay"));
    let (receipt, given) = awaiting_approval(tool.clone());
    let step = given
        .and(approval_decided(receipt, true, None))
        .tools_and_limits(&[tool], limits(10, 0))
        .when_decided();
    assert_eq!(runs_calls(step), ["c1"]);
}

#[test]
fn an_approved_call_whose_tool_is_gone_is_rejected() {
    let (receipt, given) = awaiting_approval(needing_approval(mutation("pay")));
    let step = given
        .and(approval_decided(receipt, true, None))
        .tools(&[])
        .when_decided();
    assert_rejects(step, "c1", "unknown_tool");
}

#[test]
fn a_denied_call_tells_the_model_why() {
    let (receipt, given) = awaiting_approval(needing_approval(mutation("pay")));
    let step = given
        .and(approval_decided(receipt, false, Some("too much")))
        .when_decided();
    let TurnStep::Reject { call, error } = in_turn(step) else {
        panic!("not rejected");
    };
    assert_eq!(call.request.id, "c1");
    assert_eq!(error.code, "denied");
    assert_eq!(error.message, "A member denied this call: too much");
}

#[test]
fn a_call_denied_without_a_reason_still_tells_the_model() {
    let (receipt, given) = awaiting_approval(needing_approval(mutation("pay")));
    let step = given
        .and(approval_decided(receipt, false, None))
        .when_decided();
    let TurnStep::Reject { error, .. } = in_turn(step) else {
        panic!("not rejected");
    };
    assert_eq!(error.message, "A member denied this call.");
}

// Client tools.

#[test]
fn a_client_call_waits_for_the_clients_output() {
    let (_, given) = interrupted(client("ask_user"));
    let step = given.when_decided_as_running();
    assert_eq!(in_turn(step), TurnStep::Wait);
}

#[test]
fn a_client_calls_output_lets_the_turn_go_on() {
    let tool = client("ask_user");
    let step = asking(&[("c1", &tool)])
        .ran("c1", &tool)
        .tools(&[tool])
        .when_decided();
    assert_eq!(in_turn(step), TurnStep::AskModel);
}

// Interrupted calls.

#[test]
fn an_intent_whose_result_this_driver_holds_records_the_result() {
    let (i, given) = interrupted(mutation("pay"));
    let step = given.holding(result_of(&i)).when_decided();
    assert_eq!(in_turn(step), TurnStep::SaveResult(result_of(&i)));
}

#[test]
fn an_intent_without_a_result_goes_to_the_recovery_rule() {
    let (i, given) = interrupted(mutation("pay"));
    let step = given.when_decided();
    let TurnStep::Recover { call, intent } = in_turn(step) else {
        panic!("not recovered");
    };
    assert_eq!((call.request.id.as_str(), intent), ("c1", i));
}

#[test]
fn an_uncertain_call_waits_for_a_member() {
    let (i, given) = interrupted(mutation("pay"));
    let step = given.and(uncertain(i.receipt_id)).when_decided_as_running();
    assert_eq!(in_turn(step), TurnStep::Wait);
}

#[test]
fn an_uncertain_call_a_member_asked_to_retry_is_retried() {
    let (i, given) = interrupted(mutation("pay"));
    let step = given
        .and(uncertain(i.receipt_id))
        .and(resolved(i.receipt_id, Resolution::Retry))
        .when_decided();
    let TurnStep::Retry { call, intent } = in_turn(step) else {
        panic!("not retried");
    };
    assert_eq!((call.request.id.as_str(), intent), ("c1", i));
}

#[test]
fn an_uncertain_call_a_member_skipped_lets_the_turn_go_on() {
    let (i, given) = interrupted(mutation("pay"));
    let step = given
        .and(uncertain(i.receipt_id))
        .and(resolved(i.receipt_id, Resolution::Skip))
        .when_decided();
    assert_eq!(in_turn(step), TurnStep::AskModel);
}
