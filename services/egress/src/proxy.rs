//! The egress proxy of networked workspace commands: an HTTP proxy on a Unix socket, one
//! per command, bound into its sandbox (where `baton_sandbox::relay` passes the command's
//! connections to it). Every destination is judged as any other call a tenant chose: the
//! installation's policy and the tenant's allowlist by name, then each address the name
//! resolves to, at connect time. Nothing else leaves the sandbox.
//!
//! It speaks the two forms HTTP clients use through a proxy: `CONNECT host:port` (a
//! tunnel, for HTTPS: the proxy never sees what passes through it) and plain `http://`
//! requests in absolute form, sent on in origin form with `Connection: close`, so one
//! connection carries requests to one checked host only. A refusal answers `403` naming
//! the rule, a failure to connect `502`; neither tells an address.

use crate::TenantEgress;
use baton_core::egress::Denied;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixListener, UnixStream};
use tokio::task::{JoinHandle, JoinSet};

/// The longest request head the proxy reads.
const MAX_HEAD: usize = 16 << 10;

/// A proxy serving one command; dropping it closes the socket and every connection.
#[derive(Debug)]
pub struct Proxy {
    dir: PathBuf,
    path: PathBuf,
    task: JoinHandle<()>,
}

impl Proxy {
    /// Listens on a socket in a new directory under `parent` and serves under `egress`.
    /// The directory may be passed through but not listed (the sandbox's user binds the
    /// socket by its name); the socket may be connected to by whoever reaches it.
    pub fn start(parent: &Path, egress: TenantEgress) -> io::Result<Self> {
        use std::os::unix::fs::PermissionsExt;
        let dir = parent.join(format!("egress-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir(&dir)?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711))?;
        let path = dir.join("egress.sock");
        let bound = UnixListener::bind(&path).and_then(|listener| {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666))?;
            Ok(listener)
        });
        let listener = match bound {
            Ok(l) => l,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
        };
        let task = tokio::spawn(serve(listener, egress));
        Ok(Self { dir, path, task })
    }

    /// The socket, to bind into the sandbox.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Accepts until aborted; the connections end with it.
async fn serve(listener: UnixListener, egress: TenantEgress) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => {
                    connections.spawn(handle(client, egress.clone()));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "the egress proxy stopped accepting");
                    return;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Where a request goes, and what to send there first.
#[derive(Debug, PartialEq, Eq)]
struct Target {
    url: url::Url,
    /// `None` for a tunnel (answer `200` and splice); else the request head to send on.
    head: Option<Vec<u8>>,
}

async fn handle(mut client: UnixStream, egress: TenantEgress) {
    let (head, rest) = match read_head(&mut client).await {
        Ok(Some(read)) => read,
        Ok(None) | Err(_) => return,
    };
    let target = match parse(&head) {
        Ok(t) => t,
        Err(why) => return answer(&mut client, "400 Bad Request", why).await,
    };
    let mut upstream = match egress.connect(&target.url).await {
        Ok(stream) => stream,
        Err(Refusal::Denied(denied)) => {
            return answer(&mut client, "403 Forbidden", &denied.to_string()).await;
        }
        Err(Refusal::Failed(why)) => return answer(&mut client, "502 Bad Gateway", why).await,
    };
    let sent = match &target.head {
        None => {
            client
                .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .await
        }
        Some(head) => upstream.write_all(head).await,
    };
    if sent.is_err() || upstream.write_all(&rest).await.is_err() {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
}

async fn answer(client: &mut UnixStream, status: &str, why: &str) {
    let body = format!("{why}\n");
    let text = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = client.write_all(text.as_bytes()).await;
    let _ = client.shutdown().await;
}

/// The request head (through its blank line) and whatever came after it; `None` when
/// the client left first, an error when the head is too long.
async fn read_head(client: &mut UnixStream) -> io::Result<Option<(Vec<u8>, Vec<u8>)>> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    loop {
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(end + 4);
            return Ok(Some((buf, rest)));
        }
        if buf.len() > MAX_HEAD {
            return Err(io::Error::other("request head too long"));
        }
    }
}

/// The target of a proxy request head.
fn parse(head: &[u8]) -> Result<Target, &'static str> {
    let text = std::str::from_utf8(head).map_err(|_| "the request head is not UTF-8")?;
    let mut lines = text.split("\r\n");
    let first = lines.next().unwrap_or_default();
    let mut parts = first.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("the request line is not `METHOD target HTTP/1.x`");
    };
    if !version.starts_with("HTTP/1.") {
        return Err("only HTTP/1.x requests");
    }
    if method == "CONNECT" {
        let url = url::Url::parse(&format!("https://{target}/"))
            .map_err(|_| "CONNECT takes host:port")?;
        if url.port().is_none() && !target.ends_with(":443") {
            return Err("CONNECT takes host:port");
        }
        if url.path() != "/" || url.query().is_some() || !url.username().is_empty() {
            return Err("CONNECT takes host:port");
        }
        return Ok(Target { url, head: None });
    }
    if !target.starts_with("http://") {
        return Err("a proxy request names an http:// URL (use CONNECT for https)");
    }
    let url = url::Url::parse(target).map_err(|_| "the request's URL does not parse")?;
    let mut out = String::with_capacity(head.len() + 32);
    let path = match url.query() {
        Some(q) => format!("{}?{q}", url.path()),
        None => url.path().to_string(),
    };
    out.push_str(&format!("{method} {path} {version}\r\n"));
    for line in lines.filter(|l| !l.is_empty()) {
        let name = line.split(':').next().unwrap_or_default().trim();
        let dropped = name.eq_ignore_ascii_case("connection")
            || name.eq_ignore_ascii_case("keep-alive")
            || name.to_ascii_lowercase().starts_with("proxy-");
        if !dropped {
            out.push_str(line);
            out.push_str("\r\n");
        }
    }
    out.push_str("Connection: close\r\n\r\n");
    Ok(Target {
        url,
        head: Some(out.into_bytes()),
    })
}

/// Why no connection was made.
#[derive(Debug)]
pub enum Refusal {
    /// The policy or the tenant's allowlist refused the host.
    Denied(Denied),
    /// Nothing answered (said without the system's error, which may tell an address).
    Failed(&'static str),
}

impl TenantEgress {
    /// A TCP connection to `url`'s host and port, when the policy and the tenant's
    /// allowlist admit the host (by name) and the address it connects to.
    pub async fn connect(&self, url: &url::Url) -> Result<TcpStream, Refusal> {
        self.egress
            .policy
            .check_url(url, &self.hosts)
            .inspect_err(crate::count)
            .map_err(Refusal::Denied)?;
        let port = url
            .port_or_known_default()
            .ok_or(Refusal::Failed("no port"))?;
        let addresses: Vec<IpAddr> = match url.host() {
            Some(url::Host::Ipv4(ip)) => vec![IpAddr::V4(ip)],
            Some(url::Host::Ipv6(ip)) => vec![IpAddr::V6(ip)],
            Some(url::Host::Domain(name)) => {
                let found = tokio::net::lookup_host((name, port))
                    .await
                    .map_err(|_| Refusal::Failed("the name does not resolve"))?;
                self.egress
                    .policy
                    .admit(found.map(|a| a.ip()))
                    .inspect_err(crate::count)
                    .map_err(Refusal::Denied)?
            }
            None => return Err(Refusal::Failed("no host")),
        };
        for ip in addresses {
            let connecting = TcpStream::connect(SocketAddr::new(ip, port));
            if let Ok(Ok(stream)) = tokio::time::timeout(crate::CONNECT_TIMEOUT, connecting).await {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
        }
        Err(Refusal::Failed("could not connect"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(text: &str) -> Vec<u8> {
        text.replace('\n', "\r\n").into_bytes()
    }

    #[test]
    fn a_connect_names_a_host_and_port() {
        let t = parse(&head(
            "CONNECT example.com:8443 HTTP/1.1\nHost: example.com\n\n",
        ));
        let t = t.expect("parses");
        assert_eq!(t.url.host_str(), Some("example.com"));
        assert_eq!(t.url.port_or_known_default(), Some(8443));
        assert!(t.head.is_none());
        for bad in [
            "CONNECT example.com HTTP/1.1\n\n",
            "CONNECT user@example.com:443 HTTP/1.1\n\n",
            "CONNECT example.com:443/x HTTP/1.1\n\n",
            "GET /relative HTTP/1.1\n\n",
            "GET https://example.com/ HTTP/1.1\n\n",
            "GET http://example.com/ HTTP/2\n\n",
        ] {
            assert!(parse(&head(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_plain_request_goes_on_in_origin_form_and_closes() {
        let t = parse(&head(
            "GET http://example.com:8080/a/b?c=1 HTTP/1.1\nHost: example.com:8080\n\
             Proxy-Authorization: Basic eA==\nConnection: keep-alive\nAccept: */*\n\n",
        ))
        .expect("parses");
        assert_eq!(t.url.port_or_known_default(), Some(8080));
        let sent = String::from_utf8(t.head.expect("a head")).expect("utf-8");
        assert_eq!(
            sent,
            "GET /a/b?c=1 HTTP/1.1\r\nHost: example.com:8080\r\nAccept: */*\r\n\
             Connection: close\r\n\r\n"
        );
    }
}
