//! MCP tool calls across replicas (issue 15): three real `baton` processes call a real
//! MCP server from the official Python SDK, which logs every execution. SIGKILL of the
//! run's owner while a mutation's `tools/call` is in flight: the adopter holds the call
//! `uncertain` and the server executed it once, though the server annotates the tool
//! read-only (an admin enabled it as a mutation). The same tool enabled as a read: the
//! adopter calls it again, and the run goes on with its answer.

use crate::support::{
    DEADLINE, FAST_LEASES, client, held_uncertain, index_of, start_cluster, turn_owner, until, uuid,
};
use baton_testkit::{Api, McpOptions, McpTestServer};
use serde_json::json;
use std::path::Path;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// Registers `url` as server `name`, discovers it and enables its `slow` tool as
/// `tool` with `effect`; the Baton tool's id.
async fn slow_tool(api: &Api, name: &str, url: &str, tool: &str, effect: &str) -> String {
    let made = api
        .post("/v1/mcp-servers", json!({"name": name, "url": url}))
        .await;
    assert_eq!(made.status, 201, "{}", made.body);
    let id = made.body["id"].as_str().unwrap_or_default().to_string();
    let found = api
        .post(&format!("/v1/mcp-servers/{id}/discover"), json!({}))
        .await;
    assert_eq!(found.status, 200, "{}", found.body);
    let listed = found.body["discovery"]["tools"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let slow = listed
        .iter()
        .find(|t| t["name"] == "slow")
        .expect("slow listed");
    // The server claims it only reads: the admin's effect decides.
    assert_eq!(slow["annotations"]["readOnlyHint"], true, "{slow}");
    let enabled = api
        .post(
            &format!("/v1/mcp-servers/{id}/tools/slow/enable"),
            json!({"name": tool, "effect": effect, "timeout_ms": 120_000}),
        )
        .await;
    assert_eq!(enabled.status, 200, "{}", enabled.body);
    enabled.body["id"].as_str().unwrap_or_default().to_string()
}

/// An agent calling `tool` for `seconds`, then saying "done"; its id.
async fn caller(api: &Api, tool_id: &str, tool: &str, seconds: u64) -> String {
    let agent = api
        .post(
            "/v1/agents",
            json!({"name": format!("{tool}-caller"), "tools": [tool_id],
                   "provider": {"kind": "scripted", "replies": [
                       {"tool_calls": [{"name": tool, "arguments": {"seconds": seconds}}]},
                       {"content": "done"}]}}),
        )
        .await;
    assert_eq!(agent.status, 201, "{}", agent.body);
    agent.body["id"].as_str().unwrap_or_default().to_string()
}

/// How many executions of `slow` the server started.
fn started(srv: &McpTestServer) -> usize {
    srv.executions()
        .iter()
        .filter(|e| e.tool == "slow" && e.event == "started")
        .count()
}

#[tokio::test]
async fn sigkill_mid_call_holds_a_mutation_uncertain_and_calls_a_read_again() {
    let Some(srv) = McpTestServer::start(Path::new(ROOT), McpOptions::default()).await else {
        return;
    };
    let (mut cluster, apis) = start_cluster(3, &FAST_LEASES, None).await;
    let api = &apis[0];
    let charge = slow_tool(api, "payments", &srv.url(), "slow_charge", "mutation").await;
    let read = slow_tool(api, "lookups", &srv.url(), "slow_read", "read").await;

    // A mutation cut off mid-call.
    let payer = caller(api, &charge, "slow_charge", 60).await;
    let run = api.run(&payer, Some("pay")).await;
    let srv_ref = &srv;
    until(
        "the server to start the mutation",
        DEADLINE,
        || async move { (started(srv_ref) == 1).then_some(()) },
    )
    .await;
    let victim = index_of(&turn_owner(&cluster, uuid(&run)).await);
    cluster.sigkill(victim).expect("sigkill");
    let survivor = &apis[(victim + 1) % 3];
    let held = held_uncertain(survivor, &run).await;
    assert_eq!(held["kind"], "mcp", "{held}");
    let summary = survivor.summary(&run).await;
    assert_eq!(summary["status"], "requires_action", "{summary}");
    assert_eq!(
        started(&srv),
        1,
        "the adopter did not call the mutation again"
    );
    let made: Vec<_> = srv
        .executions()
        .into_iter()
        .filter(|e| e.event == "started")
        .collect();
    assert_eq!(
        made[0].idempotency_key_meta.as_deref(),
        held["id"].as_str(),
        "the receipt id went as the idempotency key"
    );
    cluster.restart(victim).await.expect("restart");

    // A read cut off mid-call is made again by the adopter.
    let key = apis[0].token.clone().expect("the owner's key");
    let apis: Vec<Api> = (0..3).map(|i| client(&cluster, i, &key)).collect();
    let reader = caller(&apis[victim], &read, "slow_read", 2).await;
    let run = apis[victim].run(&reader, Some("look")).await;
    until("the server to start the read", DEADLINE, || async move {
        (started(srv_ref) == 2).then_some(())
    })
    .await;
    let victim = index_of(&turn_owner(&cluster, uuid(&run)).await);
    cluster.sigkill(victim).expect("sigkill");
    let survivor = &apis[(victim + 1) % 3];
    let done = survivor.wait_status(&run, "waiting").await;
    assert!(done.get("last_error").is_none(), "{done}");
    assert_eq!(started(&srv), 3, "the read was called again, once");
    let receipts = survivor.get(&format!("/v1/runs/{run}/receipts")).await;
    let states: Vec<&str> = receipts.body["items"]
        .as_array()
        .map(|items| items.iter().filter_map(|r| r["state"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(states, ["ok"], "{}", receipts.body);
    cluster.stop().await.expect("stop");
}
