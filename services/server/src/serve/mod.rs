//! The HTTP listener: accepts connections (with `TCP_NODELAY`, so small writes go out at
//! once) and serves each with hyper (HTTP/1.1, and HTTP/2 without TLS), giving every
//! request its peer's address. A client must send a request's
//! headers within `http.header_read_timeout_ms` of starting them, so a connection that
//! trickles them in is closed instead of held. On shutdown it stops accepting, lets every
//! connection finish the request it is serving (event streams end on the shutdown token)
//! and returns once all are closed. A request head hyper cannot parse gets a problem+json
//! answer, not hyper's empty one ([`unparsable`]).

mod unparsable;

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// A pause after a failed `accept` (out of file descriptors, say), so the loop does not
/// spin while the condition lasts.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Serves `router` on `listener` until `shutdown` is cancelled and every connection has
/// closed.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    header_read_timeout: Duration,
    shutdown: CancellationToken,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout);
    builder.http2().timer(TokioTimer::new());
    let graceful = GracefulShutdown::new();
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            () = shutdown.cancelled() => break,
        };
        // An event stream writes small pieces (the first frames, then each event): with
        // Nagle on, each waits for the client's delayed ACK, some 40 ms.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(%peer, error = %e, "cannot set TCP_NODELAY");
        }
        let service = router.clone().map_request(move |req: Request<Incoming>| {
            let mut req = req.map(Body::new);
            // Login attempts are limited per address, and the audit records it.
            req.extensions_mut().insert(ConnectInfo(peer));
            req
        });
        let (stream, parked) = unparsable::Guarded::new(stream);
        let conn = builder
            .serve_connection_with_upgrades(TokioIo::new(stream), TowerToHyperService::new(service))
            .into_owned();
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            let ended = conn.await;
            if let Err(e) = &ended {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
            unparsable::finish(&parked, ended.as_ref().err().map(|e| &**e), peer).await;
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn server(header_read_timeout: Duration) -> (SocketAddr, CancellationToken) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let router = Router::new()
            .route(
                "/peer",
                axum::routing::get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move {
                    peer.ip().to_string()
                }),
            )
            .route("/lookalike", axum::routing::get(lookalike));
        let shutdown = CancellationToken::new();
        tokio::spawn(serve(
            listener,
            router,
            header_read_timeout,
            shutdown.clone(),
        ));
        (addr, shutdown)
    }

    /// A body that is, byte for byte, hyper's own answer to a head it cannot parse,
    /// written on its own after the response head.
    const LOOKALIKE: &str = "HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n";

    async fn lookalike() -> axum::response::Response {
        let chunk = futures::stream::once(async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            Ok::<_, std::io::Error>(axum::body::Bytes::from_static(LOOKALIKE.as_bytes()))
        });
        axum::response::Response::builder()
            .header("content-length", LOOKALIKE.len())
            .body(Body::from_stream(chunk))
            .expect("a response")
    }

    /// Reads one response with a `content-length` body: its head and its body.
    async fn response(conn: &mut tokio::net::TcpStream) -> (String, String) {
        let mut bytes = Vec::new();
        let mut byte = [0u8; 1];
        while !bytes.ends_with(b"\r\n\r\n") {
            conn.read_exact(&mut byte).await.expect("a response head");
            bytes.push(byte[0]);
        }
        let head = String::from_utf8(bytes).expect("an ASCII head");
        let length = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .and_then(|v| v.trim().parse::<usize>().ok())
            .expect("a content-length");
        let mut body = vec![0u8; length];
        conn.read_exact(&mut body).await.expect("the body");
        (head, String::from_utf8(body).expect("a text body"))
    }

    /// Sends `request` on a new connection and reads what comes back until the server
    /// closes it. The server may answer and close before it has read the whole request.
    async fn answer_to(addr: SocketAddr, request: &[u8]) -> String {
        let mut conn = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let _ = conn.write_all(request).await;
        rest_of(&mut conn).await
    }

    /// What the server sends on `conn` until it closes it.
    async fn rest_of(conn: &mut tokio::net::TcpStream) -> String {
        let mut answer = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), conn.read_to_end(&mut answer))
            .await
            .expect("the server closes the connection")
            .expect("read");
        String::from_utf8(answer).expect("an ASCII answer")
    }

    /// The problem in an answer that ends with one, checked for its status and code.
    fn problem_in(answer: &str, status: u16, code: &str) -> serde_json::Value {
        let start = answer
            .rfind("HTTP/1.1 ")
            .expect("an answer with a status line");
        let (head, body) = answer[start..]
            .split_once("\r\n\r\n")
            .unwrap_or_else(|| panic!("no head: {answer:?}"));
        assert!(head.starts_with(&format!("HTTP/1.1 {status} ")), "{answer}");
        assert!(
            head.contains("content-type: application/problem+json"),
            "{head}"
        );
        let problem: serde_json::Value = serde_json::from_str(body).expect("a JSON body");
        assert_eq!(problem["status"], status, "{problem}");
        assert_eq!(problem["code"], code, "{problem}");
        let id = problem["request_id"].as_str().expect("a request id");
        assert!(head.contains(&format!("x-request-id: {id}")), "{head}");
        problem
    }

    #[tokio::test]
    async fn a_header_hyper_cannot_parse_gets_a_problem_not_an_empty_400() {
        let (addr, shutdown) = server(Duration::from_secs(5)).await;
        let answer = answer_to(
            addr,
            b"GET /peer HTTP/1.1\r\nhost: x\r\nx-bad: a\0b\r\n\r\n",
        )
        .await;
        let problem = problem_in(&answer, 400, "malformed_request");
        assert!(
            problem["detail"]
                .as_str()
                .is_some_and(|d| d.contains("NUL"))
        );
        assert!(
            answer.starts_with("HTTP/1.1 400"),
            "one answer only: {answer}"
        );
        shutdown.cancel();
    }

    #[tokio::test]
    async fn a_head_past_the_read_buffer_gets_a_problem_not_an_empty_431() {
        let (addr, shutdown) = server(Duration::from_secs(5)).await;
        let filler = "x".repeat(512 * 1024);
        let request = format!("GET /peer HTTP/1.1\r\nhost: x\r\nx-filler: {filler}\r\n\r\n");
        let answer = answer_to(addr, request.as_bytes()).await;
        problem_in(&answer, 431, "headers_too_large");
        shutdown.cancel();
    }

    #[tokio::test]
    async fn a_bad_head_after_a_good_request_on_one_connection_gets_a_problem() {
        let (addr, shutdown) = server(Duration::from_secs(5)).await;
        let mut conn = tokio::net::TcpStream::connect(addr).await.expect("connect");
        conn.write_all(b"GET /peer HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .expect("write");
        let (head, body) = response(&mut conn).await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert_eq!(body, "127.0.0.1");
        conn.write_all(b"GET /peer HTTP/1.1\r\nhost: x\r\nx-bad: \0\r\n\r\n")
            .await
            .expect("write");
        problem_in(&rest_of(&mut conn).await, 400, "malformed_request");
        shutdown.cancel();
    }

    #[tokio::test]
    async fn a_body_that_looks_like_hypers_answer_goes_out_unchanged_and_in_order() {
        let (addr, shutdown) = server(Duration::from_secs(5)).await;
        // Kept alive: the body must arrive while the connection waits for the next request.
        let mut conn = tokio::net::TcpStream::connect(addr).await.expect("connect");
        conn.write_all(b"GET /lookalike HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .expect("write");
        let (head, body) = tokio::time::timeout(Duration::from_secs(5), response(&mut conn))
            .await
            .expect("the body arrives on a kept-alive connection");
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert_eq!(body, LOOKALIKE);
        conn.write_all(b"GET /peer HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .expect("write");
        assert_eq!(response(&mut conn).await.1, "127.0.0.1");

        // The last thing written before the server closes the connection.
        let answer = answer_to(
            addr,
            b"GET /lookalike HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(
            answer.ends_with(&format!("\r\n\r\n{LOOKALIKE}")),
            "{answer:?}"
        );

        // Followed by a head that cannot be parsed: the body, then the problem.
        let answer = answer_to(
            addr,
            b"GET /lookalike HTTP/1.1\r\nhost: x\r\n\r\nGET /peer HTTP/1.1\r\nx-bad: \0\r\n\r\n",
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        let problem_at = answer.rfind("HTTP/1.1 400").expect("a 400");
        assert!(answer[..problem_at].ends_with(LOOKALIKE), "{answer:?}");
        problem_in(&answer, 400, "malformed_request");
        shutdown.cancel();
    }

    #[tokio::test]
    async fn headers_that_trickle_in_past_the_timeout_lose_the_connection() {
        let (addr, shutdown) = server(Duration::from_millis(300)).await;
        let mut conn = tokio::net::TcpStream::connect(addr).await.expect("connect");
        conn.write_all(b"GET /peer HTTP/1.1\r\n")
            .await
            .expect("write");
        let started = tokio::time::Instant::now();
        let mut closed = false;
        // One header line every 100 ms: each arrives in time, the whole never does.
        for i in 0..50 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if conn
                .write_all(format!("x-slow-{i}: 1\r\n").as_bytes())
                .await
                .is_err()
            {
                closed = true;
                break;
            }
        }
        if !closed {
            let mut rest = Vec::new();
            let read = tokio::time::timeout(Duration::from_secs(5), conn.read_to_end(&mut rest))
                .await
                .expect("the server closes the connection");
            closed = read.is_ok();
        }
        assert!(closed, "the connection stayed open");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        shutdown.cancel();
    }

    #[tokio::test]
    async fn a_request_in_time_is_served_with_its_peer_address() {
        let (addr, shutdown) = server(Duration::from_secs(5)).await;
        let mut conn = tokio::net::TcpStream::connect(addr).await.expect("connect");
        conn.write_all(b"GET /peer HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .expect("write");
        let mut answer = String::new();
        conn.read_to_string(&mut answer).await.expect("read");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with("127.0.0.1"), "{answer}");
        shutdown.cancel();
    }
}
