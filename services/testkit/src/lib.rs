//! Test helpers shared by Baton's test suites: fresh databases per test ([`db`]).
//! Depends on no Baton crate, so any crate's tests can use it.

pub mod db;

pub use db::{TestDatabase, TestSqlite};
