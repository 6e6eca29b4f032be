//! `/metrics` serves Prometheus text with Baton's metrics, named by convention, and they
//! move with the work: requests, appends, leases, SSE streams, pools, the bus, model and
//! tool calls, checkpoints.

use baton_server::app;
use baton_server::config::Config;
use baton_testkit::chat::{ChatResponse, ChatServer, ScriptedChat};
use baton_testkit::{Api, Behaviour, ToolServer};
use serde_json::json;
use std::time::Duration;

/// The value of the first sample line of `name` whose labels contain every `labels` part.
fn sample(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .find(|l| labels.iter().all(|part| l.contains(part)))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test]
async fn metrics_follow_prometheus_conventions_and_move_with_the_work() {
    let dir = tempfile::tempdir().expect("tempdir");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let mut config = Config::embedded(dir.path());
    config.cluster.renew_every = Duration::from_millis(100);
    let running = app::start(&config, listener).await.expect("app");
    let base = format!("http://{}", running.addr);
    let http = baton_testkit::http_client();
    let api = Api::new(&base, None);
    // A turn that calls a tool which fails, then answers; the next turn's model call
    // finds the script exhausted and fails: model and tool calls, their errors and a
    // checkpoint all get recorded.
    let tools = ToolServer::start().await;
    tools.set(
        "lookup",
        Behaviour {
            status: 500,
            ..Behaviour::default()
        },
    );
    let tool = api
        .post(
            "/v1/tools",
            json!({"name": "lookup", "description": "Looks things up", "effect": "read",
                   "input_schema": {"type": "object"},
                   "kind": {"kind": "http", "url": tools.url("lookup")}}),
        )
        .await;
    assert_eq!(tool.status, 201, "{}", tool.body);
    let agent = api
        .post(
            "/v1/agents",
            json!({"name": "metered", "tools": [tool.body["id"]],
                   "provider": {"kind": "scripted", "replies": [
                       {"tool_calls": [{"name": "lookup", "arguments": {}}]},
                       {"content": "nothing found"}]}}),
        )
        .await;
    assert_eq!(agent.status, 201, "{}", agent.body);
    let agent = agent.body["id"].as_str().expect("agent id").to_string();
    let run_id = api.run(&agent, Some("hello")).await;
    api.wait_status(&run_id, "waiting").await;
    api.message_when_idle(&run_id, "again").await;
    // A model server that reports token usage.
    let chat = ChatServer::start().await;
    chat.push(ChatResponse::Reply(
        ScriptedChat::text("counted").with_usage(12, 7),
    ));
    let counted = api
        .post(
            "/v1/agents",
            json!({"name": "counted", "provider": {"kind": "openai",
                   "base_url": chat.base_url(), "model": "gpt-test", "max_retries": 0}}),
        )
        .await;
    assert_eq!(counted.status, 201, "{}", counted.body);
    let counted_run = api
        .run(counted.body["id"].as_str().expect("agent id"), Some("hi"))
        .await;
    api.wait_status(&counted_run, "waiting").await;
    // An open SSE stream counts as a subscriber while it lasts.
    let sse = http
        .get(format!("{base}/v1/runs/{run_id}/events"))
        .header("accept", "text/event-stream")
        .send()
        .await
        .expect("sse");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let text = loop {
        let res = http
            .get(format!("{base}/metrics"))
            .send()
            .await
            .expect("scrape");
        assert_eq!(res.status(), 200);
        let ctype = res.headers()["content-type"]
            .to_str()
            .unwrap_or("")
            .to_string();
        assert!(ctype.starts_with("text/plain"), "{ctype}");
        let text = res.text().await.expect("text");
        let done = sample(&text, "baton_lease_claims_total", &["reason=\"new\""]) >= Some(1.0)
            && sample(&text, "baton_leases_held", &[]).is_some()
            && sample(&text, "baton_model_call_errors_total", &[]).is_some()
            && sample(&text, "baton_checkpoint_size_bytes_count", &[]) >= Some(1.0)
            && sample(&text, "baton_runs_active", &["status=\"waiting\""]) >= Some(2.0);
        if done || tokio::time::Instant::now() > deadline {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let route = "route=\"/v1/runs\"";
    assert!(
        sample(
            &text,
            "baton_http_request_duration_seconds_count",
            &[route, "status=\"201\"", "method=\"POST\""]
        ) >= Some(1.0),
        "HTTP histogram by route and status:\n{text}"
    );
    assert!(
        text.contains("baton_http_request_duration_seconds_bucket{"),
        "a real histogram"
    );
    assert!(text.contains("# TYPE baton_http_request_duration_seconds histogram"));
    assert!(sample(&text, "baton_event_append_duration_seconds_count", &[]) >= Some(2.0));
    assert!(sample(&text, "baton_events_appended_total", &[]) >= Some(5.0));
    assert!(sample(&text, "baton_lease_claims_total", &["reason=\"new\""]) >= Some(1.0));
    assert!(
        sample(&text, "baton_sse_subscribers", &[]) >= Some(1.0),
        "{text}"
    );
    assert!(sample(&text, "baton_db_pool_max_connections", &["pool=\"app\""]) >= Some(1.0));
    assert!(sample(&text, "baton_db_pool_connections", &["state=\"idle\""]).is_some());
    assert!(sample(&text, "baton_db_pool_wait_seconds_count", &["pool=\"app\""]) >= Some(1.0));
    assert!(sample(&text, "baton_bus_lag_seconds_count", &[]) >= Some(1.0));
    let scripted = "provider=\"scripted\"";
    assert!(
        sample(
            &text,
            "baton_model_call_duration_seconds_count",
            &[scripted, "outcome=\"ok\""]
        ) >= Some(2.0)
    );
    assert!(
        sample(
            &text,
            "baton_model_call_errors_total",
            &[scripted, "code=\"script_exhausted\""]
        ) >= Some(1.0),
        "{text}"
    );
    let read = "effect=\"read\"";
    assert!(
        sample(
            &text,
            "baton_tool_call_duration_seconds_count",
            &[read, "outcome=\"error\""]
        ) >= Some(1.0),
        "{text}"
    );
    assert!(sample(&text, "baton_tool_call_errors_total", &[read]) >= Some(1.0));
    assert!(
        text.contains("baton_checkpoint_size_bytes_bucket{"),
        "{text}"
    );
    // Runs by status and uncertain calls, from the database; turns; tool and model calls.
    assert_eq!(
        sample(&text, "baton_runs_active", &["status=\"waiting\""]),
        Some(2.0),
        "{text}"
    );
    for status in ["queued", "running", "requires_action"] {
        let label = format!("status=\"{status}\"");
        assert_eq!(sample(&text, "baton_runs_active", &[&label]), Some(0.0));
    }
    assert_eq!(sample(&text, "baton_receipts_uncertain", &[]), Some(0.0));
    assert_eq!(sample(&text, "baton_turns_started_total", &[]), Some(3.0));
    assert_eq!(sample(&text, "baton_turns_completed_total", &[]), Some(2.0));
    assert_eq!(
        sample(
            &text,
            "baton_turns_failed_total",
            &["reason=\"script_exhausted\""]
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "baton_tool_calls_total", &["kind=\"http\""]),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            "baton_tool_call_outcomes_total",
            &["source=\"baton\"", "outcome=\"error\""]
        ),
        Some(1.0)
    );
    let calls = |model: &str, outcome: &str| {
        let (model, outcome) = (
            format!("model=\"{model}\""),
            format!("outcome=\"{outcome}\""),
        );
        sample(&text, "baton_model_calls_total", &[&model, &outcome])
    };
    assert_eq!(calls("scripted", "ok"), Some(2.0), "{text}");
    assert_eq!(calls("scripted", "error"), Some(1.0));
    assert_eq!(calls("gpt-test", "ok"), Some(1.0));
    let tokens = |direction: &str| {
        let direction = format!("direction=\"{direction}\"");
        let labels = ["provider=\"openai\"", "model=\"gpt-test\"", &direction];
        sample(&text, "baton_model_tokens_total", &labels)
    };
    assert_eq!(tokens("input"), Some(12.0), "{text}");
    assert_eq!(tokens("output"), Some(7.0));
    // The process's own figures, under Prometheus's standard names (CPU in whole seconds:
    // this short test may not have used one yet).
    assert!(sample(&text, "process_cpu_seconds_total", &[]).is_some());
    for name in [
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_start_time_seconds",
    ] {
        assert!(sample(&text, name, &[]) > Some(0.0), "{name}:\n{text}");
    }
    assert_eq!(
        sample(&text, "baton_build_info", &["version=\""]),
        Some(1.0),
        "{text}"
    );
    // Rare events are scraped at zero before they first happen.
    for rare in [
        "baton_appends_fenced_total",
        "baton_lease_handoffs_total",
        "baton_sse_closed_slow_total",
        "baton_bus_publish_failures_total",
    ] {
        assert_eq!(sample(&text, rare, &[]), Some(0.0), "{rare}");
    }
    assert!(sample(&text, "baton_lease_claims_total", &["reason=\"adopted\""]).is_some());
    assert!(
        text.contains("# HELP baton_events_appended_total Durable events appended."),
        "described"
    );
    for line in text.lines().filter(|l| l.starts_with("# TYPE ")) {
        let mut parts = line.split_whitespace().skip(2);
        let (name, kind) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        assert!(
            name.starts_with("baton_") || name.starts_with("process_"),
            "namespaced: {line}"
        );
        if kind == "counter" {
            assert!(name.ends_with("_total"), "counters end in _total: {line}");
        }
        if kind == "histogram" {
            assert!(
                name.ends_with("_seconds") || name.ends_with("_bytes"),
                "durations in seconds, sizes in bytes: {line}"
            );
        }
    }
    check_with_promtool(&text);
    // Every series the chart's alerts and dashboard query is exported.
    let exported: std::collections::BTreeSet<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    for series in queried_by_the_chart() {
        assert!(
            exported.contains(series.as_str()),
            "{series} is queried by helm/baton/files but not exported:\n{text}"
        );
    }
    drop(sse);
    running.shutdown().await.expect("shutdown");
}

/// The workspace's root.
fn root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `promtool check metrics` (Prometheus's naming lint) over a scrape; promtool comes from
/// `scripts/chart-tools`, like the chart tests' tools.
fn check_with_promtool(text: &str) {
    use std::io::Write;
    let promtool = baton_testkit::chart_tool("promtool");
    let mut child = std::process::Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write the scrape");
    let out = child.wait_with_output().expect("promtool ends");
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The series the chart's alert rules and Grafana dashboard query.
fn queried_by_the_chart() -> std::collections::BTreeSet<String> {
    let files = root().join("helm/baton/files");
    let read = |name: &str| std::fs::read_to_string(files.join(name)).expect("chart file");
    let mut series = baton_testkit::prometheus::series_in(&read("alerts.yaml"));
    let dashboard: serde_json::Value =
        serde_json::from_str(&read("grafana-dashboard.json")).expect("dashboard JSON");
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            series.extend(baton_testkit::prometheus::series_in(
                target["expr"].as_str().expect("expr"),
            ));
        }
    }
    assert!(series.len() > 15, "{series:?}");
    series
}
