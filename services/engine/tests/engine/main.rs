//! The run engine against a real (SQLite) store, the in-process bus and, for tools,
//! real HTTP endpoints on loopback.

mod checkpoints;
mod queue;
mod reasoning;
mod recovery;
mod tools;
mod turns;
mod workspace;
mod world;
