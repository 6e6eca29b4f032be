//! Slow and greedy clients against the real server: headers or a body that trickle in are
//! cut off at their timeouts instead of holding a connection, and a key may hold only so
//! many event streams open.

use crate::common::TestApp;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Writes `lines` one every `every`, then reads what the server answers until it closes
/// the connection; returns the answer and how long the server took to close.
async fn trickle(
    app: &TestApp,
    head: &str,
    lines: &[String],
    every: Duration,
) -> (String, Duration) {
    let mut conn = TcpStream::connect(app.addr()).await.expect("connect");
    let started = Instant::now();
    conn.write_all(head.as_bytes()).await.expect("write");
    for line in lines {
        tokio::time::sleep(every).await;
        if conn.write_all(line.as_bytes()).await.is_err() {
            break;
        }
    }
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), conn.read_to_end(&mut answer)).await;
    (
        String::from_utf8_lossy(&answer).into_owned(),
        started.elapsed(),
    )
}

#[tokio::test]
async fn headers_that_trickle_in_lose_the_connection_at_the_header_timeout() {
    let app =
        TestApp::embedded_with(|c| c.http.header_read_timeout = Duration::from_millis(600)).await;
    let lines: Vec<String> = (0..40).map(|i| format!("x-slow-{i}: 1\r\n")).collect();
    let (answer, took) = trickle(
        &app,
        "GET /livez HTTP/1.1\r\n",
        &lines,
        Duration::from_millis(250),
    )
    .await;
    assert!(
        took >= Duration::from_millis(500) && took < Duration::from_secs(4),
        "the connection was held for {took:?} while its headers trickled in: {answer:?}"
    );
    assert!(!answer.contains("200 OK"), "{answer}");
    // A client that sends its headers in time is served as ever.
    let (answer, _) = trickle(
        &app,
        "GET /livez HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n",
        &[],
        Duration::ZERO,
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

#[tokio::test]
async fn a_body_that_trickles_in_gets_408_at_the_request_timeout() {
    let app = TestApp::embedded_with(|c| c.http.request_timeout = Duration::from_millis(800)).await;
    let head = "POST /v1/agents HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
                content-length: 400\r\n\r\n{";
    let body: Vec<String> = (0..40).map(|_| " ".to_string()).collect();
    let (answer, took) = trickle(&app, head, &body, Duration::from_millis(250)).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("application/problem+json"), "{answer}");
    assert!(answer.contains("\"code\":\"request_timeout\""), "{answer}");
    assert!(took < Duration::from_secs(5), "{took:?}");
}

#[tokio::test]
async fn a_key_beyond_its_open_stream_limit_gets_429_with_retry_after() {
    let app = TestApp::embedded_with(|c| c.http.sse_streams_per_key = 2).await;
    let api = app.anonymous();
    let agent = api.agent(&[("x", 0, false)]).await;
    let run = api.run(&agent, None).await;
    let open = || async {
        api.req(reqwest::Method::GET, &format!("/v1/runs/{run}/events"))
            .header("accept", "text/event-stream")
            .send()
            .await
            .expect("request")
    };
    let (a, b) = (open().await, open().await);
    assert_eq!((a.status().as_u16(), b.status().as_u16()), (200, 200));
    let refused = open().await;
    assert_eq!(refused.status().as_u16(), 429);
    assert_eq!(refused.headers()["retry-after"], "5");
    drop(a);
    // The server sees the client go at its next write: a keep-alive comment at the latest.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let again = open().await;
        if again.status().as_u16() == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the closed stream's place was never freed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(b);
}
