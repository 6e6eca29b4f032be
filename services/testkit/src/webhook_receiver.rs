//! The webhook receiver of `services/server/tests/webhooks/receiver.py`, a child process
//! that verifies every delivery with the Standard Webhooks library from PyPI (installed
//! by `scripts/webhooks`), not Baton's code, and logs what it got. A test sets the
//! secrets it verifies with, takes it down (503) and up, or kills and restarts it on the
//! same port, and reads what it received.

use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// One request the receiver got.
#[derive(Debug, Clone, Deserialize)]
pub struct Received {
    /// The `webhook-id` header.
    pub id: Option<String>,
    /// The body's `type`, when a secret verified it.
    #[serde(default, rename = "type")]
    pub event_type: Option<String>,
    /// The type and run id the body claims, verified or not.
    #[serde(default)]
    pub body_type: Option<String>,
    #[serde(default)]
    pub run: Option<String>,
    /// The indices of the secrets (as set) that verified it.
    pub verified_by: Vec<usize>,
    /// What it answered.
    pub status: u16,
    pub path: String,
}

/// A running receiver; killed when dropped.
pub struct WebhookReceiver {
    python: PathBuf,
    script: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    child: Child,
}

impl WebhookReceiver {
    /// Starts a receiver on a free loopback port, installing its tools first (once) with
    /// `scripts/webhooks` under the workspace `root`. `None` when `BATON_SKIP_WEBHOOKS=1`
    /// (said loudly); panics, naming what to install, when python3 or its venv is missing.
    pub async fn start(root: &Path) -> Option<WebhookReceiver> {
        if std::env::var("BATON_SKIP_WEBHOOKS").is_ok_and(|v| v == "1") {
            eprintln!(
                "\n{bar}\nSKIPPED: the webhook receiver tests did not run: \
                 BATON_SKIP_WEBHOOKS=1 is set.\n{bar}\n",
                bar = "!".repeat(78)
            );
            return None;
        }
        let out = Command::new("bash")
            .arg(root.join("scripts/webhooks"))
            .arg("--python")
            .current_dir(root)
            .stdin(Stdio::null())
            .output()
            .await
            .expect("running scripts/webhooks");
        let text = String::from_utf8_lossy(&out.stderr);
        assert_ne!(
            out.status.code(),
            Some(crate::scripts::MISSING_TOOL),
            "the webhook receiver could not be installed: {text}\nInstall python3 with its \
             venv module (Debian: apt-get install python3-venv), or set \
             BATON_SKIP_WEBHOOKS=1 to skip these tests."
        );
        assert!(out.status.success(), "scripts/webhooks failed: {text}");
        let python = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        let script = root.join("services/server/tests/webhooks/receiver.py");
        let dir = tempfile::tempdir().expect("a directory for the receiver");
        let (child, port) = launch(&python, &script, dir.path(), 0).await;
        Some(WebhookReceiver {
            python,
            script,
            dir,
            port,
            child,
        })
    }

    /// The URL of `path` on the receiver.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}/{path}", self.port)
    }

    /// The secrets (`whsec_…`) deliveries are verified with, in order.
    pub fn set_secrets(&self, secrets: &[&str]) {
        std::fs::write(self.dir.path().join("secrets"), secrets.join("\n"))
            .expect("write the secrets");
    }

    /// Answers 503 to everything while down.
    pub fn set_down(&self, down: bool) {
        let path = self.dir.path().join("down");
        if down {
            std::fs::write(path, "").expect("mark down");
        } else if path.exists() {
            std::fs::remove_file(path).expect("mark up");
        }
    }

    /// Kills the process: connections are refused until [`Self::start_again`].
    pub async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }

    /// Starts the process again on its port.
    pub async fn start_again(&mut self) {
        let (child, _) = launch(&self.python, &self.script, self.dir.path(), self.port).await;
        self.child = child;
    }

    /// Every request received so far, in order.
    pub fn received(&self) -> Vec<Received> {
        let log = std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default();
        log.lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

async fn launch(python: &Path, script: &Path, dir: &Path, port: u16) -> (Child, u16) {
    let mut child = Command::new(python)
        .arg(script)
        .arg("--dir")
        .arg(dir)
        .arg("--port")
        .arg(port.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("starting the webhook receiver");
    let stdout = child.stdout.take().expect("its stdout");
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(std::time::Duration::from_secs(20), lines.next_line())
        .await
        .expect("the receiver starts within 20 s")
        .expect("its stdout")
        .expect("a line");
    let port = line
        .strip_prefix("listening ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("the receiver said {line:?}"));
    (child, port)
}
