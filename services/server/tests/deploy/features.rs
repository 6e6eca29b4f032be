//! The chart's optional objects and settings, one value set each: the HPA, the NetworkPolicy
//! with the NATS URL from a Secret, the ServiceMonitor on `/metrics`, and replicas that
//! migrate at start with settings passed through from values. (The keyring mount every
//! install has is checked with the defaults, in `chart`.)

use crate::chart::{assert_no_secrets_in_config_maps, pre_stop_sleep};
use crate::render::{container, env_entry, int, selects, value_set};
use crate::tools::{NAMESPACE, tools};
use serde_json::{Value, json};

#[test]
fn optional_features_render_what_they_promise() {
    let tools = tools();
    let by_name = |name: &str| tools.render(&value_set(name));

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
    for c in [r.container(), container(r.one("Job"))] {
        assert_eq!(
            env_entry(c, "BATON_BUS__NATS_URL").expect("NATS from a Secret")["valueFrom"],
            json!({"secretKeyRef": {"name": "baton-nats", "key": "nats-url"}})
        );
    }
    assert_no_secrets_in_config_maps(&r);

    // NATS credentials from a Secret and TLS files, under the installation's prefix: the
    // password reaches the pods from the Secret only, the files as read-only mounts.
    let r = by_name("nats-secured");
    let config = r.config_map();
    assert_eq!(config["BATON_BUS__SUBJECT_PREFIX"], "acme-prod");
    assert_eq!(config["BATON_BUS__NATS_USER"], "baton");
    assert_eq!(config["BATON_BUS__NATS_TLS_REQUIRED"], "true");
    let value = |name: &str| env_entry(r.container(), name).map(|e| e["value"].clone());
    assert_eq!(
        value("BATON_BUS__NATS_TLS_CA_FILE"),
        Some(json!("/etc/baton/nats-tls/ca.crt"))
    );
    assert_eq!(
        value("BATON_BUS__NATS_TLS_CERT_FILE"),
        Some(json!("/etc/baton/nats-tls/tls.crt"))
    );
    assert_eq!(
        value("BATON_BUS__NATS_TLS_KEY_FILE"),
        Some(json!("/etc/baton/nats-tls/tls.key"))
    );
    assert_eq!(
        env_entry(r.container(), "BATON_BUS__NATS_PASSWORD").expect("from the Secret")["valueFrom"],
        json!({"secretKeyRef": {"name": "baton-nats-auth", "key": "password"}})
    );
    let mounts = &r.container()["volumeMounts"];
    let tls_mount = mounts
        .as_array()
        .expect("mounts")
        .iter()
        .find(|m| m["name"] == "nats-tls")
        .expect("the TLS Secret is mounted");
    assert_eq!(tls_mount["mountPath"], "/etc/baton/nats-tls");
    assert_eq!(tls_mount["readOnly"], true);
    assert_no_secrets_in_config_maps(&r);
    let r = by_name("nats-creds");
    assert_eq!(
        env_entry(r.container(), "BATON_BUS__NATS_CREDS_FILE").map(|e| e["value"].clone()),
        Some(json!("/etc/baton/nats-creds/baton.creds"))
    );
    let volume = r.pod()["spec"]["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == "nats-creds")
        .expect("the creds file is mounted");
    assert_eq!(volume["secret"]["secretName"], "baton-nats-auth");

    // ServiceMonitor (a CRD: no schema in kubernetes-validate, so its shape is checked here):
    // it scrapes /metrics, which the API serves on its own port, the Service's `http`.
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
    assert_eq!(endpoint["port"], "http");
    assert_eq!(endpoint["path"], "/metrics");
    // Traces go where the same value set points them, named as the service.
    let env = |name: &str| env_entry(r.container(), name).map(|e| e["value"].clone());
    assert_eq!(
        env("OTEL_EXPORTER_OTLP_ENDPOINT"),
        Some(json!("http://otel-collector.observability:4317"))
    );
    assert_eq!(env("OTEL_SERVICE_NAME"), Some(json!("baton")));
    // List settings reach the pods comma-separated, which baton reads (see `config`).
    assert_eq!(
        r.config_map()
            .get("BATON_HTTP__ALLOWED_ORIGINS")
            .map(String::as_str),
        Some("https://app.example.com,https://admin.example.com")
    );
    let quiet = tools.render(&value_set("default"));
    assert!(
        env_entry(quiet.container(), "OTEL_EXPORTER_OTLP_ENDPOINT").is_none(),
        "no endpoint, no export"
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
    let termination = r.termination_grace();
    assert!(
        termination > 90 + pre_stop_sleep(r.container()),
        "{termination}"
    );
    let required = &r.pod()["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
    assert_eq!(required[0]["topologyKey"], "kubernetes.io/hostname");
    let pdb = r.one("PodDisruptionBudget");
    assert_eq!(pdb["spec"]["minAvailable"], 2);
    assert!(pdb["spec"].get("maxUnavailable").is_none());
}

/// The ways in: an Ingress and a Gateway API HTTPRoute to the Service with what event
/// streams need behind a proxy (no buffering, long reads, no request timeout), and the
/// `helm test` pod that asks `/readyz` and makes one authenticated request.
#[test]
fn code_tools_are_off_by_default_and_on_relax_only_what_bubblewrap_needs() {
    let tools = tools();
    let off = tools.render(&value_set("default"));
    assert_eq!(off.config_map()["BATON_WORKSPACES__CODE_TOOLS"], "false");
    let pod = &off.deployment()["spec"]["template"]["spec"];
    assert!(pod.get("hostUsers").is_none(), "{pod}");
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    assert!(
        off.container()["securityContext"]
            .get("procMount")
            .is_none()
    );

    let on = tools.render(&value_set("code-tools"));
    let config = on.config_map();
    assert_eq!(config["BATON_WORKSPACES__CODE_TOOLS"], "true");
    assert_eq!(
        config["BATON_WORKSPACES__ENVIRONMENTS__DATA__LAYERS"],
        "/usr/share:/opt/share"
    );
    assert_eq!(
        config["BATON_WORKSPACES__ENVIRONMENTS__DATA__PROCESSES"],
        "32"
    );
    assert_eq!(
        config["BATON_WORKSPACES__ENVIRONMENTS__FETCH__NETWORK"],
        "true"
    );
    assert_eq!(
        config["BATON_WORKSPACES__ENVIRONMENTS__FETCH__EXECUTE_ROLE"],
        "admin"
    );
    let pod = &on.deployment()["spec"]["template"]["spec"];
    assert_eq!(
        pod["hostUsers"], false,
        "the pod's root is nobody on the node"
    );
    let security = &pod["securityContext"];
    assert_eq!(security["seccompProfile"]["type"], "Unconfined");
    let annotations = &on.deployment()["spec"]["template"]["metadata"]["annotations"];
    assert_eq!(
        annotations["container.apparmor.security.beta.kubernetes.io/baton"],
        "unconfined"
    );
    assert_eq!(security["runAsNonRoot"], true, "still not root in the pod");
    let container = &on.container()["securityContext"];
    assert_eq!(container["procMount"], "Unmasked");
    assert_eq!(container["allowPrivilegeEscalation"], false);
    assert_eq!(container["readOnlyRootFilesystem"], true);
    assert_eq!(container["capabilities"]["drop"], json!(["ALL"]));
}

#[test]
fn ingress_httproute_and_the_test_hook_reach_the_api() {
    let tools = tools();
    let r = tools.render(&value_set("ingress"));
    let service = r.one("Service");
    let service_name = &service["metadata"]["name"];
    let port = &service["spec"]["ports"][0];

    let ingress = r.one("Ingress");
    let annotations = &ingress["metadata"]["annotations"];
    assert_eq!(
        annotations["nginx.ingress.kubernetes.io/proxy-buffering"],
        "off"
    );
    assert_eq!(
        annotations["nginx.ingress.kubernetes.io/proxy-read-timeout"],
        "3600"
    );
    let spec = &ingress["spec"];
    assert_eq!(spec["ingressClassName"], "nginx");
    assert_eq!(
        spec["tls"],
        json!([{"hosts": ["api.example.com"], "secretName": "api-tls"}])
    );
    assert_eq!(spec["rules"][0]["host"], "api.example.com");
    let backend = &spec["rules"][0]["http"]["paths"][0]["backend"]["service"];
    assert_eq!(&backend["name"], service_name);
    assert_eq!(backend["port"]["name"], port["name"]);

    let route = r.one("HTTPRoute");
    assert_eq!(route["apiVersion"], "gateway.networking.k8s.io/v1");
    assert_eq!(
        route["spec"]["parentRefs"],
        json!([{"name": "eg", "namespace": "envoy-gateway-system"}])
    );
    assert_eq!(route["spec"]["hostnames"], json!(["api.example.com"]));
    let rule = &route["spec"]["rules"][0];
    assert_eq!(
        rule["matches"][0]["path"],
        json!({"type": "PathPrefix", "value": "/"})
    );
    assert_eq!(&rule["backendRefs"][0]["name"], service_name);
    assert_eq!(rule["backendRefs"][0]["port"], port["port"]);
    assert_eq!(rule["timeouts"]["request"], "0s", "streams are not cut");

    let test = r.one("Pod");
    assert_eq!(test["metadata"]["annotations"]["helm.sh/hook"], "test");
    let c = &test["spec"]["containers"][0];
    assert_eq!(
        env_entry(c, "BATON_API_KEY").expect("the key from a Secret")["valueFrom"],
        json!({"secretKeyRef": {"name": "baton-test-key", "key": "api-key"}})
    );
    let script = c["command"][2].as_str().expect("script");
    let base = format!(
        "http://{}:{}",
        service_name.as_str().expect("name"),
        port["port"]
    );
    assert!(script.contains(&format!("base=\"{base}\"")), "{script}");
    assert!(script.contains("\"$base/readyz\""), "{script}");
    assert!(
        script.contains("/v1/me") && script.contains("Bearer"),
        "{script}"
    );
    assert_eq!(test["spec"]["securityContext"]["runAsNonRoot"], true);
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
}
