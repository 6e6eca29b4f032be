//! The private NATS server really runs, stops, restarts on its port and dies with its
//! handle.

use baton_testkit::TestNats;
use std::time::Duration;

async fn accepts(port: u16) -> bool {
    tokio::time::timeout(
        Duration::from_secs(2),
        tokio::net::TcpStream::connect(("127.0.0.1", port)),
    )
    .await
    .is_ok_and(|r| r.is_ok())
}

#[tokio::test]
async fn a_test_nats_server_stops_restarts_on_its_port_and_dies_with_its_handle() {
    let mut nats = TestNats::start().await.expect("nats-server");
    let port = nats.port();
    assert_eq!(nats.url(), format!("nats://127.0.0.1:{port}"));
    assert!(nats.is_running() && accepts(port).await);
    let other = TestNats::start().await.expect("a second nats-server");
    assert_ne!(other.port(), port, "each test gets its own server");

    nats.stop();
    assert!(!nats.is_running() && !accepts(port).await);
    nats.stop();

    nats.restart().await.expect("restart");
    assert_eq!(nats.port(), port);
    assert!(nats.is_running() && accepts(port).await);

    drop(nats);
    assert!(!accepts(port).await);
}
