//! The chart's settings against this build's `baton config explain`: every rendered pod's
//! environment is accepted as the team tier with nothing ignored, and the values schema
//! offers only real settings the chart does not set itself. Also [`explain`], which the
//! Dockerfile test uses for the image's environment.

use crate::render::{POD, container, container_env, value_sets};
use crate::tools::{CHART, read, text, tools};
use serde_json::Value;
use std::collections::BTreeMap;
use std::process::Command;

const BATON: &str = env!("CARGO_BIN_EXE_baton");

/// `baton config explain` under `env` only: key -> (value, source).
pub fn explain(env: &BTreeMap<String, String>) -> BTreeMap<String, (String, String)> {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(BATON)
        .args(["config", "explain"])
        .current_dir(dir.path())
        .env_clear()
        .envs(env)
        .output()
        .expect("baton runs");
    assert!(
        out.status.success(),
        "this build refuses the settings {env:?}: {}",
        text(&out)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .skip(1)
        .filter_map(|line| {
            let mut cols = line.split_whitespace();
            let key = cols.next()?.to_owned();
            let value = cols.next()?.to_owned();
            Some((key, (value, cols.collect::<Vec<_>>().join(" "))))
        })
        .collect()
}

#[test]
fn rendered_settings_are_accepted_by_this_baton() {
    let tools = tools();
    for set in value_sets() {
        let r = tools.render(&set);
        let config = r.config_map();
        let env = container_env(r.container(), &config);
        let explained = explain(&env);
        let value = |key: &str| explained.get(key).map(|(v, _)| v.as_str());
        assert_eq!(value("tier"), Some("team"), "{}", set.name);
        assert_eq!(value("auth.required"), Some("true"), "{}", set.name);
        assert_eq!(value("http.listen"), Some("0.0.0.0:8080"), "{}", set.name);
        assert_eq!(value("replica_name"), Some(POD), "{}", set.name);
        assert_eq!(
            value("database.migrate_on_start"),
            Some(if r.all("Job").is_empty() {
                "true"
            } else {
                "false"
            }),
            "{}",
            set.name
        );
        assert_eq!(
            value("http.shutdown_grace_secs").map(str::to_owned),
            config.get("BATON_HTTP__SHUTDOWN_GRACE_SECS").cloned(),
            "{}",
            set.name
        );
        // Every chart setting reached the binary from the environment, none was ignored.
        let from_env = explained
            .values()
            .filter(|(_, source)| source.starts_with("env"))
            .count();
        // One key per variable, but the environments' fields: one map, one key.
        const ENVIRONMENTS: &str = "BATON_WORKSPACES__ENVIRONMENTS__";
        let settings: std::collections::BTreeSet<&str> = env
            .keys()
            .filter(|k| k.starts_with("BATON_"))
            .map(|k| {
                if k.starts_with(ENVIRONMENTS) {
                    ENVIRONMENTS
                } else {
                    k.as_str()
                }
            })
            .collect();
        assert_eq!(from_env, settings.len(), "{}: {explained:?}", set.name);
        if settings.contains(ENVIRONMENTS) {
            let environments = value("workspaces.environments").unwrap_or_default();
            assert!(
                environments.contains("\"fetch\":{") && environments.contains("\"processes\":32"),
                "{}: {environments}",
                set.name
            );
        }
        // The rest are the trace exporter's standard variables, which `serve` reads.
        for other in env.keys().filter(|k| !k.starts_with("BATON_")) {
            assert!(
                ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SERVICE_NAME"].contains(&other.as_str()),
                "{}: {other} is read by nothing",
                set.name
            );
        }
        for job in r.all("Job") {
            let job_env = container_env(container(job), &BTreeMap::new());
            explain(&job_env);
        }
    }
}

#[test]
fn the_schema_offers_only_keys_this_baton_knows_and_the_chart_does_not_set() {
    let schema: Value = serde_json::from_str(&read(&format!("{CHART}/values.schema.json")))
        .expect("values.schema.json");
    let known = explain(&BTreeMap::new());
    let chart_sets = [
        "tier",
        "replica_name",
        "http.listen",
        "auth.required",
        "database.url",
        "database.migrate_on_start",
        "bus.nats_url",
        "crypto.keys_dir",
        "crypto.active_key",
    ];
    let config = &schema["properties"]["config"];
    assert_eq!(config["additionalProperties"], false);
    let mut offered = 0;
    for (name, prop) in config["properties"].as_object().expect("config properties") {
        let keys: Vec<String> = match prop["properties"].as_object() {
            Some(section) => {
                assert_eq!(prop["additionalProperties"], false, "config.{name}");
                section.keys().map(|k| format!("{name}.{k}")).collect()
            }
            None => vec![name.clone()],
        };
        for key in keys {
            assert!(
                known.contains_key(&key),
                "config.{key} is not a baton setting"
            );
            assert!(
                !chart_sets.contains(&key.as_str()),
                "config.{key} is the chart's"
            );
            offered += 1;
        }
    }
    assert!(offered >= 15, "{offered}");
}
