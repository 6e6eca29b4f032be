//! Test helpers shared by Baton's test suites: fresh databases per test ([`db`]),
//! private NATS servers for tests that break the broker ([`nats`]), a `baton serve` child
//! ([`serve`]), clusters of `baton` processes on one database and NATS ([`replicas`]) and a typed client of their HTTP
//! API and event streams ([`api`]), and local stand-ins for what runs call out to: a
//! chat-completions server ([`chat`]), tool endpoints ([`tool_server`]), an MCP server
//! built with the official SDK ([`mcp_server`]), a webhook receiver
//! ([`webhook_receiver`]) and an OTLP trace collector ([`otlp`]); and a TCP proxy that can
//! take a server away ([`proxy`]).
//! Depends on no Baton crate, so any crate's tests can use it.

pub mod api;
pub mod browser;
pub mod chat;
pub mod db;
pub mod mcp_server;
pub mod nats;
pub mod otlp;
pub mod prometheus;
pub mod proxy;
pub mod replicas;
pub mod scripts;
pub mod serve;
pub mod tool_server;
pub mod webhook_receiver;

pub use api::{Api, Reply, assert_problem};
pub use chat::ChatServer;
pub use db::{TestDatabase, TestSqlite};
pub use mcp_server::{McpExecution, McpMode, McpOptions, McpTestServer, TokenRequest};
pub use nats::TestNats;
pub use proxy::TcpProxy;
pub use replicas::{Cluster, ClusterBuilder, EventRow, Replica};
pub use serve::Serve;
pub use tool_server::{Behaviour, ToolRequest, ToolServer};
pub use webhook_receiver::{Received, WebhookReceiver};

/// A reqwest client builder for tests and tools, with ring installed as the process's
/// rustls crypto provider first (reqwest is built without one of its own).
pub fn http_client_builder() -> reqwest::ClientBuilder {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
}

/// A default reqwest client; see [`http_client_builder`].
pub fn http_client() -> reqwest::Client {
    http_client_builder()
        .build()
        .expect("a reqwest client with the default settings")
}

/// The chart tools' `bin/<name>` (helm, kubernetes-validate, promtool, python), from
/// `$BATON_CHART_TOOLS` or the workspace's `target/chart-tools`; panics naming
/// `scripts/chart-tools` (which `scripts/test` runs) when it is not installed.
pub fn chart_tool(name: &str) -> std::path::PathBuf {
    let dir = std::env::var_os("BATON_CHART_TOOLS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/chart-tools")
        });
    let path = dir.join("bin").join(name);
    assert!(
        path.exists(),
        "{} is missing: run scripts/chart-tools (scripts/test runs it) to install helm, \
         kubernetes-validate and promtool into {} (or point BATON_CHART_TOOLS at such a \
         directory)",
        path.display(),
        dir.display()
    );
    path
}

/// Whether a process of this machine has `marker` in its command line (a sandboxed
/// command's, seen from the host).
pub fn process_running(marker: &str) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .any(|c| {
            String::from_utf8_lossy(&c)
                .replace('\0', " ")
                .contains(marker)
        })
}
