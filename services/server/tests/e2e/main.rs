//! End-to-end tests over real HTTP: the app on 127.0.0.1:0 with SQLite (embedded tier) or
//! with a fresh Postgres database and the real NATS server (team tier); and the `baton`
//! binary as a child process for start-up refusals and `config explain`.

mod actions;
mod api_guide;
mod api_keys;
mod audit;
mod bad_input;
mod binary;
mod browser;
mod browser_streams;
mod child;
mod common;
mod console;
mod conversation;
mod egress;
mod encryption_keys;
mod encryption_keys_cli;
mod outages;
mod restart;
mod roles;
mod secrets;
mod slow_clients;
mod sse;
mod tenancy;
mod tools;
mod users;
mod webhooks;
