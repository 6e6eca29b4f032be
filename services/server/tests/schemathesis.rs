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

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

/// The script's exit code when python3, its venv module or pip is unavailable.
const MISSING_TOOL: i32 = 77;

/// Set to `1` to skip these tests instead of running the script.
const OPT_OUT: &str = "BATON_SKIP_SCHEMATHESIS";

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
    if std::env::var(OPT_OUT).is_ok_and(|v| v == "1") {
        eprintln!(
            "\n{bar}\nSKIPPED: schemathesis ({tier} tier) did not run: {OPT_OUT}=1 is set.\n{bar}\n",
            bar = "!".repeat(78)
        );
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let script = root.join("scripts/schemathesis");
    let started = Instant::now();
    let out = Command::new("bash")
        .arg(&script)
        .current_dir(&root)
        .env("BATON_BIN", env!("CARGO_BIN_EXE_baton"))
        .env("BATON_SCHEMATHESIS_TIER", tier)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.code() == Some(MISSING_TOOL) {
        let why = text
            .lines()
            .find_map(|l| l.split_once("SKIP: ").map(|(_, why)| why))
            .unwrap_or("python3, its venv module or pip is unavailable");
        panic!(
            "schemathesis ({tier} tier) could not run: {why}.\n\
             Install python3 with its venv module and pip (Debian: apt-get install \
             python3-venv), or set {OPT_OUT}=1 to skip these tests."
        );
    }
    assert!(
        out.status.success(),
        "scripts/schemathesis ({tier} tier) failed ({}) after {:?}:\n{text}",
        out.status,
        started.elapsed()
    );
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
