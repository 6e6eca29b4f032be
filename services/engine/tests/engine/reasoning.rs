//! A model's reasoning through a whole turn: streamed by a local chat-completions server
//! as `reasoning_content`, or inline in `<think>` blocks, it reaches live subscribers as
//! reasoning deltas, is kept in `model.completed` apart from the content, and is neither
//! in the stored assistant message nor sent back to the model on the next turn.

use crate::world::world;
use baton_core::model::RunStatus;
use baton_core::ports::RunReader;
use baton_core::runs::PostMessage;
use baton_events::{Decoded, MessageRole, RunEvent};
use baton_testkit::chat::{ChatResponse, ChatServer, ScriptedChat};

async fn reasoning_is_kept_apart(first: ChatResponse, thought: &str, answer: &str) {
    let w = world().await;
    let chat = ChatServer::start().await;
    let agent = w.openai_agent(&chat, true).await;
    chat.push(first);
    let run = w.start(&w.runs, agent, "hello").await;
    w.wait_status(run, RunStatus::Waiting).await;

    let completed: Vec<_> = w
        .events(run)
        .await
        .into_iter()
        .filter_map(|e| match e.decode() {
            Decoded::Known(RunEvent::ModelCompleted(m)) => Some(m),
            _ => None,
        })
        .collect();
    assert_eq!(completed.len(), 1);
    assert_eq!(completed[0].content.as_deref(), Some(answer));
    assert_eq!(completed[0].reasoning.as_deref(), Some(thought));

    let messages = w
        .store
        .list_messages(w.owner.tenant, run, 0, 100)
        .await
        .expect("messages");
    let said: Vec<(MessageRole, &str)> = messages
        .iter()
        .map(|m| (m.role, m.content.as_str()))
        .collect();
    assert_eq!(
        said,
        vec![
            (MessageRole::User, "hello"),
            (MessageRole::Assistant, answer)
        ]
    );

    // The next turn sends the model its answer, never its reasoning.
    chat.push(ChatResponse::text("again"));
    let cmd = PostMessage {
        content: "and?".into(),
        request_id: None,
        strategy: None,
    };
    w.runs.post_message(&w.owner, run, cmd).await.expect("post");
    w.wait_for(run, "the second turn", |r| {
        r.status == RunStatus::Waiting && r.turn_count == 2
    })
    .await;
    let sent = chat.requests().last().expect("a request").body.to_string();
    assert!(sent.contains(answer), "{sent}");
    assert!(!sent.contains(thought), "the reasoning went back: {sent}");
}

#[tokio::test]
async fn reasoning_content_is_stored_apart_and_never_sent_back() {
    let reply = ScriptedChat::text("Hi there.").with_reasoning("A greeting calls for one.");
    reasoning_is_kept_apart(
        ChatResponse::Reply(reply),
        "A greeting calls for one.",
        "Hi there.",
    )
    .await;
}

#[tokio::test]
async fn think_blocks_are_stored_apart_and_never_sent_back() {
    reasoning_is_kept_apart(
        ChatResponse::text("<think>A greeting calls for one.</think>\n\nHi there."),
        "A greeting calls for one.",
        "Hi there.",
    )
    .await;
}
