//! The `baton` binary's library: configuration, telemetry, wiring and the CLI commands.
//! `main.rs` only parses arguments and calls [`cli::run`].

pub mod app;
pub mod cli;
pub mod config;
pub mod data_dir;
pub mod encryption_keys;
pub mod serve;
pub mod telemetry;
