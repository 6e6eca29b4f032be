//! The HTTP listener: accepts connections (with `TCP_NODELAY`, so small writes go out at
//! once) and serves each with hyper (HTTP/1.1, and HTTP/2 without TLS), giving every
//! request its peer's address. A client must send a request's
//! headers within `http.header_read_timeout_ms` of starting them, so a connection that
//! trickles them in is closed instead of held. On shutdown it stops accepting, lets every
//! connection finish the request it is serving (event streams end on the shutdown token)
//! and returns once all are closed.

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
        let conn = builder
            .serve_connection_with_upgrades(TokioIo::new(stream), TowerToHyperService::new(service))
            .into_owned();
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
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
        let router = Router::new().route(
            "/peer",
            axum::routing::get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move {
                peer.ip().to_string()
            }),
        );
        let shutdown = CancellationToken::new();
        tokio::spawn(serve(
            listener,
            router,
            header_read_timeout,
            shutdown.clone(),
        ));
        (addr, shutdown)
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
