//! The database going away under a running team-tier replica: with its connections refused
//! (a proxy in front of Postgres, stopped), `/readyz` and requests answer `503` at once,
//! well inside the chart's readiness probe timeout, not after the pool's acquire timeout;
//! once the database is back the replica serves again without a restart.

use crate::common::TestApp;
use baton_server::config::Storage;
use baton_testkit::TcpProxy;
use secrecy::{ExposeSecret, SecretString};
use std::time::{Duration, Instant};

/// What the chart gives the readiness probe before it counts a failure.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

#[tokio::test]
async fn with_postgres_refusing_connections_requests_and_readyz_answer_503_at_once() {
    let mut proxy = None;
    let app = TestApp::team_with(&baton_testkit::replicas::nats_url(), |c| {
        let Storage::Postgres { url, .. } = &mut c.storage else {
            panic!("the team tier stores in Postgres");
        };
        let mut real: url::Url = url.expose_secret().parse().expect("a DSN");
        let target = std::net::ToSocketAddrs::to_socket_addrs(&(
            real.host_str().unwrap_or("127.0.0.1").to_string(),
            real.port().unwrap_or(5432),
        ))
        .expect("resolve")
        .next()
        .expect("an address");
        let p = futures::executor::block_on(TcpProxy::to(target)).expect("proxy");
        real.set_host(Some("127.0.0.1")).expect("host");
        real.set_port(Some(p.addr().port())).expect("port");
        *url = SecretString::from(real.to_string());
        proxy = Some(p);
    })
    .await;
    let mut proxy = proxy.expect("the proxy");
    let (_, api) = app.tenant(baton_core::Role::Admin).await;
    assert_eq!(api.get("/readyz").await.status, 200);
    assert_eq!(api.get("/v1/agents").await.status, 200);

    proxy.stop();
    for path in ["/readyz", "/v1/agents", "/readyz"] {
        let started = Instant::now();
        let r = api.get(path).await;
        let took = started.elapsed();
        assert_eq!(r.status, 503, "{path}: {}", r.body);
        assert!(
            took < PROBE_TIMEOUT / 2,
            "{path} took {took:?} to say the database is away"
        );
    }

    proxy.start().await.expect("the database is back");
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if api.get("/readyz").await.status == 200 && api.get("/v1/agents").await.status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "the replica did not recover");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
