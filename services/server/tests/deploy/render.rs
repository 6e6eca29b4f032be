//! The value sets the chart is rendered with, and the rendered objects as JSON with the
//! lookups the tests share: objects by kind, the pod and its container, the ConfigMap, the
//! environment a container starts with. Lookups panic on a missing shape; the properties the
//! chart promises are asserted by the tests, not here.

use crate::tools::Tools;
use serde_json::{Value, json};
use std::collections::BTreeMap;

pub const DSN_SECRET: &str = "baton-db";
pub const KEYRING_SECRET: &str = "baton-keyring";
/// The pod name the downward API stands in for.
pub const POD: &str = "baton-7d9f8c6b5-x2k4q";

// ---- value sets -------------------------------------------------------------------------

pub struct ValueSet {
    pub name: &'static str,
    pub values: Value,
}

/// The least an install needs: the DSN Secret, a NATS URL and the keyring Secret.
pub fn required() -> Value {
    json!({
        "database": {"existingSecret": {"name": DSN_SECRET}},
        "nats": {"url": "nats://nats.messaging:4222"},
        "encryption": {"existingSecret": KEYRING_SECRET, "activeKey": "k1"},
    })
}

/// `base` with `over` merged in (objects merge, anything else replaces).
pub fn merged(mut base: Value, over: Value) -> Value {
    fn merge(a: &mut Value, b: Value) {
        match (a, b) {
            (Value::Object(a), Value::Object(b)) => {
                for (k, v) in b {
                    merge(a.entry(k).or_insert(Value::Null), v);
                }
            }
            (a, b) => *a = b,
        }
    }
    merge(&mut base, over);
    base
}

pub fn value_sets() -> Vec<ValueSet> {
    vec![
        ValueSet {
            name: "default",
            values: required(),
        },
        ValueSet {
            name: "autoscaling",
            values: merged(
                required(),
                json!({"autoscaling": {"enabled": true, "targetMemoryUtilizationPercentage": 80}}),
            ),
        },
        ValueSet {
            name: "network-policy",
            values: merged(
                required(),
                json!({
                    "nats": {"url": "", "existingSecret": {"name": "baton-nats", "key": "nats-url"}},
                    "networkPolicy": {
                        "enabled": true,
                        "ingressFrom": [{"namespaceSelector": {"matchLabels": {"team": "web"}}}],
                        "egress": [
                            {"to": [{"podSelector": {"matchLabels": {"app": "postgres"}}}],
                             "ports": [{"port": 5432, "protocol": "TCP"}]},
                            {"to": [{"podSelector": {"matchLabels": {"app": "nats"}}}],
                             "ports": [{"port": 4222, "protocol": "TCP"}]}
                        ]
                    }
                }),
            ),
        },
        ValueSet {
            name: "nats-secured",
            values: merged(
                required(),
                json!({
                    "nats": {
                        "auth": {"existingSecret": "baton-nats-auth", "user": "baton",
                                 "passwordKey": "password"},
                        "tls": {"required": true, "existingSecret": "baton-nats-tls",
                                "clientCert": true}
                    },
                    "config": {"bus": {"subject_prefix": "acme-prod"}}
                }),
            ),
        },
        ValueSet {
            name: "nats-creds",
            values: merged(
                required(),
                json!({"nats": {"auth": {"existingSecret": "baton-nats-auth", "credsKey": "baton.creds"}}}),
            ),
        },
        ValueSet {
            name: "service-monitor",
            values: merged(
                required(),
                json!({
                    "metrics": {
                        "serviceMonitor": {"enabled": true, "labels": {"release": "prom"}},
                        "prometheusRule": {"enabled": true, "labels": {"release": "prom"}},
                        "grafanaDashboard": {"enabled": true}
                    },
                    "tracing": {"otlpEndpoint": "http://otel-collector.observability:4317"},
                    "config": {"http": {
                        "allowed_hosts": ["api.example.com"],
                        "allowed_origins": ["https://app.example.com", "https://admin.example.com"],
                        "key_rate_limit": 50
                    }}
                }),
            ),
        },
        ValueSet {
            name: "ingress",
            values: merged(
                required(),
                json!({
                    "ingress": {"enabled": true, "className": "nginx",
                                "host": "api.example.com", "tlsSecretName": "api-tls"},
                    "httpRoute": {"enabled": true, "hostnames": ["api.example.com"],
                                  "parentRefs": [{"name": "eg", "namespace": "envoy-gateway-system"}]},
                    "tests": {"apiKeySecret": {"name": "baton-test-key"}},
                    "config": {"http": {"allowed_hosts": ["api.example.com"]}}
                }),
            ),
        },
        ValueSet {
            name: "code-tools",
            values: merged(
                required(),
                json!({"codeTools": {"enabled": true, "environments": {
                    "data": {"layers": ["/usr/share:/opt/share"], "processes": 32},
                    "fetch": {"network": true, "execute_role": "admin"}
                }}}),
            ),
        },
        ValueSet {
            name: "no-migration-hook",
            values: merged(
                required(),
                json!({
                    "migrations": {"enabled": false},
                    "config": {
                        "http": {"shutdown_grace_secs": 90, "body_limit_bytes": 2_097_152},
                        "database": {"app_pool": 24, "max_connections": 40},
                        "cluster": {"lease_ttl_ms": 20_000}
                    },
                    "podAntiAffinity": "hard",
                    "podDisruptionBudget": {"minAvailable": 2, "maxUnavailable": null}
                }),
            ),
        },
    ]
}

/// The value set called `name`.
pub fn value_set(name: &str) -> ValueSet {
    value_sets()
        .into_iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no value set {name}"))
}

// ---- rendered objects -------------------------------------------------------------------

pub struct Rendered {
    pub name: &'static str,
    pub yaml: String,
    pub objects: Vec<Value>,
}

impl Tools {
    /// `helm template` with `set`, parsed; panics when the chart refuses.
    pub fn render(&self, set: &ValueSet) -> Rendered {
        let yaml = self
            .template(set.name, &set.values)
            .unwrap_or_else(|e| panic!("value set {}: helm template failed: {e}", set.name));
        Rendered {
            name: set.name,
            objects: self.parse_yaml(&yaml),
            yaml,
        }
    }
}

impl Rendered {
    pub fn all(&self, kind: &str) -> Vec<&Value> {
        self.objects.iter().filter(|o| o["kind"] == kind).collect()
    }

    pub fn one(&self, kind: &str) -> &Value {
        let found = self.all(kind);
        assert_eq!(found.len(), 1, "{}: one {kind} expected", self.name);
        found[0]
    }

    pub fn kinds(&self) -> Vec<String> {
        let mut kinds: Vec<String> = self
            .objects
            .iter()
            .map(|o| o["kind"].as_str().expect("kind").to_owned())
            .collect();
        kinds.sort();
        kinds
    }

    /// The settings' ConfigMap (not the Grafana dashboard's).
    pub fn config_map(&self) -> BTreeMap<String, String> {
        let settings: Vec<&Value> = self
            .all("ConfigMap")
            .into_iter()
            .filter(|cm| {
                !cm["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.ends_with("-dashboard"))
            })
            .collect();
        assert_eq!(settings.len(), 1, "{}: one settings ConfigMap", self.name);
        let data = settings[0]["data"].as_object().expect("ConfigMap data");
        data.iter()
            .map(|(k, v)| (k.clone(), v.as_str().expect("string values").to_owned()))
            .collect()
    }

    pub fn deployment(&self) -> &Value {
        self.one("Deployment")
    }

    /// The Deployment's pod template.
    pub fn pod(&self) -> &Value {
        &self.deployment()["spec"]["template"]
    }

    pub fn container(&self) -> &Value {
        container(self.deployment())
    }

    pub fn termination_grace(&self) -> i64 {
        int(
            &self.pod()["spec"]["terminationGracePeriodSeconds"],
            "terminationGracePeriodSeconds",
        )
    }
}

/// The one container of a workload (a Deployment or a Job).
pub fn container(workload: &Value) -> &Value {
    let containers = workload["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("containers");
    assert_eq!(containers.len(), 1, "one container");
    &containers[0]
}

pub fn env_entry<'a>(container: &'a Value, name: &str) -> Option<&'a Value> {
    container["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
}

pub fn int(v: &Value, what: &str) -> i64 {
    v.as_i64()
        .unwrap_or_else(|| panic!("{what}: not an integer: {v}"))
}

/// `selector` (matchLabels) picks a pod with `labels`.
pub fn selects(selector: &Value, labels: &Value) -> bool {
    let selector = selector.as_object().expect("selector labels");
    !selector.is_empty() && selector.iter().all(|(k, v)| &labels[k] == v)
}

/// The environment a container starts with: its ConfigMap (envFrom), then `env`, with
/// Secret references and the downward API filled in by stand-ins.
pub fn container_env(
    container: &Value,
    config_map: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    if container["envFrom"].is_array() {
        env.extend(config_map.clone());
    }
    for e in container["env"].as_array().into_iter().flatten() {
        let name = e["name"].as_str().expect("env name").to_owned();
        let value = if let Some(v) = e["value"].as_str() {
            v.to_owned()
        } else if e["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name" {
            POD.to_owned()
        } else if let Some(secret) = e["valueFrom"]["secretKeyRef"].as_object() {
            match name.as_str() {
                "BATON_DATABASE__URL" => "postgres://baton:s3cret@pg:5432/baton".to_owned(),
                "BATON_BUS__NATS_URL" => "nats://baton:s3cret@nats:4222".to_owned(),
                "BATON_BUS__NATS_PASSWORD" | "BATON_BUS__NATS_TOKEN" => "s3cret".to_owned(),
                "BATON_BUS__NATS_NKEY_SEED" => {
                    "SUAMK2FG4MI6UE3ACF3FK3OIQBCEIEZV7NSWFFEW63UXMRLFM2XLAXK4GY".to_owned()
                }
                other => panic!("unexpected secret variable {other}: {secret:?}"),
            }
        } else {
            panic!("unexpected env entry {e}");
        };
        env.insert(name, value);
    }
    env
}
