//! `/metrics` serves Prometheus text with Baton's metrics, named by convention, and they
//! move with the work: requests, appends, leases, SSE streams, pools.

use baton_server::app;
use baton_server::config::Config;
use baton_testkit::Api;
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
    let http = reqwest::Client::new();
    let api = Api::new(&base, None);
    let agent = api.agent(&[("hi", 0, false)]).await;
    let run_id = api.run(&agent, Some("hello")).await;
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
        let done = sample(&text, "baton_lease_claims_total", &["reason=\"new\""]).is_some()
            && sample(&text, "baton_leases_held", &[]).is_some();
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
    assert!(
        text.contains("# HELP baton_events_appended_total Durable events appended."),
        "described"
    );
    for line in text.lines().filter(|l| l.starts_with("# TYPE ")) {
        let mut parts = line.split_whitespace().skip(2);
        let (name, kind) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        assert!(name.starts_with("baton_"), "namespaced: {line}");
        if kind == "counter" {
            assert!(name.ends_with("_total"), "counters end in _total: {line}");
        }
        if kind == "histogram" {
            assert!(name.ends_with("_seconds"), "durations in seconds: {line}");
        }
    }
    drop(sse);
    running.shutdown().await.expect("shutdown");
}
