//! SIGKILL of a run's owner while a mutation is in flight: the call's intent is in the
//! stream without a result, so the replica that adopts the run holds it as uncertain
//! instead of calling again; a member completes it and the turn finishes. SIGTERM
//! instead: the draining owner keeps its lease alive while the call outlasts the lease
//! TTL, records the result and hands the run off, so nothing is uncertain. The tool
//! endpoint (in this test process) counts every request it received.

use crate::support::{
    ADOPT_INTERVAL_MS, DEADLINE, FAST_LEASES, LEASE_TTL_MS, RENEW_INTERVAL_MS, SCHEDULING_MARGIN,
    held_uncertain, index_of, start_cluster, turn_owner, until, uuid,
};
use baton_testkit::{Api, Behaviour, ToolServer};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

#[tokio::test]
async fn sigkill_mid_mutation_holds_the_call_uncertain_and_never_repeats_it() {
    let (mut cluster, apis) = start_cluster(3, &FAST_LEASES, None).await;
    let tools = ToolServer::start().await;
    tools.set(
        "charge",
        Behaviour {
            delay: Duration::from_secs(120),
            ..Behaviour::default()
        },
    );
    let api = &apis[0];
    let agent = payer(api, &tools).await;
    let run = api.run(&agent, Some("pay")).await;
    let run_id = uuid(&run);
    let tools_ref = &tools;
    until("the owner to call the tool", DEADLINE, || async move {
        (tools_ref.calls("charge") == 1).then_some(())
    })
    .await;

    let owner = turn_owner(&cluster, run_id).await;
    let victim = index_of(&owner);
    cluster.sigkill(victim).expect("sigkill");
    let killed = Instant::now();
    let survivor = &apis[(victim + 1) % 3];
    let held = held_uncertain(survivor, &run).await;
    let took = killed.elapsed();
    eprintln!("SIGKILL mid-mutation: the adopter held the call uncertain {took:?} after the kill");
    assert!(
        took <= Duration::from_millis(2000 + 250) + SCHEDULING_MARGIN,
        "took {took:?}"
    );
    let summary = survivor.summary(&run).await;
    assert_eq!(summary["status"], "requires_action", "{summary}");
    assert_eq!(tools.calls("charge"), 1, "the adopter did not call again");

    let receipt = held["id"].as_str().unwrap_or_default();
    let resolved = survivor
        .post(
            &format!("/v1/runs/{run}/receipts/{receipt}/resolve"),
            json!({"resolution": "complete", "output": "charged once (checked by hand)"}),
        )
        .await;
    assert_eq!(resolved.status, 200, "{}", resolved.body);
    assert_eq!(resolved.body["state"], "completed");
    let done = survivor.wait_status(&run, "waiting").await;
    assert!(done.get("last_error").is_none(), "{done}");
    let last = survivor.messages(&run).await.pop().unwrap_or(Value::Null);
    assert_eq!(last["content"], "paid");
    assert_eq!(tools.calls("charge"), 1, "no mutation ran twice");
    cluster.stop().await.expect("stop");
}

#[tokio::test]
async fn sigterm_mid_mutation_finishes_the_call_before_handing_the_run_off() {
    const CALL: Duration = Duration::from_secs(4);
    let (mut cluster, apis) = start_cluster(
        2,
        &[
            (LEASE_TTL_MS, "1500"),
            (RENEW_INTERVAL_MS, "300"),
            (ADOPT_INTERVAL_MS, "250"),
        ],
        None,
    )
    .await;
    let tools = ToolServer::start().await;
    tools.set(
        "charge",
        Behaviour {
            delay: CALL,
            ..Behaviour::default()
        },
    );
    let api = &apis[0];
    let agent = payer(api, &tools).await;
    let run = api.run(&agent, Some("pay")).await;
    let run_id = uuid(&run);
    let tools_ref = &tools;
    until("the owner to call the tool", DEADLINE, || async move {
        (tools_ref.calls("charge") == 1).then_some(())
    })
    .await;

    // The call outlasts the lease TTL by far: only renewal during the drain keeps the
    // other replica from adopting the run mid-call.
    let owner = turn_owner(&cluster, run_id).await;
    let victim = index_of(&owner);
    cluster.sigterm(victim).expect("sigterm");
    let survivor = &apis[1 - victim];
    let done = survivor.wait_status(&run, "waiting").await;
    assert!(done.get("last_error").is_none(), "{done}");
    let receipts = survivor.get(&format!("/v1/runs/{run}/receipts")).await;
    let states: Vec<&str> = receipts.body["items"]
        .as_array()
        .map(|items| items.iter().filter_map(|r| r["state"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(states, ["ok"], "{}", receipts.body);
    let last = survivor.messages(&run).await.pop().unwrap_or(Value::Null);
    assert_eq!(last["content"], "paid");
    assert_eq!(tools.calls("charge"), 1, "no mutation ran twice");
    let events = survivor.events(&run).await;
    let writers: Vec<(&str, &str)> = events
        .iter()
        .filter_map(|e| Some((e["type"].as_str()?, e["meta"]["replica"].as_str()?)))
        .collect();
    let result_writer = writers
        .iter()
        .find(|(t, _)| *t == "tool.result")
        .map(|(_, w)| *w);
    assert_eq!(
        result_writer.map(index_of),
        Some(victim),
        "the draining owner recorded the result: {writers:?}"
    );
    let exited = cluster
        .wait_exit(victim, DEADLINE)
        .await
        .expect("the owner exits after its drain");
    assert!(exited.success(), "{exited:?}");
    cluster.stop().await.expect("stop");
}

/// An agent whose first reply calls the `charge` mutation on `tools` and whose second
/// says "paid"; returns its id.
async fn payer(api: &Api, tools: &ToolServer) -> String {
    let tool = api
        .post(
            "/v1/tools",
            json!({"name": "charge", "input_schema": {}, "effect": "mutation",
                   "kind": {"kind": "http", "url": tools.url("charge")}}),
        )
        .await;
    assert_eq!(tool.status, 201, "{}", tool.body);
    let agent = api
        .post(
            "/v1/agents",
            json!({"name": "payer", "tools": [tool.body["id"]],
                   "provider": {"kind": "scripted", "replies": [
                       {"tool_calls": [{"name": "charge", "arguments": {"amount": 3}}]},
                       {"content": "paid"}]}}),
        )
        .await;
    assert_eq!(agent.status, 201, "{}", agent.body);
    agent.body["id"].as_str().unwrap_or_default().to_string()
}
