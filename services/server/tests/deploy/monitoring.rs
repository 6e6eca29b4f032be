//! What the chart gives Prometheus and Grafana: the alert rules pass `promtool check rules`
//! as the chart renders them, and `promtool test rules` shows each alert firing on the
//! series Baton exports and quiet on a healthy installation
//! (`tests/deploy/prometheus/alerts.test.yaml`); the dashboard is valid JSON whose every
//! panel queries series the documentation lists. (`services/server/tests/metrics.rs`
//! checks that a running replica exports every series the alerts and the dashboard use, and
//! that its `/metrics` passes `promtool check metrics`.)

use crate::render::value_set;
use crate::tools::{read, root, text, tools};
use baton_testkit::prometheus::series_in;
use serde_json::Value;
use std::collections::BTreeSet;

#[test]
fn the_alerts_check_and_fire_on_baton_series_and_the_dashboard_queries_documented_ones() {
    let tools = tools();
    let r = tools.render(&value_set("service-monitor"));

    // The rules as the chart renders them.
    let rule = r.one("PrometheusRule");
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(rule["metadata"]["labels"]["release"], "prom");
    let rendered = tools.scratch().join("rendered-rules.json");
    std::fs::write(&rendered, rule["spec"].to_string()).expect("write rules");
    let out = tools.promtool(tools.scratch(), &["check", "rules", "rendered-rules.json"]);
    assert!(out.status.success(), "promtool check rules: {}", text(&out));
    let alerts: Vec<&str> = rule["spec"]["groups"][0]["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .filter_map(|r| r["alert"].as_str())
        .collect();
    assert_eq!(
        alerts,
        [
            "BatonRunsStuck",
            "BatonToolCallsUncertain",
            "BatonAdoptionSpike",
            "BatonBusLag",
            "BatonHttpErrors"
        ]
    );

    // Each alert fires when it should and not before.
    let tests = root().join("services/server/tests/deploy/prometheus");
    let out = tools.promtool(&tests, &["test", "rules", "alerts.test.yaml"]);
    assert!(out.status.success(), "promtool test rules: {}", text(&out));

    // The dashboard, as the chart ships it.
    let cm = r
        .all("ConfigMap")
        .into_iter()
        .find(|cm| cm["metadata"]["labels"]["grafana_dashboard"] == "1")
        .expect("the dashboard's ConfigMap");
    let json = cm["data"]["baton.json"].as_str().expect("baton.json");
    let dashboard: Value = serde_json::from_str(json).expect("the dashboard is JSON");
    assert_eq!(dashboard["uid"], "baton-overview");
    let panels = dashboard["panels"].as_array().expect("panels");
    assert!(panels.len() >= 12, "{} panels", panels.len());
    let mut queried = BTreeSet::new();
    for panel in panels {
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{panel}");
        for t in targets {
            let expr = t["expr"].as_str().expect("expr");
            queried.extend(series_in(expr));
        }
    }
    for rule in rule["spec"]["groups"][0]["rules"]
        .as_array()
        .expect("rules")
    {
        queried.extend(series_in(rule["expr"].as_str().expect("expr")));
    }
    let documented = read("docs/architecture.md");
    for series in &queried {
        assert!(
            documented.contains(&format!("`{series}")),
            "{series} is queried but not in docs/architecture.md's metrics table"
        );
    }
    for needed in [
        "baton_runs_active",
        "baton_model_tokens_total",
        "process_cpu_seconds_total",
    ] {
        assert!(queried.contains(needed), "{needed} on the dashboard");
    }
}
