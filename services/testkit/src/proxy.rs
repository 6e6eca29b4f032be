//! A TCP proxy on a loopback port in front of a real server, for tests of what happens when
//! that server goes away: [`TcpProxy::stop`] closes the listener and every connection
//! through it, so new connections are refused, as with a server that is down;
//! [`TcpProxy::start`] listens on the same port again. In front of several servers
//! ([`TcpProxy::to_any`]) it is a load balancer of the simplest kind: each connection goes
//! to the first that accepts it, so clients move on when one goes away.

use anyhow::Context;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A proxy to `target`, listening until stopped or dropped.
pub struct TcpProxy {
    addr: SocketAddr,
    /// Tried in order for each connection.
    targets: Vec<SocketAddr>,
    running: Option<Running>,
}

struct Running {
    accept: JoinHandle<()>,
    /// Every connection's copying task, aborted (closing both sides) at stop.
    links: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl TcpProxy {
    /// A proxy to `target` on a free port of 127.0.0.1, accepting at once.
    pub async fn to(target: SocketAddr) -> anyhow::Result<Self> {
        Self::to_any(vec![target]).await
    }

    /// A proxy that sends each connection to the first of `targets` that accepts it.
    pub async fn to_any(targets: Vec<SocketAddr>) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the proxy")?;
        let addr = listener.local_addr().context("the proxy's address")?;
        let mut proxy = TcpProxy {
            addr,
            targets,
            running: None,
        };
        proxy.serve(listener);
        Ok(proxy)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops listening and cuts every connection: new connections are refused.
    pub fn stop(&mut self) {
        if let Some(running) = self.running.take() {
            running.accept.abort();
            let links =
                std::mem::take(&mut *running.links.lock().unwrap_or_else(PoisonError::into_inner));
            for link in links {
                link.abort();
            }
        }
    }

    /// Listens on the same port again (after [`TcpProxy::stop`]).
    pub async fn start(&mut self) -> anyhow::Result<()> {
        self.stop();
        let listener = TcpListener::bind(self.addr)
            .await
            .with_context(|| format!("binding the proxy's port {} again", self.addr))?;
        self.serve(listener);
        Ok(())
    }

    fn serve(&mut self, listener: TcpListener) {
        let links: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let targets = Arc::new(self.targets.clone());
        let held = links.clone();
        let accept = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let targets = targets.clone();
                let link = tokio::spawn(async move {
                    for target in targets.iter() {
                        if let Ok(mut server) = TcpStream::connect(target).await {
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                            return;
                        }
                    }
                });
                held.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(link);
            }
        });
        self.running = Some(Running { accept, links });
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.stop();
    }
}
