//! A real browser (Debian's chromium, driven by Playwright from `scripts/browser`) against
//! a server over real HTTP, running `tests/browser/streams.py`: a plain page of another
//! origin follows an ended run with a stream ticket and sees every event once, in order;
//! a used and an expired ticket answer `401`; a cookie login keeps its token from
//! scripts; a form posted to the logout from a page of the same site (the cookie goes
//! along, the anti-CSRF header cannot) and from another site is refused, and the session
//! lives on.
//!
//! `BATON_SKIP_BROWSER=1` skips it, loudly; without python3 or chromium it fails, saying
//! what to install.

use crate::common::TestApp;
use baton_core::Role;
use baton_testkit::scripts::MISSING_TOOL;
use serde_json::json;
use std::process::Stdio;
use std::time::Duration;

pub const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
const PASSWORD: &str = "correct horse battery staple";
const TICKET_SECS: u64 = 2;

#[tokio::test]
async fn a_page_elsewhere_streams_with_a_ticket_and_forged_posts_are_refused() {
    if skipped() {
        return;
    }
    let python = browser_python().await;
    // The other origin's pages get a port of their own, free now.
    let page_port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let app = TestApp::embedded_with(|c| {
        c.auth_required = true;
        c.http.allowed_origins = vec![format!("http://127.0.0.1:{page_port}")];
        c.login.stream_ticket_lifetime = Duration::from_secs(TICKET_SECS);
    })
    .await;
    let (tenant, owner) = app.tenant(Role::Owner).await;
    let key = app.key(tenant, Role::Viewer, None, None).await;
    let email = app.member(tenant, Role::Member, PASSWORD).await;
    let agent = owner
        .post(
            "/v1/agents",
            json!({"name": "bye", "provider": {"kind": "scripted", "replies": [
                {"content": "Bye", "complete_run": true}]}}),
        )
        .await;
    assert_eq!(agent.status, 201, "{}", agent.body);
    let run = owner
        .run(agent.body["id"].as_str().expect("id"), Some("Hi"))
        .await;
    owner.wait_status(&run, "completed").await;

    let shots = format!("{ROOT}/target/screenshots");
    std::fs::create_dir_all(&shots).expect("a screenshot directory");
    let out = tokio::process::Command::new(&python)
        .arg(format!("{ROOT}/services/server/tests/browser/streams.py"))
        .env("BATON", &app.base)
        .env("KEY", &key)
        .env("RUN", &run)
        .env("EMAIL", &email)
        .env("PASSWORD", PASSWORD)
        .env("PAGE_PORT", page_port.to_string())
        .env("TICKET_SECS", TICKET_SECS.to_string())
        .env("SHOTS", &shots)
        .stdin(Stdio::null())
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), out)
        .await
        .expect("the browser script ends within two minutes")
        .expect("the browser script runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "streams.py failed:\n{text}");
    // It ran to its end: a script that stopped early proves nothing.
    assert!(text.contains("streams.py: ok"), "{text}");
    assert_eq!(text.matches("ok: ").count(), 12, "{text}");
}

/// Whether `BATON_SKIP_BROWSER=1` leaves the browser tests out (said loudly).
pub fn skipped() -> bool {
    let skip = std::env::var("BATON_SKIP_BROWSER").is_ok_and(|v| v == "1");
    if skip {
        eprintln!(
            "\n{bar}\nSKIPPED: the browser tests did not run: BATON_SKIP_BROWSER=1 is set.\n{bar}\n",
            bar = "!".repeat(78)
        );
    }
    skip
}

/// The python that has Playwright, installing it (and chromium) once.
pub async fn browser_python() -> String {
    let out = tokio::process::Command::new("bash")
        .arg(format!("{ROOT}/scripts/browser"))
        .arg("--python")
        .current_dir(ROOT)
        .stdin(Stdio::null())
        .output()
        .await
        .expect("running scripts/browser");
    let text = String::from_utf8_lossy(&out.stderr);
    assert_ne!(
        out.status.code(),
        Some(MISSING_TOOL),
        "the browser tools could not be installed: {text}\nInstall python3 with its venv \
         module and chromium (Debian: apt-get install python3-venv chromium), or set \
         BATON_SKIP_BROWSER=1 to skip these tests."
    );
    assert!(out.status.success(), "scripts/browser failed: {text}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}
