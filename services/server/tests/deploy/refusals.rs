//! Renders that must fail: missing requirements, secrets in values, settings the chart owns
//! or baton does not know, and contradictory options, each refused with a message naming it.

use crate::render::{DSN_SECRET, merged, required};
use crate::tools::tools;
use serde_json::json;

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
            "no keyring",
            merged(dsn.clone(), nats.clone()),
            "encryption.existingSecret is required",
        ),
        (
            "an Ingress without a host",
            merged(required(), json!({"ingress": {"enabled": true}})),
            "ingress.host is required",
        ),
        (
            "an HTTPRoute without a Gateway",
            merged(required(), json!({"httpRoute": {"enabled": true}})),
            "httpRoute.parentRefs is required",
        ),
        (
            "no active key",
            merged(required(), json!({"encryption": {"activeKey": ""}})),
            "encryption.activeKey is required",
        ),
        (
            "an active key id baton refuses",
            merged(required(), json!({"encryption": {"activeKey": "k 1"}})),
            "activeKey",
        ),
        (
            "NATS credentials in values",
            merged(
                dsn.clone(),
                json!({"nats": {"url": "nats://baton:pw@nats:4222"}}),
            ),
            "nats.url carries credentials",
        ),
        (
            "two ways to authenticate to NATS",
            merged(
                required(),
                json!({"nats": {"auth": {"existingSecret": "n", "tokenKey": "t", "nkeySeedKey": "s"}}}),
            ),
            "one way to authenticate to NATS",
        ),
        (
            "a NATS user without a password",
            merged(
                required(),
                json!({"nats": {"auth": {"existingSecret": "n", "user": "baton"}}}),
            ),
            "go together",
        ),
        (
            "NATS credentials without their Secret",
            merged(required(), json!({"nats": {"auth": {"tokenKey": "t"}}})),
            "nats.auth.existingSecret must name",
        ),
        (
            "a NATS client certificate without its Secret",
            merged(required(), json!({"nats": {"tls": {"clientCert": true}}})),
            "nats.tls.clientCert needs",
        ),
        (
            "a subject prefix NATS would misread",
            merged(
                required(),
                json!({"config": {"bus": {"subject_prefix": "acme.>"}}}),
            ),
            "subject_prefix",
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
