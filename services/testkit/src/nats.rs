//! A private `nats-server` per test, for tests that break NATS: started with JetStream on
//! a free loopback port and a temporary store directory, stopped and restarted on the same
//! port, killed when the handle drops. Knows nothing of Baton's subjects.

use anyhow::{Context, bail};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::io::AsyncReadExt;

/// The environment variable naming the `nats-server` binary, when it is not on `PATH`.
pub const SERVER_BIN_ENV: &str = "BATON_TEST_NATS_SERVER";

/// Where the binary is looked for after [`SERVER_BIN_ENV`] and `PATH`.
const FALLBACK_BINS: &[&str] = &["/usr/sbin/nats-server", "/usr/local/bin/nats-server"];

/// How long a server may take to accept clients.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// Ports tried before giving up when another process takes the free port first.
const START_ATTEMPTS: usize = 5;

/// A running (or stopped) `nats-server` owned by one test.
#[derive(Debug)]
pub struct TestNats {
    bin: PathBuf,
    port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
    /// A configuration file (`-c`) for servers with authorization or TLS.
    config: Option<PathBuf>,
}

impl TestNats {
    /// Starts a server on a free port of 127.0.0.1 and waits until it accepts clients.
    pub async fn start() -> anyhow::Result<Self> {
        Self::start_with_config("").await
    }

    /// [`TestNats::start`] with `config` (nats-server configuration syntax, such as an
    /// `authorization { … }` or `tls { … }` block) in a configuration file. A server that
    /// requires TLS is reached over TCP all the same, so readiness is checked alike.
    pub async fn start_with_config(config: &str) -> anyhow::Result<Self> {
        let bin = server_bin()?;
        let dir = tempfile::Builder::new()
            .prefix("baton-test-nats-")
            .tempdir()
            .context("cannot create a temporary directory")?;
        let config = if config.is_empty() {
            None
        } else {
            let path = dir.path().join("nats.conf");
            std::fs::write(&path, config).context("cannot write the nats-server configuration")?;
            Some(path)
        };
        let mut nats = TestNats {
            bin,
            port: 0,
            dir,
            child: None,
            config,
        };
        let mut last = None;
        for _ in 0..START_ATTEMPTS {
            nats.port = free_port()?;
            match nats.launch().await {
                Ok(()) => return Ok(nats),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| anyhow::anyhow!("nats-server did not start")))
    }

    /// `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Whether the server process is alive.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Kills the server (SIGKILL, an outage rather than a shutdown) and reaps it. Does
    /// nothing if it is stopped already.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the server if it runs, then starts it again on the same port with the same
    /// store directory and waits until it accepts clients.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.stop();
        self.launch().await
    }

    /// The server's output, for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    async fn launch(&mut self) -> anyhow::Result<()> {
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.log_path())
            .context("cannot open the nats-server log")?;
        let mut command = Command::new(&self.bin);
        if let Some(config) = &self.config {
            command.arg("-c").arg(config);
        }
        let child = command
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-js",
                "-sd",
            ])
            .arg(self.dir.path().join("jetstream"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().context("cannot share the log file")?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("cannot run {}", self.bin.display()))?;
        self.child = Some(child);
        let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
        loop {
            if !self.is_running() {
                self.stop();
                bail!(
                    "nats-server on port {} exited early:\n{}",
                    self.port,
                    self.log()
                );
            }
            if greets(self.port).await {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                self.stop();
                bail!(
                    "nats-server on port {} is not ready after {READY_TIMEOUT:?}:\n{}",
                    self.port,
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("nats-server.log")
    }
}

impl Drop for TestNats {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Whether a server on the port accepts a client and sends its `INFO` greeting.
async fn greets(port: u16) -> bool {
    let attempt = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()?;
        let mut buf = [0u8; 4];
        stream.read_exact(&mut buf).await.ok()?;
        Some(&buf == b"INFO")
    };
    tokio::time::timeout(Duration::from_secs(1), attempt)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}

/// A port nobody listens on now (the caller races other processes for it).
fn free_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("cannot find a free port")?;
    Ok(listener.local_addr()?.port())
}

/// The `nats-server` binary: [`SERVER_BIN_ENV`], then `PATH`, then the usual places.
fn server_bin() -> anyhow::Result<PathBuf> {
    if let Some(bin) = std::env::var_os(SERVER_BIN_ENV) {
        return Ok(PathBuf::from(bin));
    }
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .map(|dir| dir.join("nats-server"));
    on_path
        .chain(FALLBACK_BINS.iter().map(PathBuf::from))
        .find(|p| is_file(p))
        .with_context(|| format!("nats-server not found on PATH; set {SERVER_BIN_ENV}"))
}

fn is_file(p: &Path) -> bool {
    p.metadata().is_ok_and(|m| m.is_file())
}
