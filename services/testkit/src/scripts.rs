//! Test scripts that install and run tools nobody on this project wrote (Schemathesis, the
//! client generators): run one against this build's binary, and turn "a tool is missing"
//! (the script's exit code 77) into a failure that says what to install, unless the suite
//! was told to leave the script out.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

/// A script's exit code when a tool it needs is unavailable.
pub const MISSING_TOOL: i32 = 77;

/// One script and how to run it.
pub struct ToolScript<'a> {
    /// The script, from the workspace root (e.g. `scripts/clients`).
    pub script: &'a str,
    /// What it checks, for messages ("schemathesis", "the generated clients").
    pub what: &'a str,
    /// The variable that picks the tier, and the tier.
    pub tier_var: &'a str,
    pub tier: &'a str,
    /// The variable that, set to `1`, skips the script (loudly).
    pub opt_out: &'a str,
    /// What to install when a tool is missing.
    pub install: &'a str,
}

impl ToolScript<'_> {
    /// Runs the script with `baton` as `BATON_BIN` from the workspace at `root`; returns
    /// its output (stdout then stderr), or `None` when skipped. Panics when a tool is
    /// missing or the script fails.
    pub fn run(&self, root: &Path, baton: &str) -> Option<String> {
        let (what, tier) = (self.what, self.tier);
        if std::env::var(self.opt_out).is_ok_and(|v| v == "1") {
            eprintln!(
                "\n{bar}\nSKIPPED: {what} ({tier} tier) did not run: {}=1 is set.\n{bar}\n",
                self.opt_out,
                bar = "!".repeat(78)
            );
            return None;
        }
        let script = root.join(self.script);
        let started = Instant::now();
        let out = Command::new("bash")
            .arg(&script)
            .current_dir(root)
            .env("BATON_BIN", baton)
            .env(self.tier_var, tier)
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
                .unwrap_or("a tool it needs is unavailable");
            panic!(
                "{what} ({tier} tier) could not run: {why}.\n{}, or set {}=1 to skip these \
                 tests.",
                self.install, self.opt_out
            );
        }
        assert!(
            out.status.success(),
            "{} ({tier} tier) failed ({}) after {:?}:\n{text}",
            self.script,
            out.status,
            started.elapsed()
        );
        Some(text)
    }
}
