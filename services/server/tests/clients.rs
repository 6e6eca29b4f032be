//! Generated clients against a running server: `scripts/clients` starts a `baton serve` of
//! this build (the binary cargo built for this test), validates its `/openapi.json` with
//! openapi-spec-validator, generates a Python client (openapi-python-client) and
//! TypeScript types (openapi-typescript, for openapi-fetch) from it, and runs a short
//! program with each (`tests/clients/client.py`, `tests/clients/client.ts` compiled with
//! `tsc --strict`): an agent of every provider kind, a run, a message, its messages and
//! events, a 409 problem. Once per tier, as the Schemathesis tests do (the team tier uses
//! `BATON_TEST_DATABASE_URL` and `BATON_TEST_NATS_URL`).
//!
//! The script installs its tools from PyPI and npm into `target/clients/` the first time
//! (scripts/test does it before the suite). It exits 77 when python3, its venv module,
//! pip, node or npm is missing, and these tests then fail, saying what is missing: a suite
//! without them does not pass by leaving the clients out. Setting `BATON_SKIP_CLIENTS=1` is
//! the one way to leave them out; the tests then skip, loudly, without running the script.

use baton_testkit::scripts::ToolScript;
use std::path::Path;

#[test]
fn clients_generated_from_the_embedded_tiers_document_drive_a_run() {
    clients("embedded");
}

#[test]
fn clients_generated_from_the_team_tiers_document_drive_a_run() {
    clients("team");
}

/// Runs the script against a server of `tier`; panics on any failure.
fn clients(tier: &str) {
    let script = ToolScript {
        script: "scripts/clients",
        what: "the generated clients",
        tier_var: "BATON_CLIENTS_TIER",
        tier,
        opt_out: "BATON_SKIP_CLIENTS",
        install: "Install python3 with its venv module and pip (Debian: apt-get install \
                  python3-venv) and node with npm",
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let Some(text) = script.run(&root, env!("CARGO_BIN_EXE_baton")) else {
        return;
    };
    // Both programs ran to their end: a script that stopped early says nothing.
    for done in ["client.py: ok", "client.ts: ok", ": OK"] {
        assert!(text.contains(done), "no {done:?} in the output:\n{text}");
    }
}
