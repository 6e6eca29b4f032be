//! The console across SIGTERM of the replica a run's page streams from: two team-tier
//! replicas behind one address (a proxy sending each connection to the first that
//! accepts it), a page following a run in a real browser (`tests/browser/
//! console_failover.py`, chromium driven by Playwright), the first replica stopped
//! mid-turn: the page goes on through the other and shows every event once, in order.

use crate::support::{FAST_LEASES, start_cluster};
use baton_testkit::proxy::TcpProxy;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
const PASSWORD: &str = "correct horse battery staple";

#[tokio::test]
async fn a_runs_page_survives_sigterm_of_the_replica_it_streams_from() {
    let Some(python) = baton_testkit::browser::python(Path::new(ROOT)).await else {
        return;
    };
    let mut env = FAST_LEASES.to_vec();
    env.push(("BATON_HTTP__SHUTDOWN_GRACE_SECS", "10"));
    let (mut cluster, apis) = start_cluster(2, &env, None).await;
    cluster
        .create_user("ada@example.com", PASSWORD, "acme", "owner")
        .await
        .expect("a user");
    let addr = |i: usize| -> SocketAddr {
        cluster.base_url(i)["http://".len()..]
            .parse()
            .expect("a replica's address")
    };
    let proxy = TcpProxy::to_any(vec![addr(0), addr(1)])
        .await
        .expect("the proxy");
    // The first reply takes long enough for the page to be following the turn when the
    // replica stops. The first replica takes the run (the replica a message reaches
    // starts its turn), so it both drives the turn and serves the page's stream when it
    // stops; the second message's turn is the other's.
    let agent = apis[0]
        .agent(&[("one", 8_000, false), ("two", 300, false)])
        .await;
    let run = apis[0].run(&agent, Some("first")).await;

    let base = format!("http://{}", proxy.addr());
    let pid = cluster.pid(0).to_string();
    let env = [
        ("BATON", base.as_str()),
        ("RUN", &run),
        ("EMAIL", "ada@example.com"),
        ("PASSWORD", PASSWORD),
        ("PID", &pid),
    ];
    let limit = Duration::from_secs(120);
    let text =
        baton_testkit::browser::run(Path::new(ROOT), &python, "console_failover.py", &env, limit)
            .await;
    println!("{text}");
    let exited = cluster
        .wait_exit(0, Duration::from_secs(20))
        .await
        .expect("the first replica exits");
    assert!(
        exited.success(),
        "the first replica drained and exited: {exited}"
    );
}
