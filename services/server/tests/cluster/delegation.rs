//! SIGKILL of a run's owner while a `delegate` call waits on its child (issue 17): the
//! call's intent is in the stream without a result and a delegation is safe to repeat,
//! so the adopter runs it again; the receipt id is the child's `request_id`, so it finds
//! the child rather than starting another, and the parent gets the child's answer.

use crate::support::{DEADLINE, FAST_LEASES, index_of, start_cluster, turn_owner, until, uuid};
use serde_json::{Value, json};

#[tokio::test]
async fn sigkill_mid_delegation_starts_the_child_once_and_the_adopter_gets_its_answer() {
    let (mut cluster, apis) = start_cluster(3, &FAST_LEASES, None).await;
    let api = &apis[0];
    let writer = api.agent(&[("the child's answer", 4_000, false)]).await;
    let tool = api
        .post(
            "/v1/tools",
            json!({"name": "ask_writer", "effect": "read", "timeout_ms": 60_000,
                "input_schema": {"type": "object"},
                "kind": {"kind": "delegate", "agent_id": writer}}),
        )
        .await;
    assert_eq!(tool.status, 201, "{}", tool.body);
    let lead = api
        .post(
            "/v1/agents",
            json!({"name": "lead", "tools": [tool.body["id"]], "provider": {"kind": "scripted",
            "replies": [
                {"tool_calls": [{"name": "ask_writer", "arguments": {"message": "go on"}}]},
                {"content": "relayed"}
            ]}}),
        )
        .await;
    assert_eq!(lead.status, 201, "{}", lead.body);
    let lead = lead.body["id"].as_str().expect("an id").to_string();
    let run = api.run(&lead, Some("start")).await;
    let children_path = format!("/v1/runs?parent_run_id={run}");
    let children = |api: &baton_testkit::Api| {
        let path = children_path.clone();
        let api = api.clone();
        async move {
            let r = api.get(&path).await;
            r.body["items"].as_array().cloned().unwrap_or_default()
        }
    };
    let child = until("the child run", DEADLINE, || async {
        children(api)
            .await
            .first()
            .and_then(|c| c["id"].as_str().map(str::to_string))
    })
    .await;

    let owner = turn_owner(&cluster, uuid(&run)).await;
    let victim = index_of(&owner);
    cluster.sigkill(victim).expect("sigkill");
    let survivor = &apis[(victim + 1) % 3];
    let done = survivor.wait_status(&run, "waiting").await;
    assert!(done.get("last_error").is_none(), "{done}");

    // One child, the first; its answer relayed to the parent's model.
    let kids = children(survivor).await;
    let ids: Vec<&str> = kids.iter().filter_map(|k| k["id"].as_str()).collect();
    assert_eq!(ids, [child.as_str()], "the child was started once");
    let results: Vec<Value> = survivor
        .events(&run)
        .await
        .into_iter()
        .filter(|e| e["type"] == "tool.result")
        .collect();
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(results[0]["data"]["output"], "the child's answer");
    assert_eq!(results[0]["data"]["delegated_run"], child.as_str());
    let last = survivor.messages(&run).await.pop().unwrap_or(Value::Null);
    assert_eq!(last["content"], "relayed");
    for r in [&run, &child] {
        cluster
            .check_run_invariants(uuid(r))
            .await
            .expect("invariants");
    }
    cluster.stop().await.expect("stop");
}
