//! Schemathesis against a running server: `scripts/schemathesis` starts a `baton serve` of
//! this build (the binary cargo built for this test), creates fixtures, and fuzzes every
//! operation of `/openapi.json`, failing on any 5xx, on any answer whose status, content
//! type or body the document does not describe, and on any operation that answers without
//! a key. Once per tier: the team tier stores in Postgres, which refuses some values
//! SQLite keeps (it uses `BATON_TEST_DATABASE_URL` and `BATON_TEST_NATS_URL`, as the other
//! team-tier tests do).
//!
//! The script installs Schemathesis from PyPI into `target/schemathesis/` the first time
//! (scripts/test does it before the suite). It exits 77 when python3, its venv module or
//! pip is missing, and these tests then fail, saying what is missing: a suite without
//! Python does not pass by leaving the fuzzing out. Setting `BATON_SKIP_SCHEMATHESIS=1`
//! is the one way to leave it out; the tests then skip, loudly, without running the script.

use baton_testkit::scripts::ToolScript;
use std::path::Path;

#[test]
fn the_embedded_tier_answers_every_generated_request_as_documented() {
    schemathesis("embedded");
}

#[test]
fn the_team_tier_answers_every_generated_request_as_documented() {
    schemathesis("team");
}

/// Runs the script against a server of `tier`; panics on any failure.
fn schemathesis(tier: &str) {
    let script = ToolScript {
        script: "scripts/schemathesis",
        what: "schemathesis",
        tier_var: "BATON_SCHEMATHESIS_TIER",
        tier,
        opt_out: "BATON_SKIP_SCHEMATHESIS",
        install: "Install python3 with its venv module and pip (Debian: apt-get install \
                  python3-venv)",
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let Some(text) = script.run(&root, env!("CARGO_BIN_EXE_baton")) else {
        return;
    };
    // Every operation of the document was selected and tested: nothing was left out.
    let operations = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Operations:"))
        .unwrap_or_else(|| panic!("no `Operations:` line in the output:\n{text}"));
    let counts: Vec<u32> = operations
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .collect();
    assert!(
        matches!(counts[..], [selected, total] if selected == total && total > 0),
        "not every operation was selected ({operations}):\n{text}"
    );
    assert!(text.contains(" passed"), "no test case passed:\n{text}");
}
