//! Workspace commands across replicas (issue 14): SIGKILL of the run's owner while a
//! `shell` command runs in its sandbox. Nothing of the command lands (its partial writes
//! were in its private copy), the adopter runs the network-less command again, and its
//! files land once, with one result.

use crate::support::{DEADLINE, FAST_LEASES, index_of, start_cluster, turn_owner, until, uuid};
use serde_json::json;

#[tokio::test]
async fn sigkill_mid_command_lands_nothing_and_the_adopter_runs_it_again_once() {
    let (mut cluster, apis) = start_cluster(3, &FAST_LEASES, None).await;
    let api = &apis[0];
    let tool = api
        .post(
            "/v1/tools",
            json!({"name": "shell", "effect": "mutation", "input_schema": {},
                   "timeout_ms": 60_000, "kind": {"kind": "workspace", "op": "shell"}}),
        )
        .await;
    assert_eq!(tool.status, 201, "{}", tool.body);
    let tool = tool.body["id"].as_str().unwrap_or_default().to_string();
    // Half its work, a pause the kill lands in, the rest.
    let command = "echo half > half.txt; sleep 3.0173; echo whole > whole.txt; seq 3 >> n.txt";
    let agent = api
        .post(
            "/v1/agents",
            json!({"name": "coder", "tools": [tool], "provider": {"kind": "scripted", "replies": [
                {"tool_calls": [{"name": "shell", "arguments": {"command": command}}]},
                {"content": "done"}]}}),
        )
        .await;
    assert_eq!(agent.status, 201, "{}", agent.body);
    let agent = agent.body["id"].as_str().unwrap_or_default().to_string();
    let run = api.run(&agent, Some("go")).await;
    until("the command to run", DEADLINE, || async {
        baton_testkit::process_running("sleep 3.0173").then_some(())
    })
    .await;
    let victim = index_of(&turn_owner(&cluster, uuid(&run)).await);
    cluster.sigkill(victim).expect("sigkill");
    let survivor = &apis[(victim + 1) % 3];
    let files = survivor.get(&format!("/v1/runs/{run}/files")).await;
    assert_eq!(
        files.body["items"],
        json!([]),
        "nothing of the cut command landed"
    );

    let done = survivor.wait_status(&run, "waiting").await;
    assert!(done.get("last_error").is_none(), "{done}");
    let files = survivor.get(&format!("/v1/runs/{run}/files")).await;
    let paths: Vec<&str> = files.body["items"]
        .as_array()
        .map(|items| items.iter().filter_map(|f| f["path"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(paths, ["half.txt", "n.txt", "whole.txt"], "{}", files.body);
    let counted = survivor.get(&format!("/v1/runs/{run}/files/n.txt")).await;
    assert_eq!(
        counted.body,
        json!("1\n2\n3\n"),
        "the command's files landed once"
    );
    let events = survivor
        .get(&format!("/v1/runs/{run}/events?limit=500"))
        .await;
    let types: Vec<&str> = events.body["events"]
        .as_array()
        .map(|e| e.iter().filter_map(|e| e["type"].as_str()).collect())
        .unwrap_or_default();
    let count = |t: &str| types.iter().filter(|x| **x == t).count();
    assert_eq!(
        (
            count("tool.intent"),
            count("tool.result"),
            count("workspace.changed")
        ),
        (1, 1, 1),
        "{types:?}"
    );
    cluster.stop().await.expect("stop");
}
