//! Test helpers shared by Baton's test suites: fresh databases per test ([`db`]),
//! private NATS servers for tests that break the broker ([`nats`]), clusters of `baton`
//! processes on one database and NATS ([`replicas`]) and a typed client of their HTTP
//! API and event streams ([`api`]).
//! Depends on no Baton crate, so any crate's tests can use it.

pub mod api;
pub mod db;
pub mod nats;
pub mod replicas;

pub use api::{Api, Reply, assert_problem};
pub use db::{TestDatabase, TestSqlite};
pub use nats::TestNats;
pub use replicas::{Cluster, ClusterBuilder, EventRow, Replica};
