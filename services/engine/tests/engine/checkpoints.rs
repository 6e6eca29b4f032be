//! Checkpoints: saved after every turn, restored by the next driver of the run, skipped
//! when they do not open (the run is then rebuilt from its events). A local
//! chat-completions server shows what conversation each driver rebuilt.

use crate::world::{KEYRING, World, world};
use baton_core::RunId;
use baton_core::crypto::Aad;
use baton_core::model::RunStatus;
use baton_core::ports::{CheckpointStore, StoredCheckpoint};
use baton_core::runs::PostMessage;
use baton_events::CheckpointId;
use baton_testkit::chat::{ChatResponse, ChatServer};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// A run that answered one turn ("hello" -> "first") and saved its checkpoint.
async fn one_turn(w: &World, chat: &ChatServer) -> RunId {
    let agent = w.openai_agent(chat, false).await;
    chat.push(ChatResponse::text("first"));
    let run = w.start(&w.runs, agent, "hello").await;
    w.wait_status(run, RunStatus::Waiting).await;
    w.settled_types(run).await;
    run
}

async fn next_turn(w: &World, chat: &ChatServer, run: RunId) {
    chat.push(ChatResponse::text("second"));
    let cmd = PostMessage {
        content: "again".into(),
        request_id: None,
        strategy: None,
    };
    w.runs.post_message(&w.owner, run, cmd).await.expect("post");
    w.wait_for(run, "answered again", |r| {
        r.status == RunStatus::Waiting && r.turn_count == 2
    })
    .await;
}

/// The conversation the model was sent in its last request.
fn last_conversation(chat: &ChatServer) -> Vec<(String, String)> {
    let requests = chat.requests();
    let last = requests.last().expect("a model request");
    last.body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap_or("").to_string(),
                m["content"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

#[tokio::test]
async fn every_turn_saves_a_checkpoint_listed_by_its_metadata() {
    let w = world().await;
    let chat = ChatServer::start().await;
    let run = one_turn(&w, &chat).await;
    next_turn(&w, &chat, run).await;
    w.settled_types(run).await;
    let listed = w
        .store
        .list_checkpoints(w.owner.tenant, run)
        .await
        .expect("list");
    assert_eq!(listed.len(), 2);
    let events = w.events(run).await;
    let saved: Vec<&Value> = events
        .iter()
        .filter(|e| e.event_type == "checkpoint.saved")
        .map(|e| &e.data)
        .collect();
    for (meta, event) in listed.iter().zip(saved) {
        assert_eq!(event["checkpoint_id"], json!(meta.id));
        assert_eq!(event["through_version"], meta.through_version);
        assert_eq!(event["sha256"], meta.sha256);
        assert_eq!(meta.key_id, KEYRING.active_id());
    }
}

/// Saves a checkpoint that claims the same version as the newest one but whose
/// conversation starts with a marker message: if a driver restores it, the model sees
/// the marker.
async fn plant_marker(w: &World, run: RunId) {
    let latest = w
        .store
        .latest_checkpoints(w.owner.tenant, run, 1)
        .await
        .expect("latest")
        .remove(0);
    let tenant = w.owner.tenant;
    let plain = KEYRING
        .open(
            &Aad::checkpoint(tenant, run, latest.meta.id),
            &latest.ciphertext,
        )
        .expect("the engine's checkpoint opens");
    let mut snapshot: Value = serde_json::from_slice(&plain).expect("json");
    let conversation = snapshot["state"]["conversation"]
        .as_array_mut()
        .expect("conversation");
    conversation.insert(0, json!({"role": "user", "content": "MARKER"}));
    let plain = serde_json::to_vec(&snapshot).expect("json");
    let id = CheckpointId::new();
    let sealed = KEYRING
        .seal(&Aad::checkpoint(tenant, run, id), &plain)
        .expect("seal");
    let mut meta = latest.meta.clone();
    meta.id = id;
    meta.sha256 = hex::encode(Sha256::digest(&plain));
    meta.size = plain.len() as u64;
    meta.created_at = chrono::Utc::now();
    let planted = StoredCheckpoint {
        meta,
        ciphertext: sealed.bytes,
    };
    w.store
        .save_checkpoint(tenant, run, &planted)
        .await
        .expect("save");
}

#[tokio::test]
async fn the_next_driver_starts_from_the_newest_checkpoint() {
    let w = world().await;
    let chat = ChatServer::start().await;
    let run = one_turn(&w, &chat).await;
    plant_marker(&w, run).await;
    next_turn(&w, &chat, run).await;
    let conversation = last_conversation(&chat);
    assert_eq!(
        conversation.first().map(|(_, c)| c.as_str()),
        Some("MARKER"),
        "restored from the planted checkpoint: {conversation:?}"
    );
}

#[tokio::test]
async fn checkpoints_that_do_not_open_are_skipped_and_the_run_rebuilt_from_events() {
    let w = world().await;
    let chat = ChatServer::start().await;
    let run = one_turn(&w, &chat).await;
    plant_marker(&w, run).await;
    // Every sealed snapshot of the run is damaged, as by a tampered row.
    sqlx::query("UPDATE checkpoints SET ciphertext = randomblob(length(ciphertext))")
        .execute(w.store.pool())
        .await
        .expect("tamper");
    next_turn(&w, &chat, run).await;
    let conversation = last_conversation(&chat);
    let expected = [("user", "hello"), ("assistant", "first"), ("user", "again")];
    let got: Vec<(&str, &str)> = conversation
        .iter()
        .map(|(r, c)| (r.as_str(), c.as_str()))
        .collect();
    assert_eq!(got, expected, "rebuilt from the events alone");
}
