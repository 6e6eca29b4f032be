//! Tool calls end to end: a scripted model calls `http` tools on a local endpoint and
//! `client` tools answered through the API use cases; approvals, limits, bad calls and
//! cancels. The endpoint counts every request it receives.

use crate::world::{World, world};
use baton_core::model::{
    AgentLimits, ReceiptState, RunStatus, ScriptedReply, ScriptedToolCall, ToolKindSpec,
};
use baton_core::runs::{ApprovalDecision, ToolOutput};
use baton_core::tools::NewTool;
use baton_core::{RunId, ToolId};
use baton_events::ToolEffect;
use baton_testkit::{Behaviour, ToolServer};
use serde_json::json;
use std::time::Duration;

pub fn http_tool(server: &ToolServer, name: &str, effect: ToolEffect) -> NewTool {
    NewTool {
        name: name.into(),
        description: format!("The {name} tool"),
        input_schema: json!({
            "type": "object",
            "properties": {"q": {"type": "string"}},
            "required": ["q"],
        }),
        effect,
        idempotent: false,
        requires_approval: false,
        timeout_ms: 5_000,
        kind: ToolKindSpec::Http {
            url: server.url(name),
            secret_headers: vec![],
        },
    }
}

pub fn calls(names: &[&str]) -> ScriptedReply {
    ScriptedReply {
        content: String::new(),
        delay_ms: 0,
        complete_run: false,
        tool_calls: names
            .iter()
            .map(|n| ScriptedToolCall {
                name: (*n).into(),
                arguments: json!({"q": n}),
            })
            .collect(),
    }
}

pub fn says(content: &str) -> ScriptedReply {
    ScriptedReply {
        content: content.into(),
        delay_ms: 0,
        complete_run: false,
        tool_calls: vec![],
    }
}

impl World {
    /// The run's receipts, oldest first.
    pub async fn receipts(&self, run: RunId) -> Vec<baton_core::model::Receipt> {
        self.runs
            .list_receipts(&self.owner, run)
            .await
            .expect("receipts")
    }

    /// Starts a run of an agent with these tools and this script.
    pub async fn run_with(
        &self,
        tools: Vec<ToolId>,
        replies: Vec<ScriptedReply>,
        limits: AgentLimits,
    ) -> RunId {
        let agent = self.scripted_agent(replies, tools, limits).await;
        self.start(&self.runs, agent, "go").await
    }
}

#[tokio::test]
async fn a_run_calls_a_read_and_a_mutation_then_answers() {
    let w = world().await;
    let server = ToolServer::start().await;
    let lookup = w.tool(http_tool(&server, "lookup", ToolEffect::Read)).await;
    let charge = w
        .tool(http_tool(&server, "charge", ToolEffect::Mutation))
        .await;
    let run = w
        .run_with(
            vec![lookup, charge],
            vec![calls(&["lookup", "charge"]), says("all done")],
            AgentLimits::default(),
        )
        .await;
    let done = w.wait_status(run, RunStatus::Waiting).await;
    assert_eq!(done.last_error, None);
    assert_eq!((server.calls("lookup"), server.calls("charge")), (1, 1));
    let receipts = w.receipts(run).await;
    let states: Vec<_> = receipts
        .iter()
        .map(|r| (r.tool.as_str(), r.state))
        .collect();
    assert_eq!(
        states,
        [("lookup", ReceiptState::Ok), ("charge", ReceiptState::Ok)]
    );
    // The receipt id is the idempotency key the endpoint saw.
    let charged = &server.received("charge")[0];
    assert_eq!(
        charged.idempotency_key.as_deref(),
        Some(receipts[1].id.to_string().as_str())
    );
    assert_eq!(charged.arguments, json!({"q": "charge"}));
    // Write-ahead: each intent is committed before its result, mutations after reads.
    let types = w.settled_types(run).await;
    let tail: Vec<&str> = types.iter().skip(5).map(String::as_str).collect();
    assert_eq!(
        tail,
        [
            "model.completed",
            "tool.intent",
            "tool.result",
            "tool.intent",
            "tool.result",
            "model.completed",
            "turn.completed",
            "checkpoint.saved"
        ]
    );
    let messages = w
        .runs
        .list_messages(&w.owner, run, None, None)
        .await
        .expect("messages");
    let last = messages.items.last().map(|m| m.content.as_str());
    assert_eq!(last, Some("all done"));
}

#[tokio::test]
async fn independent_reads_of_one_step_run_concurrently() {
    let w = world().await;
    let server = ToolServer::start().await;
    let mut tools = Vec::new();
    for name in ["a", "b", "c"] {
        server.set(
            name,
            Behaviour {
                delay: Duration::from_millis(300),
                ..Behaviour::default()
            },
        );
        tools.push(w.tool(http_tool(&server, name, ToolEffect::Read)).await);
    }
    let run = w
        .run_with(
            tools,
            vec![calls(&["a", "b", "c"]), says("read")],
            AgentLimits::default(),
        )
        .await;
    w.wait_status(run, RunStatus::Waiting).await;
    assert_eq!(server.max_in_flight(), 3);
    let intents = w.types(run).await;
    let first_result = intents
        .iter()
        .position(|t| t == "tool.result")
        .expect("results");
    let last_intent = intents
        .iter()
        .rposition(|t| t == "tool.intent")
        .expect("intents");
    assert!(
        last_intent < first_result,
        "all intents before the results: {intents:?}"
    );
}

#[tokio::test]
async fn mutations_run_one_at_a_time_in_the_models_order() {
    let w = world().await;
    let server = ToolServer::start().await;
    let mut tools = Vec::new();
    for name in ["first", "second"] {
        server.set(
            name,
            Behaviour {
                delay: Duration::from_millis(100),
                ..Behaviour::default()
            },
        );
        tools.push(w.tool(http_tool(&server, name, ToolEffect::Mutation)).await);
    }
    let run = w
        .run_with(
            tools,
            vec![calls(&["first", "second"]), says("ok")],
            AgentLimits::default(),
        )
        .await;
    w.wait_status(run, RunStatus::Waiting).await;
    assert_eq!(server.max_in_flight(), 1);
    let order: Vec<_> = w.receipts(run).await.into_iter().map(|r| r.tool).collect();
    assert_eq!(order, ["first", "second"]);
}

#[tokio::test]
async fn approval_approve_runs_the_call_and_deny_tells_the_model() {
    let w = world().await;
    let server = ToolServer::start().await;
    let mut new = http_tool(&server, "deploy", ToolEffect::Mutation);
    new.requires_approval = true;
    let deploy = w.tool(new).await;
    let run = w
        .run_with(
            vec![deploy],
            vec![calls(&["deploy"]), calls(&["deploy"]), says("done")],
            AgentLimits::default(),
        )
        .await;
    for (approve, state) in [(true, ReceiptState::Ok), (false, ReceiptState::Denied)] {
        let r = w
            .wait_for(run, "waiting for approval", |r| {
                r.status == RunStatus::RequiresAction
            })
            .await;
        assert_eq!(r.pending_actions, 1);
        let receipts = w.receipts(run).await;
        let waiting = receipts.last().expect("a receipt");
        assert_eq!(waiting.state, ReceiptState::AwaitingApproval);
        let decided = w
            .runs
            .decide_approval(
                &w.owner,
                run,
                waiting.approval_id.expect("approval id"),
                ApprovalDecision {
                    approve,
                    reason: Some("policy".into()),
                },
            )
            .await
            .expect("decide");
        assert!(matches!(
            decided.state,
            ReceiptState::Approved | ReceiptState::Denied
        ));
        let id = waiting.id;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while w
            .receipts(run)
            .await
            .iter()
            .find(|r| r.id == id)
            .map(|r| r.state)
            != Some(state)
        {
            assert!(tokio::time::Instant::now() < deadline, "never {state:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    w.wait_status(run, RunStatus::Waiting).await;
    assert_eq!(server.calls("deploy"), 1, "only the approved call ran");
    let denied = &w.receipts(run).await[1];
    assert!(
        denied
            .output
            .as_deref()
            .is_some_and(|o| o.contains("policy")),
        "{denied:?}"
    );
    // A decided approval cannot be decided again.
    let again = w
        .runs
        .decide_approval(
            &w.owner,
            run,
            denied.approval_id.expect("approval id"),
            ApprovalDecision {
                approve: true,
                reason: None,
            },
        )
        .await;
    assert!(
        matches!(again, Err(baton_core::CoreError::WrongState(_))),
        "{again:?}"
    );
}

#[tokio::test]
async fn client_tools_wait_for_the_outputs_the_client_submits() {
    let w = world().await;
    let pick = w
        .tool(NewTool {
            name: "pick_file".into(),
            description: "Asks the user to pick a file".into(),
            input_schema: json!({"type": "object"}),
            effect: ToolEffect::Read,
            idempotent: false,
            requires_approval: false,
            timeout_ms: 1_000,
            kind: ToolKindSpec::Client,
        })
        .await;
    let run = w
        .run_with(
            vec![pick],
            vec![calls(&["pick_file"]), says("thanks")],
            AgentLimits::default(),
        )
        .await;
    w.wait_for(run, "waiting for the client", |r| {
        r.status == RunStatus::RequiresAction
    })
    .await;
    let receipt = w.receipts(run).await.remove(0);
    assert_eq!(receipt.state, ReceiptState::AwaitingClient);
    let posted = w
        .runs
        .submit_tool_outputs(
            &w.owner,
            run,
            vec![ToolOutput {
                receipt_id: receipt.id,
                output: "notes.txt".into(),
                is_error: false,
            }],
        )
        .await
        .expect("outputs");
    assert_eq!(posted[0].state, ReceiptState::Ok);
    w.wait_status(run, RunStatus::Waiting).await;
    let again = w
        .runs
        .submit_tool_outputs(
            &w.owner,
            run,
            vec![ToolOutput {
                receipt_id: receipt.id,
                output: "again".into(),
                is_error: false,
            }],
        )
        .await;
    assert!(again.is_err(), "a settled call takes no second output");
}

#[tokio::test]
async fn bad_calls_become_error_results_the_model_sees() {
    let w = world().await;
    let server = ToolServer::start().await;
    let lookup = w.tool(http_tool(&server, "lookup", ToolEffect::Read)).await;
    let bad = ScriptedReply {
        tool_calls: vec![
            ScriptedToolCall {
                name: "nope".into(),
                arguments: json!({}),
            },
            ScriptedToolCall {
                name: "lookup".into(),
                arguments: json!("{not json"),
            },
            ScriptedToolCall {
                name: "lookup".into(),
                arguments: json!({"q": 7}),
            },
        ],
        ..says("")
    };
    let run = w
        .run_with(
            vec![lookup],
            vec![bad, says("sorry")],
            AgentLimits::default(),
        )
        .await;
    w.wait_status(run, RunStatus::Waiting).await;
    assert_eq!(server.calls("lookup"), 0, "nothing invalid ran");
    let codes: Vec<_> = w
        .receipts(run)
        .await
        .into_iter()
        .map(|r| (r.state, r.error.map(|e| e.code)))
        .collect();
    let err = |c: &str| (ReceiptState::Error, Some(c.to_string()));
    assert_eq!(
        codes,
        [
            err("unknown_tool"),
            err("bad_arguments"),
            err("bad_arguments")
        ]
    );
}

#[tokio::test]
async fn limits_end_a_turn_that_keeps_calling_tools() {
    let w = world().await;
    let server = ToolServer::start().await;
    let lookup = w.tool(http_tool(&server, "lookup", ToolEffect::Read)).await;
    let limits = AgentLimits {
        max_steps: 2,
        max_tool_calls: 3,
        ..AgentLimits::default()
    };
    let run = w
        .run_with(
            vec![lookup],
            vec![calls(&["lookup", "lookup"]), calls(&["lookup", "lookup"])],
            limits,
        )
        .await;
    let r = w
        .wait_for(run, "failed its turn", |r| r.last_error.is_some())
        .await;
    assert_eq!(r.last_error.map(|e| e.code).as_deref(), Some("step_limit"));
    assert_eq!(
        server.calls("lookup"),
        3,
        "the fourth call hit the call limit"
    );
    let last = w.receipts(run).await.pop().and_then(|r| r.error);
    assert_eq!(last.map(|e| e.code).as_deref(), Some("tool_call_limit"));
}

#[tokio::test]
async fn an_error_answer_from_the_endpoint_is_a_result_not_a_crash() {
    let w = world().await;
    let server = ToolServer::start().await;
    server.set(
        "flaky",
        Behaviour {
            status: 503,
            body: Some("down".into()),
            ..Behaviour::default()
        },
    );
    let flaky = w
        .tool(http_tool(&server, "flaky", ToolEffect::Mutation))
        .await;
    let run = w
        .run_with(
            vec![flaky],
            vec![calls(&["flaky"]), says("it failed")],
            AgentLimits::default(),
        )
        .await;
    w.wait_status(run, RunStatus::Waiting).await;
    assert_eq!(server.calls("flaky"), 1, "a mutation is not retried");
    let r = w.receipts(run).await.remove(0);
    assert_eq!(r.state, ReceiptState::Error);
    // The status, not the server's failure page: that is not the model's to read.
    let output = r.output.unwrap_or_default();
    assert!(
        output.contains("503") && !output.contains("down"),
        "{output}"
    );
}

#[tokio::test]
async fn cancel_during_a_tool_call_holds_the_mutation_uncertain() {
    let w = world().await;
    let server = ToolServer::start().await;
    for (name, effect, idempotent) in [
        ("slow_read", ToolEffect::Read, false),
        ("slow_write", ToolEffect::Mutation, false),
        ("slow_idempotent_write", ToolEffect::Mutation, true),
    ] {
        server.set(
            name,
            Behaviour {
                delay: Duration::from_secs(30),
                ..Behaviour::default()
            },
        );
        let mut new = http_tool(&server, name, effect);
        new.idempotent = idempotent;
        let tool = w.tool(new).await;
        let run = w
            .run_with(vec![tool], vec![calls(&[name])], AgentLimits::default())
            .await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while server.calls(name) == 0 {
            assert!(tokio::time::Instant::now() < deadline, "never called");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let started = tokio::time::Instant::now();
        w.runs
            .cancel_run(&w.owner, run, None)
            .await
            .expect("cancel");
        w.wait_status(run, RunStatus::Cancelled).await;
        assert!(started.elapsed() < Duration::from_secs(5), "at once");
        let state = w.receipts(run).await.remove(0).state;
        let expected = match effect {
            ToolEffect::Read => ReceiptState::Cancelled,
            ToolEffect::Mutation => ReceiptState::Uncertain,
        };
        assert_eq!(state, expected, "{name}");
    }
}

#[tokio::test]
async fn cancel_during_a_model_call_ends_the_run_at_once() {
    let w = world().await;
    let slow = ScriptedReply {
        delay_ms: 30_000,
        ..says("too late")
    };
    let run = w.run_with(vec![], vec![slow], AgentLimits::default()).await;
    w.wait_status(run, RunStatus::Running).await;
    let started = tokio::time::Instant::now();
    w.runs
        .cancel_run(&w.owner, run, None)
        .await
        .expect("cancel");
    w.wait_status(run, RunStatus::Cancelled).await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(!w.types(run).await.iter().any(|t| t == "model.completed"));
}

#[tokio::test]
async fn oversized_outputs_are_cut_with_a_marker() {
    let w = world().await;
    let server = ToolServer::start().await;
    server.set(
        "dump",
        Behaviour {
            body: Some("x".repeat(baton_engine::MAX_OUTPUT_BYTES + 10_000)),
            ..Behaviour::default()
        },
    );
    let dump = w.tool(http_tool(&server, "dump", ToolEffect::Read)).await;
    let run = w
        .run_with(
            vec![dump],
            vec![calls(&["dump"]), says("big")],
            AgentLimits::default(),
        )
        .await;
    w.wait_status(run, RunStatus::Waiting).await;
    let output = w.receipts(run).await.remove(0).output.unwrap_or_default();
    assert!(output.len() < baton_engine::MAX_OUTPUT_BYTES + 100);
    assert!(
        output.ends_with("[output truncated: 10000 more bytes]"),
        "{}",
        &output[output.len() - 60..]
    );
    let truncated = w
        .events(run)
        .await
        .into_iter()
        .find(|e| e.event_type == "tool.result")
        .map(|e| e.data["truncated"].clone());
    assert_eq!(truncated, Some(json!(true)));
}

#[tokio::test]
async fn a_mutation_sent_without_an_answer_is_uncertain_not_an_error() {
    let w = world().await;
    let server = ToolServer::start().await;
    server.set(
        "slow",
        Behaviour {
            delay: Duration::from_secs(5),
            ..Behaviour::default()
        },
    );
    let mut slow = http_tool(&server, "slow", ToolEffect::Mutation);
    slow.timeout_ms = 200;
    let slow = w.tool(slow).await;
    let run = w
        .run_with(
            vec![slow],
            vec![calls(&["slow"]), says("did it?")],
            AgentLimits::default(),
        )
        .await;
    // It may have taken effect: a member decides, the model is not told it failed.
    w.wait_status(run, RunStatus::RequiresAction).await;
    let r = w.receipts(run).await.remove(0);
    assert_eq!(r.state, ReceiptState::Uncertain);
    assert_eq!(r.attempts, 1);
    assert_eq!(server.calls("slow"), 1, "a mutation is never retried");
    let uncertain = w
        .events(run)
        .await
        .into_iter()
        .find(|e| e.event_type == "tool.uncertain")
        .expect("recorded uncertain");
    let reason = uncertain.data["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("no answer came within 200 ms"), "{reason}");
}

#[tokio::test]
async fn a_failing_read_is_retried_within_its_budget_and_every_attempt_is_counted() {
    let w = world().await;
    let server = ToolServer::start().await;
    server.set(
        "down",
        Behaviour {
            status: 502,
            ..Behaviour::default()
        },
    );
    let down = w.tool(http_tool(&server, "down", ToolEffect::Read)).await;
    let run = w
        .run_with(
            vec![down],
            vec![calls(&["down"]), says("it failed")],
            AgentLimits::default(),
        )
        .await;
    w.wait_status(run, RunStatus::Waiting).await;
    let r = w.receipts(run).await.remove(0);
    assert_eq!(
        (r.state, r.error.map(|e| e.code)),
        (ReceiptState::Error, Some("tool_http_status".into()))
    );
    assert_eq!(server.calls("down"), 3, "a read is tried three times");
    assert_eq!(r.attempts, 3, "the receipt counts what was sent");
}

#[tokio::test]
async fn a_secret_header_is_masked_wherever_the_endpoint_echoes_it_even_at_the_cut() {
    use crate::world::{TEST_SECRET, TEST_SECRET_NAME};
    let w = world().await;
    let server = ToolServer::start().await;
    let max = baton_engine::MAX_OUTPUT_BYTES;
    // Once in the middle, and once across the cut of the size limit.
    for (name, offset) in [("early", 10), ("at_cut", max - 7), ("past_cut", max - 2)] {
        let body = format!("{}{TEST_SECRET}{}", ".".repeat(offset), ".".repeat(100));
        server.set(
            name,
            Behaviour {
                body: Some(body),
                ..Behaviour::default()
            },
        );
    }
    let mut tools = Vec::new();
    for name in ["early", "at_cut", "past_cut"] {
        let mut tool = http_tool(&server, name, ToolEffect::Read);
        tool.kind = ToolKindSpec::Http {
            url: server.url(name),
            secret_headers: vec![baton_core::model::SecretHeader {
                header: "authorization".into(),
                secret: TEST_SECRET_NAME.into(),
            }],
        };
        tools.push(w.tool(tool).await);
    }
    let run = w
        .run_with(
            tools,
            vec![calls(&["early", "at_cut", "past_cut"]), says("done")],
            AgentLimits::default(),
        )
        .await;
    w.wait_status(run, RunStatus::Waiting).await;
    assert_eq!(
        server.received("early")[0].headers["authorization"],
        TEST_SECRET,
        "the tool gets its secret"
    );
    let stored: Vec<String> = w
        .events(run)
        .await
        .into_iter()
        .filter(|e| e.event_type == "tool.result")
        .map(|e| e.data.to_string())
        .chain(w.receipts(run).await.into_iter().filter_map(|r| r.output))
        .collect();
    assert_eq!(stored.len(), 6);
    let pieces: Vec<&str> = (0..TEST_SECRET.len() - 5)
        .map(|i| &TEST_SECRET[i..i + 6])
        .collect();
    for text in &stored {
        for piece in &pieces {
            assert!(!text.contains(piece), "{piece:?} shows in a result");
        }
    }
    assert!(
        stored.iter().any(|t| t.contains("***")),
        "masked, not dropped"
    );
}

#[tokio::test]
async fn the_turn_timeout_bounds_a_model_call() {
    let w = world().await;
    let slow = ScriptedReply {
        delay_ms: 5_000,
        ..says("late")
    };
    let limits = AgentLimits {
        turn_timeout_ms: 300,
        ..AgentLimits::default()
    };
    let run = w.run_with(vec![], vec![slow], limits).await;
    let started = tokio::time::Instant::now();
    let r = w
        .wait_for(run, "timed out", |r| r.last_error.is_some())
        .await;
    assert_eq!(
        r.last_error.map(|e| e.code).as_deref(),
        Some("turn_timeout")
    );
    assert!(started.elapsed() < Duration::from_secs(3));
}
