//! The browser tests' tools: Debian's chromium and Playwright, installed once by
//! `scripts/browser` (its venv's python runs the tests' scripts under
//! `services/server/tests/browser/`).

use std::path::Path;
use std::process::Stdio;

/// The python that has Playwright, installing it (and chromium) once with
/// `scripts/browser` under the workspace `root`. `None` when `BATON_SKIP_BROWSER=1` (said
/// loudly); panics, naming what to install, when python3 or chromium is missing.
pub async fn python(root: &Path) -> Option<String> {
    if std::env::var("BATON_SKIP_BROWSER").is_ok_and(|v| v == "1") {
        eprintln!(
            "\n{bar}\nSKIPPED: the browser tests did not run: BATON_SKIP_BROWSER=1 is set.\n{bar}\n",
            bar = "!".repeat(78)
        );
        return None;
    }
    let out = tokio::process::Command::new("bash")
        .arg(root.join("scripts/browser"))
        .arg("--python")
        .current_dir(root)
        .stdin(Stdio::null())
        .output()
        .await
        .expect("running scripts/browser");
    let text = String::from_utf8_lossy(&out.stderr);
    assert_ne!(
        out.status.code(),
        Some(crate::scripts::MISSING_TOOL),
        "the browser tools could not be installed: {text}\nInstall python3 with its venv \
         module and chromium (Debian: apt-get install python3-venv chromium), or set \
         BATON_SKIP_BROWSER=1 to skip these tests."
    );
    assert!(out.status.success(), "scripts/browser failed: {text}");
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Runs `script` (under `services/server/tests/browser/`) with `python` and `env`, within
/// `limit`; its output when it ends well and says `<script>: ok`, else panics with it.
pub async fn run(
    root: &Path,
    python: &str,
    script: &str,
    env: &[(&str, &str)],
    limit: std::time::Duration,
) -> String {
    let shots = root.join("target/screenshots");
    std::fs::create_dir_all(&shots).expect("a screenshot directory");
    let out = tokio::process::Command::new(python)
        .arg(root.join("services/server/tests/browser").join(script))
        .env("SHOTS", &shots)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(limit, out)
        .await
        .unwrap_or_else(|_| panic!("{script} did not end within {limit:?}"))
        .unwrap_or_else(|e| panic!("running {script}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{script} failed:\n{text}");
    // It ran to its end: a script that stopped early proves nothing.
    assert!(text.contains(&format!("{script}: ok")), "{text}");
    text
}
