//! The forms a hostile tenant writes an internal address in, the categories each falls
//! in, and how the operator's and the tenant's lists change the verdict.

use super::*;

fn url(text: &str) -> url::Url {
    url::Url::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn rules(texts: &[&str]) -> Vec<HostRule> {
    texts
        .iter()
        .map(|t| HostRule::parse(t).expect("a valid rule"))
        .collect()
}

#[test]
fn every_spelling_of_an_internal_address_is_refused_by_the_strict_policy() {
    let strict = EgressPolicy::strict();
    let cases = [
        ("http://127.0.0.1:8080/x", "loopback"),
        ("http://127.1/", "loopback"),
        ("http://2130706433/", "loopback"),
        ("http://0x7f.1/", "loopback"),
        ("http://0177.0.0.1/", "loopback"),
        ("http://[::1]/", "loopback"),
        ("http://[::ffff:127.0.0.1]/", "loopback"),
        ("http://[::ffff:7f00:1]/", "loopback"),
        ("http://[64:ff9b::7f00:1]/", "loopback"),
        ("http://[2002:7f00:1::]/", "loopback"),
        ("http://0.0.0.0/", "unspecified"),
        ("http://0/", "unspecified"),
        ("http://[::]/", "unspecified"),
        ("http://169.254.169.254/latest/meta-data/", "link-local"),
        ("http://[fe80::1]/", "link-local"),
        ("http://[fd00:ec2::254]/", "private"),
        ("http://10.0.0.5/", "private"),
        ("http://172.16.3.4/", "private"),
        ("http://192.168.1.1/", "private"),
        ("http://100.64.0.1/", "shared address space (CGNAT)"),
        ("http://224.0.0.1/", "multicast"),
        ("http://[ff02::1]/", "multicast"),
        ("http://255.255.255.255/", "broadcast"),
        ("http://198.18.0.1/", "reserved"),
    ];
    for (text, rule) in cases {
        let denied = strict.check_url(&url(text), &[]).expect_err(text);
        assert_eq!(denied.rule, rule, "{text}");
    }
}

#[test]
fn a_refusal_names_the_rule_never_the_address() {
    let denied = EgressPolicy::strict()
        .admit(["10.9.8.7".parse().expect("ip")])
        .expect_err("private");
    assert_eq!(denied.to_string(), "egress denied: private");
    assert!(!denied.to_string().contains("10.9.8.7"));
}

#[test]
fn public_addresses_and_names_pass_and_names_are_judged_again_by_their_addresses() {
    let strict = EgressPolicy::strict();
    for ok in [
        "https://api.openai.com/v1",
        "http://93.184.216.34/",
        "http://[2606:4700::1111]/",
        "http://localhost:9000/",
    ] {
        assert!(strict.check_url(&url(ok), &[]).is_ok(), "{ok}");
    }
    // A name is refused by what it resolves to, at connect time.
    let resolved = ["127.0.0.1".parse().expect("ip")];
    assert_eq!(
        strict.admit(resolved).map_err(|d| d.rule),
        Err("loopback".into())
    );
    let mixed: [IpAddr; 2] = [
        "10.0.0.1".parse().expect("ip"),
        "8.8.8.8".parse().expect("ip"),
    ];
    assert_eq!(
        strict.admit(mixed).expect("one admitted"),
        vec![mixed[1]],
        "only the admitted addresses are connected to"
    );
    assert!(strict.admit([]).is_err());
}

#[test]
fn urls_must_be_http_and_carry_no_credentials() {
    let local = EgressPolicy::local();
    for (text, rule) in [
        ("ftp://example.com/", "only http and https URLs"),
        ("file:///etc/passwd", "only http and https URLs"),
        (
            "http://user:pass@example.com/",
            "credentials in the URL (send them as a secret header)",
        ),
        (
            "http://user:pass@127.0.0.1/",
            "credentials in the URL (send them as a secret header)",
        ),
    ] {
        assert_eq!(
            local.check_url(&url(text), &[]).map_err(|d| d.rule),
            Err(rule.to_string()),
            "{text}"
        );
    }
}

#[test]
fn the_embedded_policy_allows_loopback_and_nothing_else_more() {
    let local = EgressPolicy::local();
    assert!(local.check_url(&url("http://127.0.0.1:9000/"), &[]).is_ok());
    assert!(local.check_url(&url("http://[::1]/"), &[]).is_ok());
    assert!(
        local
            .check_url(&url("http://169.254.169.254/"), &[])
            .is_err()
    );
    assert!(local.check_url(&url("http://192.168.0.10/"), &[]).is_err());
}

#[test]
fn the_operators_allowlist_admits_and_its_denylist_refuses_first() {
    let policy = EgressPolicy {
        allow: rules(&["10.20.0.0/16", "127.0.0.1"]),
        deny: rules(&[
            "10.20.5.0/24",
            "93.184.216.34",
            "*.corp.example",
            "evil.example",
        ]),
        ..EgressPolicy::strict()
    };
    assert!(policy.check_ip("10.20.1.1".parse().expect("ip")).is_ok());
    assert!(policy.check_ip("127.0.0.1".parse().expect("ip")).is_ok());
    assert_eq!(
        policy
            .check_ip("127.0.0.2".parse().expect("ip"))
            .map_err(|d| d.rule),
        Err("loopback".into())
    );
    assert_eq!(
        policy
            .check_ip("10.20.5.9".parse().expect("ip"))
            .map_err(|d| d.rule),
        Err("the operator's denylist (10.20.5.0/24)".into())
    );
    assert!(
        policy
            .check_ip("93.184.216.34".parse().expect("ip"))
            .is_err()
    );
    for host in ["https://db.corp.example/", "http://EVIL.example./"] {
        assert!(policy.check_url(&url(host), &[]).is_err(), "{host}");
    }
    assert!(policy.check_url(&url("https://corp.example/"), &[]).is_ok());
}

#[test]
fn the_replicas_own_addresses_are_refused_even_on_loopback() {
    let policy = EgressPolicy {
        own_addresses: vec![
            "203.0.113.7".parse().expect("ip"),
            "127.0.0.1".parse().expect("ip"),
        ],
        ..EgressPolicy::local()
    };
    assert_eq!(
        policy
            .check_url(&url("http://203.0.113.7/"), &[])
            .map_err(|d| d.rule),
        Err("the replica's own address".into())
    );
    assert!(policy.check_ip("127.0.0.1".parse().expect("ip")).is_err());
    assert!(policy.check_ip("127.0.0.2".parse().expect("ip")).is_ok());
}

#[test]
fn a_tenants_allowlist_only_narrows() {
    let policy = EgressPolicy::strict();
    let tenant = rules(&["api.example.com", "*.tools.example", "93.184.216.0/24"]);
    for ok in [
        "https://api.example.com/x",
        "https://a.tools.example/",
        "http://93.184.216.34/",
    ] {
        assert!(policy.check_url(&url(ok), &tenant).is_ok(), "{ok}");
    }
    for refused in [
        "https://other.example/",
        "https://tools.example/",
        "http://8.8.8.8/",
    ] {
        assert_eq!(
            policy.check_url(&url(refused), &tenant).map_err(|d| d.rule),
            Err("not in the tenant's egress allowlist".into()),
            "{refused}"
        );
    }
    // Naming an internal range does not open it.
    let inside = rules(&["10.0.0.0/8"]);
    assert_eq!(
        policy
            .check_url(&url("http://10.1.2.3/"), &inside)
            .map_err(|d| d.rule),
        Err("private".into())
    );
}

#[test]
fn rules_parse_ranges_addresses_names_and_domains_and_refuse_the_rest() {
    assert_eq!(
        HostRule::parse("10.1.2.3/8").expect("range").to_string(),
        "10.0.0.0/8"
    );
    assert_eq!(
        HostRule::parse("::1").expect("address").to_string(),
        "::1/128"
    );
    assert_eq!(
        HostRule::parse("*.Example.COM").expect("domain"),
        HostRule::Suffix("example.com".into())
    );
    for bad in ["", "*.", "a b", "http://x", "-a.example", "x..y"] {
        assert!(HostRule::parse(bad).is_err(), "{bad:?}");
    }
}
