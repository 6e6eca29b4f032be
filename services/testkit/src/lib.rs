//! Test helpers shared by Baton's test suites: fresh databases per test ([`db`]) and
//! private NATS servers for tests that break the broker ([`nats`]).
//! Depends on no Baton crate, so any crate's tests can use it.

pub mod db;
pub mod nats;

pub use db::{TestDatabase, TestSqlite};
pub use nats::TestNats;
