//! The outbound client against a real HTTP listener on loopback, standing in for an
//! internal service: the strict policy never connects to it, whether the URL names it by
//! address or by a name that resolves to it; an operator's allowlist opens it; a tenant's
//! allowlist narrows the policy and never widens it; redirects are not followed.

use axum::Router;
use axum::routing::get;
use baton_egress::Egress;
use baton_egress::egress::{EgressPolicy, HostRule};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A listener that counts the requests it gets and answers a secret, or redirects.
async fn internal_service() -> (SocketAddr, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    let router = Router::new()
        .route(
            "/secret",
            get(move || {
                counted.fetch_add(1, Ordering::SeqCst);
                async { "internal-secret" }
            }),
        )
        .route(
            "/moved",
            get(|| async { axum::response::Redirect::temporary("/secret") }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, router).await });
    (addr, hits)
}

fn url(text: &str) -> url::Url {
    url::Url::parse(text).expect("url")
}

#[tokio::test]
async fn the_strict_policy_never_connects_to_loopback_by_address_or_by_name() {
    let (addr, hits) = internal_service().await;
    let egress = Egress::new(EgressPolicy::strict()).expect("client");
    for literal in [
        format!("http://127.0.0.1:{}/secret", addr.port()),
        format!("http://127.1:{}/secret", addr.port()),
        format!("http://2130706433:{}/secret", addr.port()),
        format!("http://[::ffff:127.0.0.1]:{}/secret", addr.port()),
    ] {
        let denied = egress
            .for_tenant(vec![])
            .request(reqwest::Method::GET, &url(&literal))
            .expect_err(&literal);
        assert_eq!(denied.rule, "loopback", "{literal}");
    }
    // A name passes the first check and is refused by what it resolves to: no connection.
    let by_name = url(&format!("http://localhost:{}/secret", addr.port()));
    let req = egress
        .for_tenant(vec![])
        .request(reqwest::Method::GET, &by_name)
        .expect("a name is judged at connect time");
    let err = req.send().await.expect_err("refused at connect time");
    let denied = Egress::denied(&err).expect("refused by the policy");
    assert_eq!(denied.rule, "loopback");
    assert!(
        !err.to_string().contains("127.0.0.1") && !denied.to_string().contains("127.0.0.1"),
        "{err}"
    );
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "the internal service was reached"
    );
}

#[tokio::test]
async fn an_operators_allowlist_opens_an_internal_service_and_redirects_stay_unfollowed() {
    let (addr, hits) = internal_service().await;
    let policy = EgressPolicy {
        allow: vec![HostRule::parse("127.0.0.1").expect("rule")],
        ..EgressPolicy::strict()
    };
    let egress = Egress::new(policy).expect("client");
    let answer = egress
        .for_tenant(vec![])
        .request(
            reqwest::Method::GET,
            &url(&format!("http://localhost:{}/secret", addr.port())),
        )
        .expect("allowed")
        .send()
        .await
        .expect("reached");
    assert_eq!(answer.text().await.expect("body"), "internal-secret");
    let moved = egress
        .for_tenant(vec![])
        .request(
            reqwest::Method::GET,
            &url(&format!("http://127.0.0.1:{}/moved", addr.port())),
        )
        .expect("allowed")
        .send()
        .await
        .expect("answered");
    assert_eq!(
        moved.status().as_u16(),
        307,
        "the redirect is handed back, not followed"
    );
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_tenants_allowlist_narrows_the_policy_and_never_widens_it() {
    let (addr, hits) = internal_service().await;
    let rule = |r: &str| HostRule::parse(r).expect("rule");
    let open = Egress::new(EgressPolicy {
        allow: vec![rule("127.0.0.1")],
        ..EgressPolicy::strict()
    })
    .expect("client");
    let secret = |host: &str| url(&format!("http://{host}:{}/secret", addr.port()));

    // Open to the installation, but not on the tenant's list: refused before connecting.
    let elsewhere = open.for_tenant(vec![rule("api.example.com"), rule("203.0.113.0/24")]);
    for host in ["localhost", "127.0.0.1"] {
        let denied = elsewhere
            .request(reqwest::Method::GET, &secret(host))
            .expect_err(host);
        assert_eq!(
            denied.rule, "not in the tenant's egress allowlist",
            "{host}"
        );
    }
    // On its list, by the name as written or by the address: reached.
    for (hosts, host) in [
        (vec![rule("localhost")], "localhost"),
        (vec![rule("127.0.0.0/8")], "127.0.0.1"),
    ] {
        let answer = open
            .for_tenant(hosts)
            .request(reqwest::Method::GET, &secret(host))
            .expect(host)
            .send()
            .await
            .expect("reached");
        assert_eq!(answer.status().as_u16(), 200, "{host}");
    }
    assert_eq!(hits.load(Ordering::SeqCst), 2);

    // A tenant listing loopback under the strict policy gains nothing.
    let strict = Egress::new(EgressPolicy::strict()).expect("client");
    let listed = strict.for_tenant(vec![rule("127.0.0.1"), rule("localhost")]);
    let denied = listed
        .request(reqwest::Method::GET, &secret("127.0.0.1"))
        .expect_err("loopback");
    assert_eq!(denied.rule, "loopback");
    let err = listed
        .request(reqwest::Method::GET, &secret("localhost"))
        .expect("judged at connect time")
        .send()
        .await
        .expect_err("refused at connect time");
    assert_eq!(
        Egress::denied(&err).map(|d| d.rule),
        Some("loopback".into())
    );
    assert_eq!(
        hits.load(Ordering::SeqCst),
        2,
        "the strict policy was widened"
    );
}

#[tokio::test]
async fn a_request_that_could_not_be_built_or_connected_was_never_sent() {
    let (addr, hits) = internal_service().await;
    let policy = EgressPolicy {
        allow: vec![HostRule::parse("127.0.0.1").expect("rule")],
        ..EgressPolicy::strict()
    };
    let egress = Egress::new(policy).expect("client");
    let tenant = egress.for_tenant(vec![]);
    let target = url(&format!("http://127.0.0.1:{}/secret", addr.port()));
    let bad_header = tenant
        .request(reqwest::Method::GET, &target)
        .expect("allowed")
        .header("X-Bad", "line\nbreak")
        .send()
        .await
        .expect_err("a header with a line break is refused");
    assert!(!baton_egress::maybe_sent(&bad_header), "{bad_header:?}");
    // A port nothing listens on: refused while connecting.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let closed_port = closed.local_addr().expect("addr").port();
    drop(closed);
    let refused = tenant
        .request(
            reqwest::Method::GET,
            &url(&format!("http://127.0.0.1:{closed_port}/secret")),
        )
        .expect("allowed")
        .send()
        .await
        .expect_err("nothing listens");
    assert!(!baton_egress::maybe_sent(&refused), "{refused:?}");
    assert_eq!(baton_egress::describe(&refused), "could not connect");
    assert_eq!(hits.load(Ordering::SeqCst), 0);
}
