//! Problem+json for request heads the HTTP server cannot parse.
//!
//! hyper answers such a head itself, before any service runs: `400` for a request or
//! header line it cannot parse (a NUL byte in a value), `414` for a target over 64 KiB,
//! `431` for a head larger than its read buffer; an empty body, then it closes the
//! connection. It has no hook for that answer, so [`Guarded`] recognises it on the way
//! out: a write that is exactly such an answer (the status line, `content-length: 0`,
//! `date`, nothing else) is held back instead of sent. Anything hyper does next (another
//! write, a read) sends the held bytes first, so a response body that merely looks like
//! that answer goes out unchanged and in order. When the connection ends with the bytes
//! still held, [`Parked`] carries them and the socket to the accept loop, which knows
//! from hyper's error whether it was a parse failure: then it sends a problem+json answer
//! in their place ([`answer`]), otherwise the held bytes as they were.

use axum::http::StatusCode;
use baton_api::error::{Code, PROBLEM_JSON, Problem};
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

/// hyper's automatic answers are a status line and two short headers.
const MAX_AUTOMATIC_ANSWER: usize = 256;

/// How long the replacement answer may take to write before the socket is dropped.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the rest of a refused request is read and dropped after the answer.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(1);

/// The most of a refused request that is read and dropped after the answer.
const MAX_DRAIN: usize = 1024 * 1024;

/// The socket and the bytes still held when hyper let go of the connection.
pub(crate) struct Parked {
    stream: TcpStream,
    held: Vec<u8>,
}

/// Where a [`Guarded`] connection leaves its [`Parked`] socket when it is dropped.
pub(crate) type Slot = Arc<Mutex<Option<Parked>>>;

/// A socket that holds back what looks like hyper's automatic answer to a bad head.
pub(crate) struct Guarded {
    stream: Option<TcpStream>,
    held: Vec<u8>,
    slot: Slot,
}

impl Guarded {
    pub(crate) fn new(stream: TcpStream) -> (Self, Slot) {
        let slot = Slot::default();
        let guarded = Self {
            stream: Some(stream),
            held: Vec::new(),
            slot: slot.clone(),
        };
        (guarded, slot)
    }

    fn socket(&mut self) -> Pin<&mut TcpStream> {
        socket(&mut self.stream)
    }

    /// Sends whatever is held, before anything else is read or written.
    fn poll_release(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.held.is_empty() {
            match ready!(socket(&mut self.stream).poll_write(cx, &self.held))? {
                0 => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                n => drop(self.held.drain(..n)),
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncRead for Guarded {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_release(cx))?;
        this.socket().poll_read(cx, buf)
    }
}

impl AsyncWrite for Guarded {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_release(cx))?;
        if automatic_answer(buf).is_some() {
            this.held = buf.to_vec();
            return Poll::Ready(Ok(buf.len()));
        }
        this.socket().poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_release(cx))?;
        let mut filled = bufs.iter().filter(|b| !b.is_empty());
        if let (Some(only), None) = (filled.next(), filled.next())
            && automatic_answer(only).is_some()
        {
            this.held = only.to_vec();
            return Poll::Ready(Ok(only.len()));
        }
        this.socket().poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.as_ref().is_some_and(|s| s.is_write_vectored())
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Held bytes stay held: hyper flushes its automatic answer before it lets go.
        self.get_mut().socket().poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.held.is_empty() {
            // The accept loop answers and closes once it knows why the connection ended.
            return Poll::Ready(Ok(()));
        }
        this.socket().poll_shutdown(cx)
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        if self.held.is_empty() {
            return;
        }
        if let Some(stream) = self.stream.take() {
            let held = std::mem::take(&mut self.held);
            if let Ok(mut slot) = self.slot.lock() {
                *slot = Some(Parked { stream, held });
            }
        }
    }
}

/// The socket of a [`Guarded`]: present until `drop`, the only place that takes it.
fn socket(stream: &mut Option<TcpStream>) -> Pin<&mut TcpStream> {
    Pin::new(stream.as_mut().expect("the stream is taken only on drop"))
}

/// The status of `bytes` when they are exactly one of hyper's automatic answers.
fn automatic_answer(bytes: &[u8]) -> Option<StatusCode> {
    if bytes.len() > MAX_AUTOMATIC_ANSWER || !bytes.starts_with(b"HTTP/1.1 4") {
        return None;
    }
    let text = std::str::from_utf8(bytes).ok()?;
    let head = text.strip_suffix("\r\n\r\n")?;
    let mut lines = head.split("\r\n");
    let status = match lines.next()? {
        "HTTP/1.1 400 Bad Request" => StatusCode::BAD_REQUEST,
        "HTTP/1.1 414 URI Too Long" => StatusCode::URI_TOO_LONG,
        "HTTP/1.1 431 Request Header Fields Too Large" => {
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
        }
        _ => return None,
    };
    let mut empty = false;
    for line in lines {
        let (name, value) = line.split_once(": ")?;
        match name.to_ascii_lowercase().as_str() {
            "content-length" if value == "0" => empty = true,
            "date" | "connection" => {}
            _ => return None,
        }
    }
    empty.then_some(status)
}

/// Finishes a connection that ended (with `error`, if any) while its socket held bytes
/// back, if it did: a problem+json answer in place of hyper's empty one when the
/// connection failed to parse a head, the held bytes unchanged otherwise. Then the socket
/// is closed.
pub(crate) async fn finish(
    slot: &Slot,
    error: Option<&(dyn std::error::Error + Send + Sync + 'static)>,
    peer: std::net::SocketAddr,
) {
    let Some(Parked { mut stream, held }) = slot.lock().ok().and_then(|mut p| p.take()) else {
        return;
    };
    let parse_failed = error
        .and_then(|e| e.downcast_ref::<hyper::Error>())
        .is_some_and(hyper::Error::is_parse);
    let answer = match automatic_answer(&held) {
        Some(status) if parse_failed => {
            let request_id = uuid::Uuid::new_v4().to_string();
            tracing::info!(
                target: "baton_api::access",
                %peer,
                http.response.status_code = status.as_u16(),
                request_id,
                "request head refused before routing"
            );
            answer(status, &request_id)
        }
        _ => held,
    };
    let write = async {
        stream.write_all(&answer).await?;
        stream.shutdown().await
    };
    if let Err(e) = tokio::time::timeout(ANSWER_TIMEOUT, write)
        .await
        .unwrap_or_else(|_| Err(io::ErrorKind::TimedOut.into()))
    {
        tracing::debug!(%peer, error = %e, "answering a request head failed");
        return;
    }
    // Closing a socket with unread bytes makes the kernel reset the connection, and the
    // reset may reach the client before it has read the answer: what it still sends of
    // its request is read and dropped first, for a while.
    let drain = async {
        let mut sink = [0u8; 8192];
        let mut drained = 0;
        while drained < MAX_DRAIN {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => drained += n,
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_TIMEOUT, drain).await;
}

/// The whole problem+json answer (head and body) for one of hyper's statuses; the
/// request id is the one the log line of the refusal names.
fn answer(status: StatusCode, request_id: &str) -> Vec<u8> {
    let (code, detail) = match status {
        StatusCode::URI_TOO_LONG => (
            Code::UriTooLong,
            "the request target is longer than the server parses (64 KiB)",
        ),
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => (
            Code::HeadersTooLarge,
            "the request head is larger than the server reads (about 400 KiB)",
        ),
        _ => (
            Code::MalformedRequest,
            "the request line or a header line cannot be parsed \
             (a NUL, CR or LF byte in a header value, for one)",
        ),
    };
    let problem = Problem {
        request_id: Some(request_id.to_owned()),
        ..Problem::new(code, detail)
    };
    let body = serde_json::to_vec(&problem).unwrap_or_default();
    let mut out = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: {PROBLEM_JSON}\r\ncontent-length: {}\r\n\
         x-request-id: {request_id}\r\nconnection: close\r\n\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or("Error"),
        body.len(),
    )
    .into_bytes();
    out.extend_from_slice(&body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hypers_exact_answers_are_recognised() {
        let date = "date: Sun, 06 Dec 2026 02:00:00 GMT";
        let answer = |status: &str, headers: &str| format!("HTTP/1.1 {status}\r\n{headers}\r\n");
        for (status, want) in [
            ("400 Bad Request", StatusCode::BAD_REQUEST),
            ("414 URI Too Long", StatusCode::URI_TOO_LONG),
            (
                "431 Request Header Fields Too Large",
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            ),
        ] {
            let bytes = answer(status, &format!("content-length: 0\r\n{date}\r\n"));
            assert_eq!(automatic_answer(bytes.as_bytes()), Some(want), "{bytes}");
        }
        for not in [
            // A body, another header, another status, no end of head, no length.
            answer("400 Bad Request", "content-length: 2\r\n") + "{}",
            answer(
                "400 Bad Request",
                "content-length: 0\r\ncontent-type: x\r\n",
            ),
            answer("404 Not Found", "content-length: 0\r\n"),
            "HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n".to_string(),
            answer("400 Bad Request", &format!("{date}\r\n")),
            answer("400 Bad Request", "content-length: 0\r\n") + "x",
        ] {
            assert_eq!(automatic_answer(not.as_bytes()), None, "{not:?}");
        }
    }

    #[test]
    fn the_replacement_is_a_complete_problem_answer() {
        let bytes = answer(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, "r-1");
        let text = String::from_utf8(bytes).expect("utf-8");
        let (head, body) = text.split_once("\r\n\r\n").expect("a head");
        assert!(head.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"));
        assert!(head.contains(&format!("content-length: {}\r\n", body.len())));
        let problem: serde_json::Value = serde_json::from_str(body).expect("json");
        assert_eq!(problem["code"], "headers_too_large");
        assert_eq!(problem["status"], 431);
        assert_eq!(problem["request_id"], "r-1");
        assert!(head.contains("x-request-id: r-1\r\n"));
    }
}
