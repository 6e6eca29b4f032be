//! The deployment artefacts: the Dockerfile, read carefully (no Docker engine here), and the
//! Helm chart `helm/baton`, linted, rendered for several value sets, validated against the
//! Kubernetes schemas and checked for the properties a rolling upgrade depends on. The
//! settings the chart renders are fed to this build's `baton config explain`, so a key the
//! binary would refuse never ships.
//!
//! Needs `helm` and `kubernetes-validate` from `scripts/chart-tools` (which `scripts/test`
//! runs) in `target/chart-tools/`, or in `$BATON_CHART_TOOLS`.

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BATON: &str = env!("CARGO_BIN_EXE_baton");
/// The oldest version the chart supports (Chart.yaml `kubeVersion`) up to a current one.
const K8S_VERSIONS: [&str; 3] = ["1.27.0", "1.30.0", "1.35.0"];
const RELEASE: &str = "baton";
const NAMESPACE: &str = "agents";
const DSN_SECRET: &str = "baton-db";
const POD: &str = "baton-7d9f8c6b5-x2k4q";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

// ---- tools -----------------------------------------------------------------------------

struct Tools {
    helm: PathBuf,
    validate: PathBuf,
    python: PathBuf,
    home: tempfile::TempDir,
}

fn tools() -> Tools {
    let dir = std::env::var_os("BATON_CHART_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target/chart-tools"));
    let bin = |name: &str| {
        let path = dir.join("bin").join(name);
        assert!(
            path.exists(),
            "{} is missing: run scripts/chart-tools (scripts/test runs it) to install helm and \
             kubernetes-validate into {} (or point BATON_CHART_TOOLS at such a directory)",
            path.display(),
            dir.display()
        );
        path
    };
    Tools {
        helm: bin("helm"),
        validate: bin("kubernetes-validate"),
        python: bin("python"),
        home: tempfile::tempdir().expect("tempdir"),
    }
}

impl Tools {
    /// `helm ARGS`, with its cache and config kept out of the user's home.
    fn helm(&self, args: &[&str]) -> Output {
        let home = self.home.path();
        Command::new(&self.helm)
            .args(args)
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_DATA_HOME", home.join("data"))
            .output()
            .expect("helm runs")
    }

    /// Writes `values` (JSON is YAML) and returns the `-f FILE` arguments for it.
    fn values_args(&self, name: &str, values: &Value) -> Vec<String> {
        let path = self.home.path().join(format!("{name}.values.yaml"));
        std::fs::write(&path, values.to_string()).expect("write values");
        vec!["-f".into(), path.to_string_lossy().into_owned()]
    }

    /// `helm template` of the chart with `values`; the output, or the failure.
    fn template(&self, name: &str, values: &Value) -> Result<String, String> {
        let chart = root().join("helm/baton");
        let mut args = vec![
            "template".to_owned(),
            RELEASE.to_owned(),
            chart.to_string_lossy().into_owned(),
            "--namespace".to_owned(),
            NAMESPACE.to_owned(),
        ];
        args.extend(self.values_args(name, values));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = self.helm(&args);
        if out.status.success() {
            Ok(String::from_utf8(out.stdout).expect("utf-8"))
        } else {
            Err(text(&out))
        }
    }

    /// Every YAML document of `yaml` as JSON (PyYAML, from the tools' venv).
    fn parse_yaml(&self, yaml: &str) -> Vec<Value> {
        let path = self.home.path().join("parse.yaml");
        std::fs::write(&path, yaml).expect("write yaml");
        let out = Command::new(&self.python)
            .args([
                "-c",
                "import json, sys, yaml\n\
                 docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d is not None]\n\
                 json.dump(docs, sys.stdout)",
            ])
            .arg(&path)
            .output()
            .expect("python runs");
        assert!(out.status.success(), "parsing YAML: {}", text(&out));
        serde_json::from_slice(&out.stdout).expect("JSON from python")
    }

    fn render(&self, set: &ValueSet) -> Rendered {
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

// ---- value sets -------------------------------------------------------------------------

struct ValueSet {
    name: &'static str,
    values: Value,
}

/// The least an install needs: the DSN Secret and a NATS URL.
fn required() -> Value {
    json!({
        "database": {"existingSecret": {"name": DSN_SECRET}},
        "nats": {"url": "nats://nats.messaging:4222"},
    })
}

/// `base` with `over` merged in (objects merge, anything else replaces).
fn merged(mut base: Value, over: Value) -> Value {
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

fn value_sets() -> Vec<ValueSet> {
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
            name: "service-monitor",
            values: merged(
                required(),
                json!({
                    "metrics": {"serviceMonitor": {"enabled": true, "labels": {"release": "prom"}}},
                    "encryption": {"existingSecret": "baton-keyring"}
                }),
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

// ---- rendered objects -------------------------------------------------------------------

struct Rendered {
    name: &'static str,
    yaml: String,
    objects: Vec<Value>,
}

impl Rendered {
    fn all(&self, kind: &str) -> Vec<&Value> {
        self.objects.iter().filter(|o| o["kind"] == kind).collect()
    }

    fn one(&self, kind: &str) -> &Value {
        let found = self.all(kind);
        assert_eq!(found.len(), 1, "{}: one {kind} expected", self.name);
        found[0]
    }

    fn kinds(&self) -> Vec<String> {
        let mut kinds: Vec<String> = self
            .objects
            .iter()
            .map(|o| o["kind"].as_str().expect("kind").to_owned())
            .collect();
        kinds.sort();
        kinds
    }

    fn config_map(&self) -> BTreeMap<String, String> {
        let data = self.one("ConfigMap")["data"]
            .as_object()
            .expect("ConfigMap data");
        data.iter()
            .map(|(k, v)| (k.clone(), v.as_str().expect("string values").to_owned()))
            .collect()
    }

    fn deployment(&self) -> &Value {
        self.one("Deployment")
    }

    fn container(&self) -> &Value {
        container(&self.deployment()["spec"]["template"])
    }
}

fn container(pod_template: &Value) -> &Value {
    let containers = pod_template["spec"]["containers"]
        .as_array()
        .expect("containers");
    assert_eq!(containers.len(), 1, "one container");
    &containers[0]
}

fn env_entry<'a>(container: &'a Value, name: &str) -> Option<&'a Value> {
    container["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
}

fn int(v: &Value, what: &str) -> i64 {
    v.as_i64()
        .unwrap_or_else(|| panic!("{what}: not an integer: {v}"))
}

/// `selector` (matchLabels) picks a pod with `labels`.
fn selects(selector: &Value, labels: &Value) -> bool {
    let selector = selector.as_object().expect("selector labels");
    !selector.is_empty() && selector.iter().all(|(k, v)| &labels[k] == v)
}

/// The environment a container starts with: its ConfigMap (envFrom), then `env`, with
/// Secret references and the downward API filled in by stand-ins.
fn container_env(
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
                other => panic!("unexpected secret variable {other}: {secret:?}"),
            }
        } else {
            panic!("unexpected env entry {e}");
        };
        env.insert(name, value);
    }
    env
}

/// `baton config explain` under `env` only: key -> (value, source).
fn explain(env: &BTreeMap<String, String>) -> BTreeMap<String, (String, String)> {
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

// ---- the chart ---------------------------------------------------------------------------

#[test]
fn chart_lints_and_every_value_set_renders_objects_valid_for_kubernetes() {
    let tools = tools();
    let chart = root().join("helm/baton");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut files = Vec::new();
    let mut expected_passes = 0;
    for set in value_sets() {
        let mut args = vec![
            "lint".to_owned(),
            "--strict".to_owned(),
            chart.to_string_lossy().into_owned(),
        ];
        args.extend(tools.values_args(set.name, &set.values));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = tools.helm(&args);
        assert!(
            out.status.success(),
            "{}: helm lint --strict: {}",
            set.name,
            text(&out)
        );

        let rendered = tools.render(&set);
        assert!(
            !rendered.objects.is_empty(),
            "{}: nothing rendered",
            set.name
        );
        for o in &rendered.objects {
            assert_eq!(
                o["metadata"]["labels"]["app.kubernetes.io/instance"], RELEASE,
                "{}: every object carries the release labels: {o}",
                set.name
            );
        }
        expected_passes += rendered
            .objects
            .iter()
            .filter(|o| o["kind"] != "ServiceMonitor")
            .count();
        let file = dir.path().join(format!("{}.yaml", set.name));
        std::fs::write(&file, &rendered.yaml).expect("write rendered");
        files.push(file);
    }

    for version in K8S_VERSIONS {
        let out = Command::new(&tools.validate)
            .args(["--strict", "-k", version])
            .args(&files)
            .output()
            .expect("kubernetes-validate runs");
        let says = text(&out);
        assert!(
            out.status.success() && !says.contains("ERROR"),
            "kubernetes-validate --strict -k {version}: {says}"
        );
        // The ServiceMonitor is a CRD without a schema there (its shape is asserted below);
        // anything else without a schema is a wrong apiVersion or kind.
        for line in says.lines().filter(|l| l.starts_with("WARN")) {
            assert!(
                line.contains("kind ServiceMonitor with api version monitoring.coreos.com/v1"),
                "-k {version}: {line}"
            );
        }
        let passed = says.lines().filter(|l| l.contains(" passed for ")).count();
        assert_eq!(passed, expected_passes, "-k {version}: {says}");
    }
}

#[test]
fn default_values_deploy_the_team_tier_for_rolling_upgrades() {
    let tools = tools();
    let sets = value_sets();
    let r = tools.render(&sets[0]);
    assert_eq!(
        r.kinds(),
        [
            "ConfigMap",
            "Deployment",
            "Job",
            "PodDisruptionBudget",
            "Service",
            "ServiceAccount"
        ],
        "the chart never creates a Secret; optional objects are off by default"
    );

    // Replicas and rollout: one extra replica at a time, none taken away before.
    let deploy = r.deployment();
    let spec = &deploy["spec"];
    assert_eq!(spec["replicas"], 3);
    assert_eq!(spec["strategy"]["type"], "RollingUpdate");
    assert_eq!(spec["strategy"]["rollingUpdate"]["maxSurge"], 1);
    assert_eq!(spec["strategy"]["rollingUpdate"]["maxUnavailable"], 0);
    let pod = &spec["template"];
    let selector = &spec["selector"]["matchLabels"];
    assert!(selects(selector, &pod["metadata"]["labels"]));

    // Probes.
    let c = r.container();
    assert_eq!(c["args"], json!(["serve"]));
    let port = c["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .find(|p| p["name"] == "http")
        .expect("a port named http");
    assert_eq!(port["containerPort"], 8080);
    for (probe, path) in [
        ("readinessProbe", "/readyz"),
        ("livenessProbe", "/livez"),
        ("startupProbe", "/livez"),
    ] {
        assert_eq!(c[probe]["httpGet"]["path"], path, "{probe}");
        assert_eq!(c[probe]["httpGet"]["port"], "http", "{probe}");
    }

    // Drain: preStop sleeps, then SIGTERM; the grace period covers both plus a margin.
    let config = r.config_map();
    let shutdown_grace: i64 = config["BATON_HTTP__SHUTDOWN_GRACE_SECS"]
        .parse()
        .expect("grace secs");
    assert_eq!(shutdown_grace, 30);
    let pre_stop = pre_stop_sleep(c);
    assert!(
        pre_stop > 0 && pre_stop < shutdown_grace,
        "preStop {pre_stop}"
    );
    let termination = int(
        &pod["spec"]["terminationGracePeriodSeconds"],
        "terminationGracePeriodSeconds",
    );
    assert!(
        termination > pre_stop + shutdown_grace,
        "terminationGracePeriodSeconds {termination} must exceed preStop {pre_stop} + drain \
         {shutdown_grace}"
    );

    // Settings: the team tier, secrets by reference only.
    for (key, want) in [
        ("BATON_TIER", "team"),
        ("BATON_AUTH__REQUIRED", "true"),
        ("BATON_HTTP__LISTEN", "0.0.0.0:8080"),
        ("BATON_DATABASE__MIGRATE_ON_START", "false"),
        ("BATON_BUS__NATS_URL", "nats://nats.messaging:4222"),
    ] {
        assert_eq!(config.get(key).map(String::as_str), Some(want), "{key}");
    }
    assert_no_secrets_in_config_maps(&r);
    assert_eq!(
        c["envFrom"],
        json!([{"configMapRef": {"name": r.one("ConfigMap")["metadata"]["name"]}}])
    );
    assert_eq!(
        env_entry(c, "BATON_DATABASE__URL").expect("DSN")["valueFrom"],
        json!({"secretKeyRef": {"name": DSN_SECRET, "key": "url"}})
    );
    assert_eq!(
        env_entry(c, "BATON_REPLICA_NAME").expect("replica name")["valueFrom"],
        json!({"fieldRef": {"fieldPath": "metadata.name"}})
    );
    assert!(
        pod["metadata"]["annotations"]["checksum/config"].is_string(),
        "config changes roll the pods"
    );

    // Non-root, read-only, no capabilities; the uid is the image's.
    assert_locked_down(&pod["spec"], c, "Deployment");
    assert_eq!(
        pod["spec"]["securityContext"]["runAsUser"],
        dockerfile().uid,
        "the chart runs the image's user"
    );
    assert_eq!(pod["spec"]["automountServiceAccountToken"], false);
    assert_eq!(
        pod["spec"]["serviceAccountName"],
        r.one("ServiceAccount")["metadata"]["name"]
    );

    // Spread over nodes and zones, and a disruption budget over the same pods.
    let spread = pod["spec"]["topologySpreadConstraints"]
        .as_array()
        .expect("topology spread");
    let keys: Vec<&Value> = spread.iter().map(|t| &t["topologyKey"]).collect();
    assert!(keys.contains(&&json!("kubernetes.io/hostname")), "{keys:?}");
    assert!(
        keys.contains(&&json!("topology.kubernetes.io/zone")),
        "{keys:?}"
    );
    for t in spread {
        assert_eq!(&t["labelSelector"]["matchLabels"], selector);
    }
    let anti = &pod["spec"]["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"];
    assert_eq!(
        &anti[0]["podAffinityTerm"]["labelSelector"]["matchLabels"],
        selector
    );
    let pdb = r.one("PodDisruptionBudget");
    assert_eq!(&pdb["spec"]["selector"]["matchLabels"], selector);
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);

    // The Service reaches exactly these pods on the named port.
    let service = r.one("Service");
    assert_eq!(&service["spec"]["selector"], selector);
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "http");

    // Migrations: a hook Job before install and upgrade, with the pods' settings inline.
    let job = r.one("Job");
    let hooks = job["metadata"]["annotations"]["helm.sh/hook"]
        .as_str()
        .expect("helm.sh/hook");
    let hooks: Vec<&str> = hooks.split(',').map(str::trim).collect();
    assert!(
        hooks.contains(&"pre-install") && hooks.contains(&"pre-upgrade"),
        "{hooks:?}"
    );
    assert!(job["metadata"]["annotations"]["helm.sh/hook-delete-policy"].is_string());
    let job_pod = &job["spec"]["template"];
    assert_eq!(job_pod["spec"]["restartPolicy"], "Never");
    assert!(
        !selects(selector, &job_pod["metadata"]["labels"]),
        "the migration pod must not count as an API replica (Service, PDB, spread)"
    );
    let jc = container(job_pod);
    assert_eq!(jc["args"], json!(["migrate"]));
    assert_eq!(jc["image"], c["image"]);
    assert_locked_down(&job_pod["spec"], jc, "Job");
    let job_env = container_env(jc, &BTreeMap::new());
    for (key, value) in &config {
        assert_eq!(job_env.get(key), Some(value), "Job env {key}");
    }
    assert_eq!(
        env_entry(jc, "BATON_DATABASE__URL").expect("Job DSN")["valueFrom"],
        env_entry(c, "BATON_DATABASE__URL").expect("DSN")["valueFrom"]
    );

    // NOTES.txt (rendered offline by a client-side dry run) says how to get an API key.
    let chart_dir = root().join("helm/baton");
    let mut args = vec![
        "install".to_owned(),
        RELEASE.to_owned(),
        chart_dir.to_string_lossy().into_owned(),
        format!("--namespace={NAMESPACE}"),
        "--dry-run=client".to_owned(),
    ];
    args.extend(tools.values_args("notes", &sets[0].values));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = tools.helm(&args);
    let notes = text(&out);
    let name = deploy["metadata"]["name"].as_str().expect("name");
    assert!(
        out.status.success()
            && notes.contains(&format!(
                "kubectl -n {NAMESPACE} exec deploy/{name} -- baton admin create-tenant"
            )),
        "{notes}"
    );

    // The image is this release's.
    let chart = &tools.parse_yaml(&read("helm/baton/Chart.yaml"))[0];
    let manifest: toml::Table = read("Cargo.toml").parse().expect("Cargo.toml");
    let version = manifest["workspace"]["package"]["version"]
        .as_str()
        .expect("workspace version");
    assert_eq!(chart["appVersion"], version, "Chart.yaml appVersion");
    assert_eq!(c["image"], format!("baton:{version}"));
    assert_eq!(
        chart["kubeVersion"],
        format!(">={}-0", K8S_VERSIONS[0]),
        "the oldest Kubernetes version validated is the oldest the chart claims"
    );
}

fn pre_stop_sleep(c: &Value) -> i64 {
    let command = c["lifecycle"]["preStop"]["exec"]["command"]
        .as_array()
        .expect("preStop exec command");
    assert_eq!(command.len(), 2, "{command:?}");
    assert_eq!(command[0], "/bin/sleep", "the image has /bin/sleep");
    command[1]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("sleep seconds")
}

fn assert_locked_down(pod_spec: &Value, c: &Value, what: &str) {
    let pod_sc = &pod_spec["securityContext"];
    assert_eq!(pod_sc["runAsNonRoot"], true, "{what}");
    assert!(int(&pod_sc["runAsUser"], "runAsUser") > 0, "{what}");
    assert_eq!(pod_sc["seccompProfile"]["type"], "RuntimeDefault", "{what}");
    let sc = &c["securityContext"];
    assert_eq!(sc["runAsNonRoot"], true, "{what}");
    assert_eq!(sc["readOnlyRootFilesystem"], true, "{what}");
    assert_eq!(sc["allowPrivilegeEscalation"], false, "{what}");
    assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]), "{what}");
    let tmp = c["volumeMounts"]
        .as_array()
        .expect("volume mounts")
        .iter()
        .any(|m| m["mountPath"] == "/tmp");
    assert!(tmp, "{what}: a writable /tmp beside the read-only root");
}

/// No ConfigMap carries a DSN, a password, or a URL with credentials in it.
fn assert_no_secrets_in_config_maps(r: &Rendered) {
    for cm in r.all("ConfigMap") {
        for (key, value) in cm["data"].as_object().expect("data") {
            let value = value.as_str().expect("string");
            assert!(
                !["BATON_DATABASE__URL", "PASSWORD", "TOKEN", "SECRET", "KEY"]
                    .iter()
                    .any(|s| key.contains(s)),
                "{}: {key} in a ConfigMap",
                r.name
            );
            assert!(
                !value.contains("postgres") && !value.contains("s3cret"),
                "{}: {key}={value}",
                r.name
            );
            if let Some((_, rest)) = value.split_once("://") {
                let authority = rest.split('/').next().unwrap_or_default();
                assert!(
                    !authority.contains('@'),
                    "{}: credentials in {key}={value}",
                    r.name
                );
            }
        }
    }
    assert!(
        r.all("Secret").is_empty(),
        "{}: the chart made a Secret",
        r.name
    );
}

#[test]
fn optional_features_render_what_they_promise() {
    let tools = tools();
    let sets = value_sets();
    let by_name = |name: &str| {
        let set = sets.iter().find(|s| s.name == name).expect("value set");
        tools.render(set)
    };

    // Autoscaling: the HPA owns the replica count.
    let r = by_name("autoscaling");
    let hpa = r.one("HorizontalPodAutoscaler");
    assert_eq!(hpa["apiVersion"], "autoscaling/v2");
    assert_eq!(hpa["spec"]["scaleTargetRef"]["kind"], "Deployment");
    assert_eq!(
        hpa["spec"]["scaleTargetRef"]["name"],
        r.deployment()["metadata"]["name"]
    );
    assert!(int(&hpa["spec"]["minReplicas"], "minReplicas") >= 2);
    assert!(
        r.deployment()["spec"].get("replicas").is_none(),
        "with an HPA the Deployment leaves replicas alone"
    );
    let metrics: Vec<&Value> = hpa["spec"]["metrics"]
        .as_array()
        .expect("metrics")
        .iter()
        .map(|m| &m["resource"]["name"])
        .collect();
    assert_eq!(metrics, [&json!("cpu"), &json!("memory")]);
    assert!(r.container()["resources"]["requests"]["cpu"].is_string());

    // NetworkPolicy, with the NATS URL from a Secret.
    let r = by_name("network-policy");
    let np = r.one("NetworkPolicy");
    let selector = &r.deployment()["spec"]["selector"]["matchLabels"];
    assert_eq!(&np["spec"]["podSelector"]["matchLabels"], selector);
    assert_eq!(np["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
    assert_eq!(np["spec"]["ingress"][0]["ports"][0]["port"], "http");
    assert_eq!(
        np["spec"]["ingress"][0]["from"][0]["namespaceSelector"]["matchLabels"]["team"],
        "web"
    );
    let egress = np["spec"]["egress"].as_array().expect("egress");
    assert_eq!(egress[0]["ports"][0]["port"], 53, "DNS stays reachable");
    assert_eq!(egress.len(), 3);
    assert!(!r.config_map().contains_key("BATON_BUS__NATS_URL"));
    for c in [r.container(), container(&r.one("Job")["spec"]["template"])] {
        assert_eq!(
            env_entry(c, "BATON_BUS__NATS_URL").expect("NATS from a Secret")["valueFrom"],
            json!({"secretKeyRef": {"name": "baton-nats", "key": "nats-url"}})
        );
    }
    assert_no_secrets_in_config_maps(&r);

    // ServiceMonitor (a CRD: no schema in kubernetes-validate, so its shape is checked here),
    // and the reserved keyring Secret mounted read-only.
    let r = by_name("service-monitor");
    let sm = r.one("ServiceMonitor");
    let service = r.one("Service");
    assert_eq!(sm["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(sm["metadata"]["labels"]["release"], "prom");
    assert!(selects(
        &sm["spec"]["selector"]["matchLabels"],
        &service["metadata"]["labels"]
    ));
    assert_eq!(
        sm["spec"]["namespaceSelector"]["matchNames"],
        json!([NAMESPACE])
    );
    let endpoint = &sm["spec"]["endpoints"][0];
    assert_eq!(endpoint["port"], service["spec"]["ports"][0]["name"]);
    assert_eq!(endpoint["path"], "/metrics");
    let pod = &r.deployment()["spec"]["template"]["spec"];
    let volume = pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["secret"]["secretName"] == "baton-keyring")
        .expect("keyring volume");
    let mount = r.container()["volumeMounts"]
        .as_array()
        .expect("mounts")
        .iter()
        .find(|m| m["name"] == volume["name"])
        .expect("keyring mount");
    assert_eq!(mount["readOnly"], true);
    assert!(
        !r.container()["env"].to_string().contains("baton-keyring"),
        "the reserved keyring is not passed as BATON_* variables this build would refuse"
    );

    // Without the hook: each replica migrates at start; settings from values pass through.
    let r = by_name("no-migration-hook");
    assert!(r.all("Job").is_empty());
    let config = r.config_map();
    for (key, want) in [
        ("BATON_DATABASE__MIGRATE_ON_START", "true"),
        ("BATON_HTTP__SHUTDOWN_GRACE_SECS", "90"),
        ("BATON_HTTP__BODY_LIMIT_BYTES", "2097152"),
        ("BATON_DATABASE__APP_POOL", "24"),
        ("BATON_CLUSTER__LEASE_TTL_MS", "20000"),
    ] {
        assert_eq!(config.get(key).map(String::as_str), Some(want), "{key}");
    }
    let termination = int(
        &r.deployment()["spec"]["template"]["spec"]["terminationGracePeriodSeconds"],
        "terminationGracePeriodSeconds",
    );
    assert!(
        termination > 90 + pre_stop_sleep(r.container()),
        "{termination}"
    );
    let required = &r.deployment()["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
    assert_eq!(required[0]["topologyKey"], "kubernetes.io/hostname");
    let pdb = r.one("PodDisruptionBudget");
    assert_eq!(pdb["spec"]["minAvailable"], 2);
    assert!(pdb["spec"].get("maxUnavailable").is_none());
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
        assert_eq!(from_env, env.len(), "{}: {explained:?}", set.name);
        for job in r.all("Job") {
            let job_env = container_env(container(&job["spec"]["template"]), &BTreeMap::new());
            explain(&job_env);
        }
    }
}

#[test]
fn the_schema_offers_only_keys_this_baton_knows_and_the_chart_does_not_set() {
    let schema: Value =
        serde_json::from_str(&read("helm/baton/values.schema.json")).expect("values.schema.json");
    let known = explain(&BTreeMap::new());
    let chart_sets = [
        "tier",
        "replica_name",
        "http.listen",
        "auth.required",
        "database.url",
        "database.migrate_on_start",
        "bus.nats_url",
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

#[test]
fn chart_refuses_to_render_without_its_requirements_or_with_secrets_in_values() {
    let tools = tools();
    let nats = json!({"nats": {"url": "nats://nats:4222"}});
    let dsn = json!({"database": {"existingSecret": {"name": DSN_SECRET}}});
    let cases = [
        (
            "no DSN, no NATS",
            json!({}),
            "database.existingSecret.name is required",
        ),
        (
            "no DSN",
            nats.clone(),
            "database.existingSecret.name is required",
        ),
        ("no NATS", dsn.clone(), "a NATS URL is required"),
        (
            "NATS credentials in values",
            merged(
                dsn.clone(),
                json!({"nats": {"url": "nats://baton:pw@nats:4222"}}),
            ),
            "nats.url carries credentials",
        ),
        (
            "NATS twice",
            merged(
                required(),
                json!({"nats": {"existingSecret": {"name": "baton-nats"}}}),
            ),
            "not both",
        ),
        (
            "a DSN in values",
            merged(
                required(),
                json!({"config": {"database": {"url": "postgres://u:p@db/baton"}}}),
            ),
            "'url' not allowed",
        ),
        (
            "a setting the chart owns",
            merged(
                required(),
                json!({"config": {"http": {"listen": "127.0.0.1:8080"}}}),
            ),
            "'listen' not allowed",
        ),
        (
            "an unknown setting",
            merged(required(), json!({"config": {"cluster": {"lease_ttl": 1}}})),
            "'lease_ttl' not allowed",
        ),
        (
            "two disruption budgets",
            merged(
                required(),
                json!({"podDisruptionBudget": {"minAvailable": 2}}),
            ),
            "set one of minAvailable and maxUnavailable",
        ),
        (
            "a setting of the wrong type",
            merged(
                required(),
                json!({"config": {"http": {"shutdown_grace_secs": "30s"}}}),
            ),
            "shutdown_grace_secs",
        ),
    ];
    for (what, values, says) in cases {
        match tools.template("refused", &values) {
            Ok(yaml) => panic!("{what}: rendered anyway:\n{yaml}"),
            Err(e) => assert!(e.contains(says), "{what}: expected {says:?} in: {e}"),
        }
    }
}

// ---- the Dockerfile -----------------------------------------------------------------------

struct Instruction {
    stage: usize,
    op: String,
    args: String,
}

struct Dockerfile {
    instructions: Vec<Instruction>,
    args: BTreeMap<String, String>,
    uid: u32,
}

/// Instructions with continuation lines joined and comments dropped, tagged by stage.
fn dockerfile() -> Dockerfile {
    let source = read("Dockerfile");
    let mut logical = Vec::new();
    let mut current = String::new();
    for line in source.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && current.is_empty()) {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(part) => {
                current.push_str(part);
                current.push(' ');
            }
            None => {
                current.push_str(trimmed);
                logical.push(std::mem::take(&mut current));
            }
        }
    }
    let mut instructions = Vec::new();
    let mut args = BTreeMap::new();
    let mut stage = 0;
    for line in logical {
        let (op, rest) = line.split_once(' ').expect("instruction with arguments");
        let op = op.to_ascii_uppercase();
        if op == "FROM" {
            stage += 1;
        }
        if op == "ARG" && stage == 0 {
            let (k, v) = rest.trim().split_once('=').expect("ARG NAME=default");
            args.insert(k.to_owned(), v.to_owned());
        }
        instructions.push(Instruction {
            stage,
            op,
            args: rest.trim().to_owned(),
        });
    }
    let user = instructions
        .iter()
        .rev()
        .find(|i| i.op == "USER")
        .expect("a USER instruction")
        .args
        .clone();
    let (uid, gid) = user.split_once(':').unwrap_or((&user, "0"));
    let uid: u32 = uid.parse().expect("USER is a numeric uid");
    let _: u32 = gid.parse().expect("USER's group is numeric");
    Dockerfile {
        instructions,
        args,
        uid,
    }
}

impl Dockerfile {
    fn expand(&self, s: &str) -> String {
        let mut out = s.to_owned();
        for (k, v) in &self.args {
            out = out.replace(&format!("${{{k}}}"), v);
        }
        out
    }

    fn stage_ops(&self, stage: usize, op: &str) -> Vec<&str> {
        self.instructions
            .iter()
            .filter(|i| i.stage == stage && i.op == op)
            .map(|i| i.args.as_str())
            .collect()
    }

    fn last_stage(&self) -> usize {
        self.instructions.last().expect("instructions").stage
    }

    /// The JSON (exec) form of `op` in the final stage.
    fn exec_form(&self, op: &str) -> Vec<String> {
        let args = self.stage_ops(self.last_stage(), op);
        let args = args.last().unwrap_or_else(|| panic!("no {op}"));
        serde_json::from_str(args).unwrap_or_else(|e| panic!("{op} is not exec form: {e}"))
    }

    fn env(&self) -> BTreeMap<String, String> {
        self.stage_ops(self.last_stage(), "ENV")
            .iter()
            .flat_map(|args| args.split_whitespace())
            .map(|pair| {
                let (k, v) = pair.split_once('=').expect("ENV KEY=VALUE");
                (k.to_owned(), v.to_owned())
            })
            .collect()
    }
}

#[test]
fn dockerfile_runs_the_binary_it_builds_as_a_non_root_user() {
    let d = dockerfile();
    let froms: Vec<String> = d
        .instructions
        .iter()
        .filter(|i| i.op == "FROM")
        .map(|i| d.expand(&i.args))
        .collect();
    assert_eq!(froms.len(), 2, "a builder and a runtime stage: {froms:?}");

    // Builder: a Rust at least as new as the workspace's rust-version, then the same Debian
    // release as the runtime (glibc).
    let (builder_image, builder) = froms[0].split_once(" AS ").expect("FROM image AS name");
    let manifest: toml::Table = read("Cargo.toml").parse().expect("Cargo.toml");
    let msrv = manifest["workspace"]["package"]["rust-version"]
        .as_str()
        .expect("rust-version");
    let rust_tag = builder_image
        .strip_prefix("rust:")
        .expect("a rust: builder");
    let (rust, release) = rust_tag.split_once('-').expect("rust:VERSION-RELEASE");
    let version = |v: &str| -> Vec<u32> { v.split('.').map(|n| n.parse().expect("num")).collect() };
    assert!(version(rust) >= version(msrv), "rust {rust} < {msrv}");
    let runtime_image = froms[1].split_whitespace().next().expect("runtime image");
    assert_eq!(runtime_image, format!("debian:{release}-slim"));

    // The release build, its output copied out of the cache mount, into the runtime, run.
    let workdir = d.stage_ops(1, "WORKDIR");
    let workdir = workdir.last().expect("builder WORKDIR");
    let build = d
        .stage_ops(1, "RUN")
        .into_iter()
        .find(|r| r.contains("cargo build"))
        .expect("a cargo build step");
    let tokens: Vec<&str> = build.split_whitespace().collect();
    for flag in ["--release", "--locked"] {
        assert!(tokens.contains(&flag), "cargo build {flag}: {build}");
    }
    assert!(
        tokens.windows(2).any(|w| w == ["--bin", "baton"]),
        "{build}"
    );
    assert!(!build.contains("--target ") && !build.contains("CARGO_TARGET_DIR"));
    let output = "target/release/baton";
    let copied_to = tokens
        .iter()
        .position(|t| *t == output)
        .map(|i| tokens[i + 1].to_owned());
    if build.contains(&format!("target={workdir}/target")) {
        assert!(
            copied_to.is_some(),
            "target/ is a cache mount: the binary must be copied out in the same step"
        );
    }
    let built = copied_to.unwrap_or_else(|| format!("{workdir}/{output}"));
    let runtime = d.last_stage();
    let copy = d
        .stage_ops(runtime, "COPY")
        .into_iter()
        .find(|c| c.starts_with(&format!("--from={builder} ")))
        .expect("COPY --from the builder");
    let copy: Vec<&str> = copy.split_whitespace().collect();
    assert_eq!(
        copy[1], built,
        "the runtime copies what the builder produced"
    );
    let entrypoint = d.exec_form("ENTRYPOINT");
    assert_eq!(entrypoint, [copy[2]], "ENTRYPOINT is the copied binary");
    assert_eq!(d.exec_form("CMD"), ["serve"]);

    // Non-root, numeric, and created in the image; its data directory is the WORKDIR.
    assert!(d.uid > 0, "USER must not be root");
    let setup = d.stage_ops(runtime, "RUN").join(" ");
    assert!(setup.contains(&format!("--uid {}", d.uid)), "{setup}");
    let env = d.env();
    let data_dir = &env["BATON_DATA_DIR"];
    assert_eq!(d.stage_ops(runtime, "WORKDIR"), [data_dir.as_str()]);
    assert!(
        setup.contains(&format!("-o {} ", d.uid)) && setup.contains(data_dir.as_str()),
        "the data directory belongs to the user: {setup}"
    );

    // Listens outside loopback only with auth required; this build accepts the settings.
    let listen: std::net::SocketAddr = env["BATON_HTTP__LISTEN"].parse().expect("listen");
    assert_eq!(
        d.stage_ops(runtime, "EXPOSE"),
        [listen.port().to_string().as_str()]
    );
    if !listen.ip().is_loopback() {
        assert_eq!(env["BATON_AUTH__REQUIRED"], "true");
    }
    let explained = explain(&env);
    assert_eq!(explained["http.listen"].0, listen.to_string());
    assert_eq!(explained["auth.required"].0, "true");
    assert_eq!(explained["tier"].0, "embedded", "docs/deploy.md says so");
    let health = d.stage_ops(runtime, "HEALTHCHECK").join(" ");
    let (_, probe) = health
        .split_once(" CMD ")
        .expect("HEALTHCHECK ... CMD [...]");
    let probe: Vec<String> = serde_json::from_str(probe).expect("HEALTHCHECK CMD in exec form");
    assert!(
        probe[0] == "/bin/bash"
            && probe[2].contains(&format!("/dev/tcp/127.0.0.1/{} ", listen.port()))
            && probe[2].contains("GET /livez HTTP/1.0\\r\\n"),
        "{probe:?}"
    );

    // The build context holds every workspace member and the migrations.
    let ignored: Vec<String> = read(".dockerignore")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.trim_matches('/').to_owned())
        .collect();
    for excluded in ["target", ".git"] {
        assert!(
            ignored.iter().any(|i| i == excluded),
            "{excluded} not ignored"
        );
    }
    let members = manifest["workspace"]["members"]
        .as_array()
        .expect("members");
    let needed = members
        .iter()
        .map(|m| m.as_str().expect("member").to_owned())
        .chain(["Cargo.toml", "Cargo.lock", "migrations"].map(String::from));
    for path in needed {
        let top = path.split('/').next().expect("path");
        assert!(
            !ignored.iter().any(|i| i == &path || i == top),
            ".dockerignore drops {path}, which the build needs"
        );
    }
}
