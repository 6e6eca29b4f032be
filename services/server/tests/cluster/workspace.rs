//! Workspace commands across replicas (issue 14): SIGKILL of the run's owner while a
//! `shell` command runs in its sandbox. Nothing of the command lands (its partial writes
//! were in its private copy), the adopter runs the network-less command again, and its
//! files land once, with one result; a command with network (an environment that
//! allows it) is held `uncertain` instead, having reached the outside once. A networked
//! command reaches only what the egress policy admits, through the proxy alone.

use crate::support::{
    DEADLINE, FAST_LEASES, held_uncertain, index_of, start_cluster, turn_owner, until, uuid,
};
use baton_testkit::{Api, ToolServer};
use serde_json::json;

/// The replicas' settings for networked commands: an operator environment `net` that
/// allows network, and loopback admitted by the egress policy (the test's server is on it).
const NETWORKED: [(&str, &str); 2] = [
    ("BATON_WORKSPACES__ENVIRONMENTS__NET__NETWORK", "true"),
    ("BATON_EGRESS__ALLOW_LOOPBACK", "true"),
];

/// A `python` tool in environment `net` and an agent that calls it with `script`, then
/// answers; the agent's id.
async fn networked_agent(api: &Api, script: &str) -> String {
    let tool = api
        .post(
            "/v1/tools",
            json!({"name": "python", "effect": "mutation", "input_schema": {}, "timeout_ms": 60_000,
                   "kind": {"kind": "workspace", "op": "python", "environment": "net"}}),
        )
        .await;
    assert_eq!(tool.status, 201, "{}", tool.body);
    assert_eq!(tool.body["idempotent"], false, "{}", tool.body);
    let tool = tool.body["id"].as_str().unwrap_or_default().to_string();
    let agent = api
        .post(
            "/v1/agents",
            json!({"name": "fetcher", "tools": [tool], "provider": {"kind": "scripted", "replies": [
                {"tool_calls": [{"name": "python", "arguments": {"script": script}}]},
                {"content": "done"}]}}),
        )
        .await;
    assert_eq!(agent.status, 201, "{}", agent.body);
    agent.body["id"].as_str().unwrap_or_default().to_string()
}

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

#[tokio::test]
async fn sigkill_mid_networked_command_holds_it_uncertain_having_called_out_once() {
    let server = ToolServer::start().await;
    let mut env = FAST_LEASES.to_vec();
    env.extend(NETWORKED);
    let (mut cluster, apis) = start_cluster(3, &env, None).await;
    let api = &apis[0];
    let script = format!(
        "import urllib.request, time\n\
         urllib.request.urlopen({:?}, data=b'{{}}', timeout=10).read()\n\
         open('sent.txt', 'w').write('sent')\n\
         time.sleep(3.0179)\n",
        server.url("notify")
    );
    let agent = networked_agent(api, &script).await;
    let run = api.run(&agent, Some("notify them")).await;
    let srv = &server;
    until("the command to call out", DEADLINE, || async move {
        (srv.calls("notify") == 1).then_some(())
    })
    .await;
    let victim = index_of(&turn_owner(&cluster, uuid(&run)).await);
    cluster.sigkill(victim).expect("sigkill");
    let survivor = &apis[(victim + 1) % 3];
    let held = held_uncertain(survivor, &run).await;
    assert_eq!(held["kind"], "workspace", "{held}");
    let summary = survivor.summary(&run).await;
    assert_eq!(summary["status"], "requires_action", "{summary}");
    let files = survivor.get(&format!("/v1/runs/{run}/files")).await;
    assert_eq!(
        files.body["items"],
        json!([]),
        "nothing of the cut command landed"
    );
    // Held, not repeated: the outside was reached once.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert_eq!(server.calls("notify"), 1, "the networked command ran once");
    assert!(
        !baton_testkit::process_running("3.0179"),
        "no sandbox survived its replica"
    );
    cluster.stop().await.expect("stop");
}

#[tokio::test]
async fn a_networked_command_reaches_only_what_the_egress_policy_admits() {
    let server = ToolServer::start().await;
    let (cluster, apis) = start_cluster(1, &NETWORKED, None).await;
    let api = &apis[0];
    let port = url::Url::parse(&server.url("x"))
        .ok()
        .and_then(|u| u.port())
        .expect("a port");
    let script = format!(
        "import urllib.request, urllib.error, socket\n\
         def get(u):\n\
         \x20   try:\n\
         \x20       return urllib.request.urlopen(u, data=b'{{}}', timeout=10).read().decode()[:40]\n\
         \x20   except urllib.error.HTTPError as e:\n\
         \x20       return 'HTTP %d %s' % (e.code, e.read().decode().strip())\n\
         \x20   except Exception as e:\n\
         \x20       return 'failed'\n\
         print('admitted:', get({admitted:?}))\n\
         print('metadata:', get('http://169.254.169.254/latest/meta-data'))\n\
         print('private:', get('http://10.11.12.13/'))\n\
         s = socket.socket()\n\
         s.settimeout(3)\n\
         try:\n\
         \x20   s.connect(('127.0.0.1', {port}))\n\
         \x20   print('direct: connected')\n\
         except OSError:\n\
         \x20   print('direct: refused')\n",
        admitted = server.url("probe"),
    );
    let agent = networked_agent(api, &script).await;
    let run = api.run(&agent, Some("look around")).await;
    let done = api.wait_status(&run, "waiting").await;
    assert!(done.get("last_error").is_none(), "{done}");
    let events = api.get(&format!("/v1/runs/{run}/events?limit=100")).await;
    let result = events.body["events"]
        .as_array()
        .and_then(|e| e.iter().find(|e| e["type"] == "tool.result"))
        .cloned()
        .expect("a tool.result");
    let output = result["data"]["output"].as_str().unwrap_or_default();
    assert!(
        output.contains("admitted: {") && output.contains("\"tool\":\"probe\""),
        "the policy admits loopback here: {output}"
    );
    assert!(
        output.contains("metadata: HTTP 403 egress denied: link-local"),
        "{output}"
    );
    assert!(
        output.contains("private: HTTP 403 egress denied: private"),
        "{output}"
    );
    assert!(
        output.contains("direct: refused"),
        "nothing but the proxy leads out: {output}"
    );
    assert_eq!(server.calls("probe"), 1);

    // The tenant's allowlist narrows it: loopback is no longer named.
    let put = api.req(reqwest::Method::PUT, "/v1/egress-allowlist");
    let set = api
        .send(put.json(&json!({"hosts": ["api.example.com"]})))
        .await;
    assert_eq!(set.status, 200, "{}", set.body);
    let run = api.run(&agent, Some("look again")).await;
    api.wait_status(&run, "waiting").await;
    let events = api.get(&format!("/v1/runs/{run}/events?limit=100")).await;
    let output = events.body["events"]
        .as_array()
        .and_then(|e| e.iter().find(|e| e["type"] == "tool.result"))
        .and_then(|r| r["data"]["output"].as_str().map(str::to_string))
        .unwrap_or_default();
    assert!(
        output.contains("admitted: HTTP 403 egress denied: not in the tenant's egress allowlist"),
        "{output}"
    );
    assert_eq!(server.calls("probe"), 1);
    cluster.stop().await.expect("stop");
}
