//! The MCP server of `services/server/tests/mcp/server.py`, a child process built with the
//! official MCP Python SDK from PyPI (installed by `scripts/mcp`), not Baton's code. A test
//! picks its transport mode and bearer token, reads every tool execution it recorded (with
//! the idempotency keys the call carried), reads its counter, switches its tool list, and
//! kills it and starts it again on the same port. It must not interpret the protocol:
//! what the server answers is the SDK's.

use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Which Streamable HTTP flavour the server speaks (the script's `--mode`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum McpMode {
    /// Sessions (`Mcp-Session-Id`), SSE responses, the `initialize` handshake only: a
    /// 2026-07-28 request (`server/discover`) gets 400, so a client falls back.
    #[default]
    Legacy,
    /// As `Legacy`, answering each POST with one `application/json` body (no progress).
    Json,
    /// As `Legacy`, without sessions: every POST stands alone.
    Stateless,
    /// The SDK's default: `server/discover` and the 2026-07-28 per-request envelope
    /// (and the handshake too).
    Modern,
}

impl McpMode {
    fn arg(self) -> &'static str {
        match self {
            McpMode::Legacy => "legacy",
            McpMode::Json => "json",
            McpMode::Stateless => "stateless",
            McpMode::Modern => "modern",
        }
    }
}

/// How to start the server.
#[derive(Debug, Clone, Default)]
pub struct McpOptions {
    /// Every request must carry `Authorization: Bearer <this>` (else 401).
    pub bearer: Option<String>,
    pub mode: McpMode,
}

/// One event of one tool execution, in the order the server recorded them.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct McpExecution {
    pub tool: String,
    /// The call's `arguments`, as sent.
    pub arguments: serde_json::Value,
    /// `params._meta["baton/idempotency_key"]` of the call.
    pub idempotency_key_meta: Option<String>,
    /// The call's HTTP `Idempotency-Key` header.
    pub idempotency_key_header: Option<String>,
    /// The protocol version the call was served at (e.g. `2025-11-25`, `2026-07-28`).
    #[serde(default)]
    pub protocol_version: Option<String>,
    /// `started`, then `finished` (returned or raised) or `cancelled`.
    pub event: String,
}

/// A running MCP server; killed when dropped.
pub struct McpTestServer {
    python: PathBuf,
    script: PathBuf,
    options: McpOptions,
    dir: tempfile::TempDir,
    port: u16,
    child: Child,
}

impl McpTestServer {
    /// Starts a server on a free loopback port, installing the SDK first (once) with
    /// `scripts/mcp` under the workspace `root`. `None` when `BATON_SKIP_MCP=1` (said
    /// loudly); panics, naming what to install, when python3 or its venv is missing.
    pub async fn start(root: &Path, options: McpOptions) -> Option<McpTestServer> {
        if std::env::var("BATON_SKIP_MCP").is_ok_and(|v| v == "1") {
            eprintln!(
                "\n{bar}\nSKIPPED: the MCP server tests did not run: BATON_SKIP_MCP=1 is \
                 set.\n{bar}\n",
                bar = "!".repeat(78)
            );
            return None;
        }
        let out = Command::new("bash")
            .arg(root.join("scripts/mcp"))
            .arg("--python")
            .current_dir(root)
            .stdin(Stdio::null())
            .output()
            .await
            .expect("running scripts/mcp");
        let text = String::from_utf8_lossy(&out.stderr);
        assert_ne!(
            out.status.code(),
            Some(crate::scripts::MISSING_TOOL),
            "the MCP test server could not be installed: {text}\nInstall python3 (3.10 or \
             newer) with its venv module (Debian: apt-get install python3-venv), or set \
             BATON_SKIP_MCP=1 to skip these tests."
        );
        assert!(out.status.success(), "scripts/mcp failed: {text}");
        let python = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        let script = root.join("services/server/tests/mcp/server.py");
        let dir = tempfile::tempdir().expect("a state directory for the MCP server");
        let (child, port) = launch(&python, &script, &options, dir.path(), 0).await;
        Some(McpTestServer {
            python,
            script,
            options,
            dir,
            port,
            child,
        })
    }

    /// The MCP endpoint, `http://127.0.0.1:<port>/mcp`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Every tool event recorded so far, in order (all runs of the process, when started
    /// again).
    pub fn executions(&self) -> Vec<McpExecution> {
        let log =
            std::fs::read_to_string(self.dir.path().join("executions.jsonl")).unwrap_or_default();
        // Only whole lines: the server may be writing the next one.
        log.split_inclusive('\n')
            .filter(|l| l.ends_with('\n'))
            .map(|l| {
                serde_json::from_str(l)
                    .unwrap_or_else(|e| panic!("executions.jsonl has {l:?}: {e}"))
            })
            .collect()
    }

    /// Polls [`Self::executions`] until `done` holds, for up to `timeout`; panics naming
    /// `what` and what was recorded when it never does.
    pub async fn wait_for_executions(
        &self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&[McpExecution]) -> bool,
    ) -> Vec<McpExecution> {
        let deadline = Instant::now() + timeout;
        loop {
            let executions = self.executions();
            if done(&executions) {
                return executions;
            }
            assert!(
                Instant::now() < deadline,
                "the MCP server did not record {what} within {timeout:?}; it recorded \
                 {executions:#?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The `increment` tool's total (0 before its first call).
    pub fn counter(&self) -> i64 {
        match std::fs::read_to_string(self.dir.path().join("counter")) {
            Ok(text) => text.trim().parse().expect("the counter is a number"),
            Err(_) => 0,
        }
    }

    /// Switches the tool list from the next request on: `2` gives `lookup` a required
    /// `scope` and a new description, adds `extra` and drops `fail`; `1` is the original.
    pub fn set_variant(&self, n: u32) {
        std::fs::write(self.dir.path().join("variant"), n.to_string()).expect("write the variant");
    }

    /// Kills the process (SIGKILL): connections are refused, sessions and calls in flight
    /// are lost, until [`Self::start_again`].
    pub async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }

    /// Starts the process again on its port, with the same options and state directory
    /// (the recorded executions, the counter and the variant survive; sessions do not).
    pub async fn start_again(&mut self) {
        let (child, _) = launch(
            &self.python,
            &self.script,
            &self.options,
            self.dir.path(),
            self.port,
        )
        .await;
        self.child = child;
    }
}

async fn launch(
    python: &Path,
    script: &Path,
    options: &McpOptions,
    dir: &Path,
    port: u16,
) -> (Child, u16) {
    let mut command = Command::new(python);
    command
        .arg(script)
        .arg("--state")
        .arg(dir)
        .arg("--mode")
        .arg(options.mode.arg())
        .arg("--port")
        .arg(port.to_string());
    if let Some(token) = &options.bearer {
        command.arg("--bearer").arg(token);
    }
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("starting the MCP test server");
    let stdout = child.stdout.take().expect("its stdout");
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("the MCP server starts within 30 s")
        .expect("its stdout")
        .expect("a line (did it exit? see its stderr above)");
    let port = line
        .strip_prefix("listening ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("the MCP server said {line:?}"));
    (child, port)
}
