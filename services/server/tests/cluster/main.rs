//! Fenced leases, orphan adoption, drain and fan-out across real `baton` processes sharing
//! one Postgres database and one NATS (issue 4, "Done when"): SIGKILL of an owner mid-turn
//! ([`adoption`]) and mid-mutation ([`receipts`]), SIGTERM of an owner with 50 active runs
//! ([`handoff`]), SIGSTOP past the lease TTL then SIGCONT ([`fencing`]), and a NATS restart
//! under a live SSE stream ([`nats`]). Each is checked from the API, from the events table
//! and from the lease columns of the runs table, and prints what it measured. Also
//! ([`traces`]) one turn's trace across the replica that took its message and the one
//! that drove it, and ([`queue`]) queued messages across a SIGKILL of the owner and a
//! `wait` answered by a replica that does not drive the run; ([`retention`]) the retention
//! job on two replicas deleting each expired run once; ([`delegation`]) a SIGKILL of a
//! run's owner while a `delegate` call waits on its child; ([`workspace`]) a SIGKILL of a
//! run's owner while a `shell` command runs in its sandbox.
//! Needs Postgres (`BATON_TEST_DATABASE_URL`), NATS (`BATON_TEST_NATS_URL`) and, for the
//! private NATS, `nats-server`.

mod adoption;
mod console;
mod credentials;
mod delegation;
mod fencing;
mod handoff;
mod mcp;
mod nats;
mod queue;
mod receipts;
mod retention;
mod schedules;
mod support;
mod traces;
mod webhooks;
mod workspace;
