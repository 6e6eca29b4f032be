//! Test helpers shared by Baton's test suites: fresh databases per test ([`db`]),
//! private NATS servers for tests that break the broker ([`nats`]) and clusters of `baton`
//! processes on one database and NATS ([`replicas`]).
//! Depends on no Baton crate, so any crate's tests can use it.

pub mod db;
pub mod nats;
pub mod replicas;

pub use db::{TestDatabase, TestSqlite};
pub use nats::TestNats;
pub use replicas::{Cluster, ClusterBuilder, EventRow, Replica};
