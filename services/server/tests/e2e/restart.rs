//! The embedded tier after a `kill -9`: the next `baton serve` on the same data directory
//! holds its lock, so it knows the leases in the database were the dead process's and
//! adopts their runs at once instead of waiting for them to lapse; and a second process on
//! a data directory that is served is refused. After a SIGTERM during a delegation: the
//! process stops at once rather than waiting on the child, and the next one finishes it.

use crate::child::DebugServer;
use baton_testkit::Api;
use std::time::{Duration, Instant};

/// The embedded tier's lease TTL: without adoption at start, a run waits this long.
const LEASE_TTL: Duration = Duration::from_secs(15);

#[tokio::test]
async fn a_killed_processs_runs_are_adopted_at_once_by_the_next_on_its_data_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut first = DebugServer::start(dir.path()).await;
    let api = Api::new(&first.base, None);
    let agent = api.agent(&[("slow reply", 2_000, false)]).await;
    let run = api.run(&agent, Some("hi")).await;
    api.wait_status(&run, "running").await;
    first.stop_and_read_log(); // SIGKILL, mid-turn: its lease stays in the database

    let restarted = Instant::now();
    let second = DebugServer::start(dir.path()).await;
    let api = Api::new(&second.base, None);
    api.wait_status(&run, "waiting").await;
    let took = restarted.elapsed();
    println!("the killed process's run was finished {took:?} after the restart");
    assert!(
        took < LEASE_TTL / 2,
        "the run waited {took:?} for its lease to lapse"
    );
    let adopted = api
        .events(&run)
        .await
        .into_iter()
        .filter(|e| e["type"] == "lease.acquired")
        .map(|e| e["data"]["reason"].clone())
        .collect::<Vec<_>>();
    assert_eq!(
        adopted.last(),
        Some(&serde_json::json!("adopted")),
        "{adopted:?}"
    );

    // While it serves, another process on the same data directory is refused.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("data"))
        .current_dir(dir.path())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .output()
        .expect("run baton");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a second process served: {said}");
    assert!(
        said.contains("another baton process serves the data directory"),
        "{said}"
    );
    drop(second);
}

#[tokio::test]
async fn a_sigterm_during_a_delegation_stops_at_once_and_the_next_process_finishes_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut first = DebugServer::start(dir.path()).await;
    let api = Api::new(&first.base, None);
    let writer = api.agent(&[("the answer", 12_000, false)]).await;
    let tool = api
        .post(
            "/v1/tools",
            serde_json::json!({"name": "ask_writer", "effect": "read", "timeout_ms": 120_000,
                "input_schema": {"type": "object"},
                "kind": {"kind": "delegate", "agent_id": writer}}),
        )
        .await;
    assert_eq!(tool.status, 201, "{}", tool.body);
    let lead = api
        .post(
            "/v1/agents",
            serde_json::json!({"name": "lead", "tools": [tool.body["id"]],
                "provider": {"kind": "scripted", "replies": [
                    {"tool_calls": [{"name": "ask_writer", "arguments": {"message": "go on"}}]},
                    {"content": "relayed"}]}}),
        )
        .await;
    assert_eq!(lead.status, 201, "{}", lead.body);
    let run = api
        .run(lead.body["id"].as_str().expect("an id"), Some("go"))
        .await;
    let children = format!("/v1/runs?parent_run_id={run}");
    let deadline = Instant::now() + Duration::from_secs(20);
    let child = loop {
        let r = api.get(&children).await;
        if let Some(c) = r.body["items"].as_array().and_then(|i| i.first())
            && c["status"] == "running"
        {
            break c["id"].as_str().expect("an id").to_string();
        }
        assert!(Instant::now() < deadline, "no child ran: {}", r.body);
        tokio::time::sleep(Duration::from_millis(20)).await;
    };

    // The parent waits on a child with 12 s to go: the shutdown does not.
    let took = first
        .terminate(Duration::from_secs(10))
        .await
        .expect("baton stopped within 10 s");
    println!("SIGTERM during a delegation: stopped in {took:?}");
    let second = DebugServer::start(dir.path()).await;
    let api = Api::new(&second.base, None);
    api.wait_status(&run, "waiting").await;
    let kids = api.get(&children).await;
    let ids: Vec<&str> = kids.body["items"]
        .as_array()
        .map(|i| i.iter().filter_map(|c| c["id"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(ids, [child.as_str()], "one child, taken up again");
    let last = api.messages(&run).await.pop().unwrap_or_default();
    assert_eq!(last["content"], "relayed");
    drop(second);
}
