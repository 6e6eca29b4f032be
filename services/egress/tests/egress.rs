//! The outbound client against a real HTTP listener on loopback, standing in for an
//! internal service: the strict policy never connects to it, whether the URL names it by
//! address or by a name that resolves to it; an operator's allowlist opens it; redirects
//! are not followed.

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
            .request(reqwest::Method::GET, &url(&literal), &[])
            .expect_err(&literal);
        assert_eq!(denied.rule, "loopback", "{literal}");
    }
    // A name passes the first check and is refused by what it resolves to: no connection.
    let by_name = url(&format!("http://localhost:{}/secret", addr.port()));
    let req = egress
        .request(reqwest::Method::GET, &by_name, &[])
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
        .request(
            reqwest::Method::GET,
            &url(&format!("http://localhost:{}/secret", addr.port())),
            &[],
        )
        .expect("allowed")
        .send()
        .await
        .expect("reached");
    assert_eq!(answer.text().await.expect("body"), "internal-secret");
    let moved = egress
        .request(
            reqwest::Method::GET,
            &url(&format!("http://127.0.0.1:{}/moved", addr.port())),
            &[],
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
