//! The MCP server of `services/server/tests/mcp/server.py`, a child process built with the
//! official MCP Python SDK from PyPI (installed by `scripts/mcp`), not Baton's code. A test
//! picks its transport mode and bearer token (or OAuth client credentials), reads every tool
//! execution it recorded (with the idempotency keys the call carried) and every token
//! request, reads its counter, switches its tool list, and kills it and starts it again on
//! the same port. It must not interpret the protocol: what the server answers is the SDK's.

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
    /// `(client_id, client_secret)`: the server is an OAuth protected resource and its own
    /// authorization server, for the client credentials grant only (the script's
    /// `--oauth`). `/mcp` then needs a bearer token from `POST /auth/token` (else 401 with
    /// `WWW-Authenticate: Bearer ..., resource_metadata="<base>/.well-known/
    /// oauth-protected-resource/mcp"`); the metadata documents are at that URL (RFC 9728)
    /// and at `/.well-known/oauth-authorization-server/auth` (RFC 8414, issuer
    /// `<base>/auth`). Excludes `bearer`.
    pub oauth: Option<(String, String)>,
    /// The lifetime of the tokens issued in `oauth` mode (the script's default: 3600 s).
    pub token_ttl_secs: Option<u64>,
}

/// One request to the token endpoint (`oauth` mode), in the order the server received them.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct TokenRequest {
    /// The client id presented (by Basic or in the form; empty when none).
    pub client_id: String,
    /// `basic` (client_secret_basic), `post` (client_secret_post) or `none`.
    pub auth_method: String,
    /// The `scope` parameter, as sent.
    pub scope: Option<String>,
    /// The `resource` parameter (RFC 8707), as sent.
    pub resource: Option<String>,
    /// Whether a token was issued.
    pub granted: bool,
    /// The `grant_type` parameter, as sent.
    #[serde(default)]
    pub grant_type: Option<String>,
    /// The OAuth error answered (`invalid_client`, `unsupported_grant_type`,
    /// `invalid_request`, `invalid_scope`, `invalid_target`), when not granted.
    #[serde(default)]
    pub error: Option<String>,
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
    /// The protocol version the call was served at (e.g. `2025-06-18`, `2026-07-28`).
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
        read_jsonl(&self.dir.path().join("executions.jsonl"))
    }

    /// Every request to the token endpoint so far (`oauth` mode), in order (all runs of the
    /// process, when started again).
    pub fn token_requests(&self) -> Vec<TokenRequest> {
        read_jsonl(&self.dir.path().join("token_requests.jsonl"))
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
    /// (the recorded executions and token requests, the counter and the variant survive;
    /// sessions and issued OAuth tokens do not).
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

/// The whole lines of a JSON-lines log the server appends to (none when it is missing).
fn read_jsonl<T: serde::de::DeserializeOwned>(path: &Path) -> Vec<T> {
    let log = std::fs::read_to_string(path).unwrap_or_default();
    // Only whole lines: the server may be writing the next one.
    log.split_inclusive('\n')
        .filter(|l| l.ends_with('\n'))
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("{} has {l:?}: {e}", path.display()))
        })
        .collect()
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
    if let Some((id, secret)) = &options.oauth {
        command.arg("--oauth").arg(format!("{id}:{secret}"));
    }
    if let Some(ttl) = options.token_ttl_secs {
        command.arg("--token-ttl").arg(ttl.to_string());
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
