//! In-process tests of the HTTP API's contracts: the router of `baton_api::router` over an
//! in-memory SQLite store, the in-process bus and a real engine, driven with `oneshot`
//! (no socket, no process). One binary, so the harness in `support` compiles once; each
//! test makes its own app and tenant.

mod admin;
mod auth;
mod browsers;
mod delegation;
mod deletion;
mod egress;
mod environments;
mod errors;
mod failed;
mod files;
mod invitations;
mod lifecycle;
mod mcp;
mod openapi;
mod queue;
mod retention;
mod runs;
mod schedules;
mod search;
mod streams;
mod support;
mod tenancy;
mod wait;
mod webhooks;
