//! One turn is one trace across replicas (issue 6): a message posted on one replica with
//! the client's `traceparent`, its turn driven to the end by another, and both replicas'
//! spans, exported over OTLP to a local collector, link up in the client's trace: the
//! posting replica's request span is the child of the client's span, and the driving
//! replica's turn steps are children of that request's spans.

use crate::support::{DEADLINE, index_of, start_cluster, until, uuid};
use baton_testkit::chat::{ChatResponse, ChatServer, ScriptedChat};
use baton_testkit::otlp::{Collector, ReceivedSpan};
use baton_testkit::{McpOptions, McpTestServer};
use serde_json::json;
use std::path::Path;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// The client's trace and span.
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

#[tokio::test]
async fn a_turn_posted_on_one_replica_and_driven_on_another_is_one_trace() {
    let collector = Collector::start().await.expect("collector");
    let (mut cluster, apis) = start_cluster(
        2,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint()),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
        None,
    )
    .await;
    const POSTER: usize = 0;
    let poster = cluster.replica(POSTER).name().to_owned();
    let agent = apis[POSTER].agent(&[("done", 2000, true)]).await;
    let run = apis[POSTER].run(&agent, None).await;
    let post = apis[POSTER]
        .req(reqwest::Method::POST, &format!("/v1/runs/{run}/messages"))
        .header("traceparent", format!("00-{TRACE}-{CLIENT_SPAN}-01"))
        .json(&serde_json::json!({"content": "go"}));
    let posted = apis[POSTER].send(post).await;
    assert_eq!(posted.status, 201, "{}", posted.body);

    // The turn must end on the other replica: when the poster took the run, it is
    // stopped (SIGTERM: it hands the run off and sends its last spans) mid-turn.
    let id = uuid(&run);
    let owner = until("the run leased", DEADLINE, || async {
        let leases = cluster.leases(&[id]).await.ok()?;
        leases.into_iter().next()?.owner
    })
    .await;
    let driver = if index_of(&owner) == POSTER {
        until("the turn started", DEADLINE, || async {
            let events = apis[POSTER].events(&run).await;
            events
                .iter()
                .any(|e| e["type"] == "turn.started")
                .then_some(())
        })
        .await;
        cluster.sigterm(POSTER).expect("sigterm");
        1 - POSTER
    } else {
        index_of(&owner)
    };
    let done = apis[driver].wait_status(&run, "completed").await;
    assert_eq!(done["status"], "completed");
    let driver = cluster.replica(driver).name().to_owned();

    let trace = until("both replicas' spans of the turn", DEADLINE, || async {
        let spans: Vec<ReceivedSpan> = collector
            .spans()
            .into_iter()
            .filter(|s| s.trace_id == TRACE)
            .collect();
        let on = |who: &str, name: &str| spans.iter().any(|s| of(s, who) && s.name == name);
        (on(&poster, "POST /v1/runs/{run_id}/messages")
            && on(&driver, "turn step")
            && on(&driver, "chat scripted"))
        .then_some(spans)
    })
    .await;
    let names: Vec<(&str, &str)> = trace
        .iter()
        .map(|s| (s.instance.as_str(), s.name.as_str()))
        .collect();
    let (poster, driver) = (poster.as_str(), driver.as_str());
    eprintln!("trace {TRACE}: {names:?}");

    let request = trace
        .iter()
        .find(|s| of(s, poster) && s.name == "POST /v1/runs/{run_id}/messages")
        .expect("the request span");
    assert_eq!(
        request.parent_span_id, CLIENT_SPAN,
        "the request continues the client's trace"
    );
    let poster_spans: Vec<&str> = trace
        .iter()
        .filter(|s| of(s, poster))
        .map(|s| s.span_id.as_str())
        .collect();
    let driven: Vec<&ReceivedSpan> = trace
        .iter()
        .filter(|s| of(s, driver) && s.name == "turn step")
        .collect();
    for step in &driven {
        assert!(
            poster_spans.contains(&step.parent_span_id.as_str()),
            "{driver}'s turn step {step:?} is a child of a span of {poster}'s request: {names:?}"
        );
    }
    let steps: Vec<&str> = driven.iter().map(|s| s.span_id.as_str()).collect();
    let model = trace
        .iter()
        .find(|s| of(s, driver) && s.name == "chat scripted")
        .expect("the model call");
    assert!(
        steps.contains(&model.parent_span_id.as_str()),
        "the model call is part of a turn step: {names:?}"
    );
    assert_eq!(
        model.attributes.get("gen_ai.system").map(String::as_str),
        Some("scripted")
    );
    // The store work of the request is in the trace too.
    assert!(
        trace
            .iter()
            .any(|s| of(s, poster) && s.name == "store.append"),
        "{names:?}"
    );
    cluster.stop().await.expect("stop");
}

/// Whether `span` was exported by the replica named `replica`: its `service.instance.id`
/// is the name, `/`, and an id of the process.
fn of(span: &ReceivedSpan, replica: &str) -> bool {
    span.instance
        .strip_prefix(replica)
        .and_then(|rest| rest.strip_prefix('/'))
        .is_some_and(|id| id.len() == 32)
}

/// Spans speak OpenTelemetry's conventions: a request's span has `http.request.method`,
/// `http.route`, `http.response.status_code` and the tenant; a model call is `chat
/// <model>` with the `gen_ai.*` attributes of the answer, token usage included.
#[tokio::test]
async fn spans_carry_the_conventional_http_and_gen_ai_attributes() {
    let collector = Collector::start().await.expect("collector");
    let chat = ChatServer::start().await;
    chat.push(ChatResponse::Reply(
        ScriptedChat::text("hello").with_usage(12, 7),
    ));
    let (cluster, apis) = start_cluster(
        1,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint()),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            // The stand-in model server listens on loopback.
            ("BATON_EGRESS__ALLOW_LOOPBACK", "true"),
        ],
        None,
    )
    .await;
    let api = &apis[0];
    let agent = api
        .post(
            "/v1/agents",
            json!({"name": "chatty", "provider": {"kind": "openai",
                   "base_url": chat.base_url(), "model": "gpt-test", "max_retries": 0}}),
        )
        .await;
    assert_eq!(agent.status, 201, "{}", agent.body);
    let me = api.get("/v1/me").await;
    let tenant = me.body["tenants"][0]["tenant_id"]
        .as_str()
        .expect("the key's tenant")
        .to_owned();
    let run = api
        .run(agent.body["id"].as_str().expect("agent id"), Some("hi"))
        .await;
    api.wait_status(&run, "waiting").await;

    let spans = until(
        "the request's and the model call's spans",
        DEADLINE,
        || async {
            let spans = collector.spans();
            let has = |name: &str| spans.iter().any(|s| of(s, "replica-0") && s.name == name);
            (has("POST /v1/runs") && has("chat gpt-test")).then_some(spans)
        },
    )
    .await;
    let request = spans
        .iter()
        .find(|s| s.name == "POST /v1/runs")
        .expect("the request span");
    let attr = |span: &ReceivedSpan, key: &str| span.attributes.get(key).cloned();
    assert_eq!(
        attr(request, "http.request.method").as_deref(),
        Some("POST")
    );
    assert_eq!(attr(request, "http.route").as_deref(), Some("/v1/runs"));
    assert_eq!(
        attr(request, "http.response.status_code").as_deref(),
        Some("201")
    );
    assert_eq!(attr(request, "tenant_id"), Some(tenant));
    assert_eq!(attr(request, "method"), None, "the old names are gone");
    let model = spans
        .iter()
        .find(|s| s.name == "chat gpt-test")
        .expect("the model span");
    for (key, value) in [
        ("gen_ai.operation.name", "chat"),
        ("gen_ai.system", "openai"),
        ("gen_ai.request.model", "gpt-test"),
        ("gen_ai.response.model", "gpt-test"),
        ("gen_ai.response.finish_reasons", "stop"),
        ("gen_ai.usage.input_tokens", "12"),
        ("gen_ai.usage.output_tokens", "7"),
    ] {
        assert_eq!(
            attr(model, key).as_deref(),
            Some(value),
            "{key} in {:?}",
            model.attributes
        );
    }
    cluster.stop().await.expect("stop");
}

/// An MCP tool call is a span of its own, `tool call <name>`, naming the MCP server and
/// the tool's name on it beside the tool's own name.
#[tokio::test]
async fn an_mcp_tool_call_is_a_span_naming_the_server_and_the_tool() {
    let Some(srv) = McpTestServer::start(Path::new(ROOT), McpOptions::default()).await else {
        return;
    };
    let collector = Collector::start().await.expect("collector");
    let (cluster, apis) = start_cluster(
        1,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint()),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
        None,
    )
    .await;
    let api = &apis[0];
    let made = api
        .post(
            "/v1/mcp-servers",
            json!({"name": "lookups", "url": srv.url()}),
        )
        .await;
    assert_eq!(made.status, 201, "{}", made.body);
    let server = made.body["id"].as_str().expect("server id").to_owned();
    let found = api
        .post(&format!("/v1/mcp-servers/{server}/discover"), json!({}))
        .await;
    assert_eq!(found.status, 200, "{}", found.body);
    let tool = api
        .post(
            &format!("/v1/mcp-servers/{server}/tools/lookup/enable"),
            json!({"name": "find", "effect": "read"}),
        )
        .await;
    assert_eq!(tool.status, 200, "{}", tool.body);
    let agent = api
        .post(
            "/v1/agents",
            json!({"name": "finder", "tools": [tool.body["id"]],
                   "provider": {"kind": "scripted", "replies": [
                       {"tool_calls": [{"name": "find", "arguments": {"key": "k"}}]},
                       {"content": "found"}]}}),
        )
        .await;
    assert_eq!(agent.status, 201, "{}", agent.body);
    let run = api
        .run(agent.body["id"].as_str().expect("agent id"), Some("go"))
        .await;
    api.wait_status(&run, "waiting").await;

    let span = until("the MCP call's span", DEADLINE, || async {
        collector
            .spans()
            .into_iter()
            .find(|s| of(s, "replica-0") && s.name == "tool call find")
    })
    .await;
    let attr = |key: &str| span.attributes.get(key).map(String::as_str);
    assert_eq!(attr("mcp.server"), Some("lookups"), "{span:?}");
    assert_eq!(attr("mcp.tool"), Some("lookup"), "{span:?}");
    assert_eq!(attr("gen_ai.tool.name"), Some("find"), "{span:?}");
    assert_eq!(attr("kind"), Some("mcp"), "{span:?}");
    cluster.stop().await.expect("stop");
}
