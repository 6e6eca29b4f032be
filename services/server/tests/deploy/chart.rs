//! The chart as a whole: it lints, every value set renders objects valid for the supported
//! Kubernetes versions, and the defaults deploy the team tier the way a rolling upgrade needs
//! it. Also the checks other chart tests share (drain timing, lock-down, no secrets in
//! ConfigMaps). The optional objects are tested in [`crate::features`].

use crate::dockerfile::dockerfile;
use crate::render::{
    DSN_SECRET, KEYRING_SECRET, Rendered, container, container_env, env_entry, int, selects,
    value_set, value_sets,
};
use crate::tools::{
    CHART, K8S_VERSIONS, NAMESPACE, RELEASE, cargo_toml, chart_dir, read, text, tools,
};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// The custom resources the chart can render (kind, apiVersion): kubernetes-validate has
/// no schema for them, so their shapes are asserted in `features` and `monitoring`.
const CRDS: [(&str, &str); 3] = [
    ("ServiceMonitor", "monitoring.coreos.com/v1"),
    ("PrometheusRule", "monitoring.coreos.com/v1"),
    ("HTTPRoute", "gateway.networking.k8s.io/v1"),
];

#[test]
fn chart_lints_and_every_value_set_renders_objects_valid_for_kubernetes() {
    let tools = tools();
    let chart = chart_dir();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut files = Vec::new();
    let mut expected_passes = 0;
    for set in value_sets() {
        let out = tools.helm(&["lint", "--strict", &chart], set.name, &set.values);
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
            .filter(|o| !CRDS.iter().any(|(kind, _)| o["kind"] == *kind))
            .count();
        let file = dir.path().join(format!("{}.yaml", set.name));
        std::fs::write(&file, &rendered.yaml).expect("write rendered");
        files.push(file);
    }

    for version in K8S_VERSIONS {
        let out = tools.validate(version, &files);
        let says = text(&out);
        assert!(
            out.status.success() && !says.contains("ERROR"),
            "kubernetes-validate --strict -k {version}: {says}"
        );
        // Custom resources have no schema there; anything else without one is a wrong
        // apiVersion or kind.
        for line in says.lines().filter(|l| l.starts_with("WARN")) {
            assert!(
                CRDS.iter().any(|(kind, api)| {
                    line.contains(&format!("kind {kind} with api version {api}"))
                }),
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
    let set = value_set("default");
    let r = tools.render(&set);
    assert_eq!(
        r.kinds(),
        [
            "ConfigMap",
            "Deployment",
            "Job",
            "Pod",
            "PodDisruptionBudget",
            "Service",
            "ServiceAccount"
        ],
        "the chart never creates a Secret; optional objects are off by default"
    );
    // The one Pod is `helm test`'s, which no Service or budget selects.
    let test = r.one("Pod");
    assert_eq!(test["metadata"]["annotations"]["helm.sh/hook"], "test");
    assert!(!selects(
        &r.deployment()["spec"]["selector"]["matchLabels"],
        &test["metadata"]["labels"]
    ));

    // Replicas and rollout: one extra replica at a time, none taken away before.
    let deploy = r.deployment();
    let spec = &deploy["spec"];
    assert_eq!(spec["replicas"], 3);
    assert_eq!(spec["strategy"]["type"], "RollingUpdate");
    assert_eq!(spec["strategy"]["rollingUpdate"]["maxSurge"], 1);
    assert_eq!(spec["strategy"]["rollingUpdate"]["maxUnavailable"], 0);
    let pod = r.pod();
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
    let termination = r.termination_grace();
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
    for (key, want) in [
        ("BATON_CRYPTO__KEYS_DIR", "/etc/baton/keyring"),
        ("BATON_CRYPTO__ACTIVE_KEY", "k1"),
    ] {
        for (what, c) in [("Deployment", c), ("Job", container(r.one("Job")))] {
            assert_eq!(
                env_entry(c, key).expect("keyring setting")["value"],
                want,
                "{what} {key}"
            );
        }
    }
    assert_no_secrets_in_config_maps(&r);
    // The keyring Secret is mounted read-only where crypto.keys_dir points; its keys are
    // files, never variables.
    let volume = pod["spec"]["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["secret"]["secretName"] == KEYRING_SECRET)
        .expect("keyring volume");
    let mount = c["volumeMounts"]
        .as_array()
        .expect("mounts")
        .iter()
        .find(|m| m["name"] == volume["name"])
        .expect("keyring mount");
    assert_eq!(mount["readOnly"], true);
    assert_eq!(mount["mountPath"], "/etc/baton/keyring");
    assert!(
        !c["env"].to_string().contains(KEYRING_SECRET),
        "the keys are not passed as variables"
    );
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
    let jc = container(job);
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
    let chart_dir = chart_dir();
    let namespace = format!("--namespace={NAMESPACE}");
    let args = [
        "install",
        RELEASE,
        &chart_dir,
        &namespace,
        "--dry-run=client",
    ];
    let out = tools.helm(&args, "notes", &set.values);
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
    let chart = &tools.parse_yaml(&read(&format!("{CHART}/Chart.yaml")))[0];
    let version = cargo_toml()["workspace"]["package"]["version"]
        .as_str()
        .expect("workspace version")
        .to_owned();
    assert_eq!(chart["appVersion"], version, "Chart.yaml appVersion");
    assert_eq!(c["image"], format!("baton:{version}"));
    assert_eq!(
        chart["kubeVersion"],
        format!(">={}-0", K8S_VERSIONS[0]),
        "the oldest Kubernetes version validated is the oldest the chart claims"
    );
}

/// The seconds the container's preStop hook sleeps.
pub fn pre_stop_sleep(c: &Value) -> i64 {
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
pub fn assert_no_secrets_in_config_maps(r: &Rendered) {
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
