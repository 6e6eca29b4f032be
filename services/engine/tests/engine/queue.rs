//! Messages posted while a turn is in progress: queued with `strategy: enqueue`, each
//! taken as a turn of its own, in order, in the append that settles the turn before it;
//! with `interrupt` or `rollback`, ending the turn at its next safe point (a model call
//! abandoned, a tool call in flight finished and recorded) and taken next; and client
//! events that only queue or relabel never cost the turn its model reply.

use crate::world::{World, world};
use baton_core::model::{MessageStrategy, RunStatus};
use baton_core::ports::RunReader;
use baton_core::runs::{PostMessage, Posted};
use baton_events::{MessageRole, RunId};
use baton_testkit::chat::{ChatResponse, ChatServer, ScriptedChat};
use baton_testkit::{Behaviour, ToolServer};
use std::time::Duration;

/// Posts `content` to `run` with `strategy`.
async fn post(w: &World, run: RunId, content: &str, strategy: MessageStrategy) -> Posted {
    let cmd = PostMessage {
        content: content.into(),
        request_id: None,
        strategy: Some(strategy),
    };
    w.runs.post_message(&w.owner, run, cmd).await.expect("post")
}

/// A world with an agent of a fresh chat-completions server (streaming or not).
async fn chatting(stream: bool) -> (World, ChatServer, baton_core::AgentId) {
    let w = world().await;
    let chat = ChatServer::start().await;
    let agent = w.openai_agent(&chat, stream).await;
    (w, chat, agent)
}

/// Waits until the model has been asked `n` times.
async fn asked(chat: &ChatServer, n: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while chat.request_count() < n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the model was never asked"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The run's messages as (role, content).
async fn said(w: &World, run: RunId) -> Vec<(MessageRole, String)> {
    let messages = w
        .store
        .list_messages(w.owner.tenant, run, 0, 100)
        .await
        .expect("messages");
    messages.into_iter().map(|m| (m.role, m.content)).collect()
}

#[tokio::test]
async fn queued_messages_each_take_a_turn_in_order_and_the_model_is_asked_once_per_turn() {
    let (w, chat, agent) = chatting(false).await;
    // The model call outlasts the posts below on a loaded machine.
    chat.push(ChatResponse::text("one").delayed(3_000));
    chat.push(ChatResponse::text("two"));
    chat.push(ChatResponse::text("three"));
    let run = w.start(&w.runs, agent, "go").await;
    asked(&chat, 1).await;

    // While the model is asked, two messages queue behind the turn.
    for (content, place) in [("first", 1), ("second", 2)] {
        let Posted::Queued(q) = post(&w, run, content, MessageStrategy::Enqueue).await else {
            panic!("{content} was not queued");
        };
        assert_eq!(q.position, place);
    }
    assert_eq!(w.get(run).await.queued_messages, 2);

    let done = w
        .wait_for(run, "through the queue", |r| {
            r.turn_count == 3 && r.status == RunStatus::Waiting
        })
        .await;
    assert_eq!(done.queued_messages, 0);
    // The queued events moved the version under the first turn's append: it was made
    // again on top of them, not by asking the model again.
    assert_eq!(chat.request_count(), 3);
    let u = MessageRole::User;
    let a = MessageRole::Assistant;
    let expected = [
        (u, "go"),
        (a, "one"),
        (u, "first"),
        (a, "two"),
        (u, "second"),
        (a, "three"),
    ];
    let expected: Vec<(MessageRole, String)> =
        expected.iter().map(|(r, c)| (*r, c.to_string())).collect();
    assert_eq!(said(&w, run).await, expected);
    // The second turn's model saw the first answer and the queued message after it.
    let asked_second = &chat.requests()[1].body["messages"];
    let contents: Vec<&str> = asked_second
        .as_array()
        .expect("messages")
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert_eq!(contents, ["go", "one", "first"]);

    // Each queued message was taken in the append that settled the turn before it,
    // keeping the lease: no release, no checkpoint, no new claim in between.
    let events = w.events(run).await;
    let settled: Vec<usize> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| e.event_type == "turn.completed")
        .map(|(i, _)| i)
        .collect();
    for &i in &settled[..2] {
        let next: Vec<&str> = events[i..i + 3]
            .iter()
            .map(|e| e.event_type.as_str())
            .collect();
        assert_eq!(
            next,
            ["turn.completed", "message.appended", "turn.requested"]
        );
        assert_eq!(
            events[i].recorded_at,
            events[i + 2].recorded_at,
            "one append"
        );
        assert_eq!(events[i + 1].data["queued"], true);
    }
    let claims = events
        .iter()
        .filter(|e| e.event_type == "lease.acquired")
        .count();
    assert_eq!(claims, 1, "one lease from the first turn to the last");
}

#[tokio::test]
async fn a_failed_turn_takes_the_next_queued_message_too() {
    let (w, chat, agent) = chatting(false).await;
    chat.push(ChatResponse::status(500, "down").delayed(300));
    chat.push(ChatResponse::text("back"));
    let run = w.start(&w.runs, agent, "go").await;
    asked(&chat, 1).await;
    post(&w, run, "retry", MessageStrategy::Enqueue).await;
    let done = w
        .wait_for(run, "the queued turn", |r| {
            r.turn_count == 2 && r.status == RunStatus::Waiting
        })
        .await;
    assert_eq!(done.failed_turns, 0, "the queued turn completed");
    let last = said(&w, run).await.pop().expect("a reply");
    assert_eq!(last, (MessageRole::Assistant, "back".to_string()));
}

#[tokio::test]
async fn a_cancelled_run_drops_its_queue_and_takes_no_further_turn() {
    let (w, chat, agent) = chatting(false).await;
    chat.push(ChatResponse::text("never").delayed(2_000));
    let run = w.start(&w.runs, agent, "go").await;
    asked(&chat, 1).await;
    post(&w, run, "later", MessageStrategy::Enqueue).await;
    w.runs
        .cancel_run(&w.owner, run, None)
        .await
        .expect("cancel");
    let done = w.wait_status(run, RunStatus::Cancelled).await;
    assert_eq!((done.turn_count, done.queued_messages), (1, 0));
    assert!(
        !said(&w, run).await.iter().any(|(_, c)| c == "later"),
        "the queued message never joined the conversation"
    );
}

#[tokio::test]
async fn labels_changed_during_a_turn_cost_it_nothing() {
    let (w, chat, agent) = chatting(false).await;
    chat.push(ChatResponse::text("done").delayed(3_000));
    let run = w.start(&w.runs, agent, "go").await;
    asked(&chat, 1).await;
    let patch: baton_core::runs::metadata::RunPatch =
        serde_json::from_value(serde_json::json!({"metadata": {"team": "billing"}}))
            .expect("patch");
    let during = w
        .runs
        .update_run(&w.owner, run, patch)
        .await
        .expect("patched during the turn");
    assert!(during.status.is_busy(), "{during:?}");
    let done = w.wait_status(run, RunStatus::Waiting).await;
    assert_eq!(
        done.metadata.get("team").map(String::as_str),
        Some("billing")
    );
    assert_eq!(
        done.last_turn_outcome,
        Some(baton_core::model::TurnEnd::Completed)
    );
    assert_eq!(chat.request_count(), 1, "the model was asked once");
}

/// The contents of the messages the model was sent in request `i`.
fn sent(chat: &ChatServer, i: usize) -> Vec<String> {
    chat.requests()[i].body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| match m["content"].as_str() {
            Some(c) => c.to_string(),
            // An assistant message of tool calls has no content.
            None => format!("calls {}", m["tool_calls"][0]["function"]["name"]),
        })
        .collect()
}

/// The run's `turn.interrupted` events' data.
async fn interruptions(w: &World, run: RunId) -> Vec<serde_json::Value> {
    w.events(run)
        .await
        .into_iter()
        .filter(|e| e.event_type == "turn.interrupted")
        .map(|e| e.data)
        .collect()
}

#[tokio::test]
async fn an_interrupt_abandons_the_model_call_and_its_message_takes_the_next_turn() {
    let (w, chat, agent) = chatting(true).await;
    chat.push(ChatResponse::text("never heard").delayed(30_000));
    chat.push(ChatResponse::text("on it"));
    let run = w.start(&w.runs, agent, "write an essay").await;
    asked(&chat, 1).await;
    post(&w, run, "no, a haiku", MessageStrategy::Interrupt).await;
    let done = w
        .wait_for(run, "the interrupting turn", |r| {
            r.turn_count == 2 && r.status == RunStatus::Waiting
        })
        .await;
    assert_eq!(done.queued_messages, 0);
    assert!(!done.interrupt_requested);
    assert_eq!(chat.request_count(), 2);
    assert_eq!(sent(&chat, 1), ["write an essay", "no, a haiku"]);
    let ended = interruptions(&w, run).await;
    assert_eq!(ended.len(), 1);
    assert_eq!(ended[0]["turn"], 1);
    let u = MessageRole::User;
    let expected = vec![
        (u, "write an essay".to_string()),
        (u, "no, a haiku".to_string()),
        (MessageRole::Assistant, "on it".to_string()),
    ];
    assert_eq!(said(&w, run).await, expected);
}

/// A turn that called `look` and is asking the model again when a message interrupts it
/// with `strategy`; returns what the next turn's model call was sent.
async fn interrupted_after_a_call(strategy: MessageStrategy) -> Vec<String> {
    let w = world().await;
    let tools = ToolServer::start().await;
    let look = w
        .tool(crate::tools::http_tool(
            &tools,
            "look",
            baton_events::ToolEffect::Read,
        ))
        .await;
    let chat = ChatServer::start().await;
    let agent = w.openai_agent_with(&chat, false, vec![look]).await;
    let call = ScriptedChat::tool_calls(vec![("c1", "look", r#"{"q": "x"}"#)]);
    chat.push(ChatResponse::Reply(call));
    chat.push(ChatResponse::text("never heard").delayed(30_000));
    chat.push(ChatResponse::text("fresh start"));
    let run = w.start(&w.runs, agent, "go").await;
    asked(&chat, 2).await;
    post(&w, run, "change of plan", strategy).await;
    w.wait_for(run, "the interrupting turn", |r| {
        r.turn_count == 2 && r.status == RunStatus::Waiting
    })
    .await;
    assert_eq!(tools.calls("look"), 1);
    let ended = interruptions(&w, run).await;
    assert_eq!(ended.len(), 1);
    assert_eq!(
        ended[0]["rollback"] == true,
        strategy == MessageStrategy::Rollback,
        "{ended:?}"
    );
    sent(&chat, 2)
}

#[tokio::test]
async fn an_interrupted_turn_keeps_its_steps_and_a_rolled_back_one_drops_them() {
    let kept = interrupted_after_a_call(MessageStrategy::Interrupt).await;
    assert_eq!(kept.len(), 4, "{kept:?}");
    assert_eq!(kept[0], "go");
    assert_eq!(kept[1], "calls \"look\"");
    assert!(kept[2].contains("look"), "the call's output: {kept:?}");
    assert_eq!(kept[3], "change of plan");
    let dropped = interrupted_after_a_call(MessageStrategy::Rollback).await;
    assert_eq!(dropped, ["go", "change of plan"]);
}

#[tokio::test]
async fn a_mutation_in_flight_finishes_and_is_recorded_before_the_turn_is_interrupted() {
    let w = world().await;
    let tools = ToolServer::start().await;
    tools.set(
        "pay",
        Behaviour {
            delay: Duration::from_millis(3_000),
            ..Behaviour::default()
        },
    );
    let pay = w
        .tool(crate::tools::http_tool(
            &tools,
            "pay",
            baton_events::ToolEffect::Mutation,
        ))
        .await;
    let chat = ChatServer::start().await;
    let agent = w.openai_agent_with(&chat, false, vec![pay]).await;
    let call = ScriptedChat::tool_calls(vec![("c1", "pay", r#"{"q": "10 EUR"}"#)]);
    chat.push(ChatResponse::Reply(call));
    chat.push(ChatResponse::text("stopped"));
    let run = w.start(&w.runs, agent, "pay the bill").await;
    // The call is in flight: its intent is recorded (the endpoint takes 3 s).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !w.types(run).await.iter().any(|t| t == "tool.intent") {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the call never went out"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    post(&w, run, "wait, stop", MessageStrategy::Interrupt).await;
    w.wait_for(run, "the interrupting turn", |r| {
        r.turn_count == 2 && r.status == RunStatus::Waiting
    })
    .await;
    assert_eq!(tools.calls("pay"), 1, "made once");
    let receipts = w.receipts(run).await;
    assert_eq!(receipts.len(), 1);
    assert_eq!(
        receipts[0].state,
        baton_core::model::ReceiptState::Ok,
        "{receipts:?}"
    );
    // The turn ended after the call's result and before asking the model again.
    let types: Vec<String> = w.types(run).await;
    let result = types
        .iter()
        .position(|t| t == "tool.result")
        .expect("a result");
    let ended = types
        .iter()
        .position(|t| t == "turn.interrupted")
        .expect("interrupted");
    assert!(result < ended, "{types:?}");
    assert_eq!(
        types[result..ended]
            .iter()
            .filter(|t| *t == "model.completed")
            .count(),
        0,
        "{types:?}"
    );
    assert_eq!(chat.request_count(), 2, "turn 1 asked once, turn 2 once");
    assert_eq!(
        sent(&chat, 1).last().map(String::as_str),
        Some("wait, stop")
    );
}
