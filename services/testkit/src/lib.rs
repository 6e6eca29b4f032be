//! Test helpers shared by Baton's test suites: fresh databases per test ([`db`]),
//! private NATS servers for tests that break the broker ([`nats`]), clusters of `baton`
//! processes on one database and NATS ([`replicas`]) and a typed client of their HTTP
//! API and event streams ([`api`]), and local stand-ins for what runs call out to: a
//! chat-completions server ([`chat`]), tool endpoints ([`tool_server`]) and an OTLP
//! trace collector ([`otlp`]); and a TCP proxy that can take a server away ([`proxy`]).
//! Depends on no Baton crate, so any crate's tests can use it.

pub mod api;
pub mod chat;
pub mod db;
pub mod nats;
pub mod otlp;
pub mod proxy;
pub mod replicas;
pub mod tool_server;

pub use api::{Api, Reply, assert_problem};
pub use chat::ChatServer;
pub use db::{TestDatabase, TestSqlite};
pub use nats::TestNats;
pub use proxy::TcpProxy;
pub use replicas::{Cluster, ClusterBuilder, EventRow, Replica};
pub use tool_server::{Behaviour, ToolServer};
