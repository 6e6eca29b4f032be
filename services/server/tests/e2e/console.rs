//! The web console in a real browser (Debian's chromium, driven by Playwright from
//! `scripts/browser`) against a `baton serve` child process, as its users use it:
//! `tests/browser/console.py` logs an owner in, creates an agent, starts a run and
//! watches its deltas, approves and answers a tool call, resolves an uncertain one, posts
//! a message and cancels; a viewer (on a phone-sized screen) sees no control that
//! writes, and a write forced from its page is refused. Screenshots go to
//! `target/screenshots`.
//!
//! `BATON_SKIP_BROWSER=1` skips it, loudly.

use crate::browser_streams::ROOT;
use baton_testkit::serve::Serve;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const PASSWORD: &str = "correct horse battery staple";

#[tokio::test]
async fn an_owner_runs_the_console_and_a_viewer_only_looks() {
    let Some(python) = baton_testkit::browser::python(Path::new(ROOT)).await else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let data = data.to_str().expect("UTF-8");
    let key = create_tenant(dir.path(), "acme", data);
    let mut emails = Vec::new();
    for role in ["owner", "viewer"] {
        let email = format!("{role}@example.com");
        let args = [
            "create-user",
            &email,
            "--tenant",
            "acme",
            "--role",
            role,
            "--data-dir",
            data,
        ];
        admin(dir.path(), &args, Some(PASSWORD));
        emails.push(email);
    }
    let beta = create_tenant(dir.path(), "beta", data);
    let bin = Path::new(env!("CARGO_BIN_EXE_baton"));
    let served = Serve::start(
        bin,
        dir.path(),
        &["--data-dir", data, "--auth-required"],
        &[],
    );
    // The viewer is also a member of a second tenant, as people often are.
    join(&served.base, &beta, &emails[1]).await;

    let env = [
        ("BATON", served.base.as_str()),
        ("KEY", &key),
        ("OWNER_EMAIL", &emails[0]),
        ("VIEWER_EMAIL", &emails[1]),
        ("PASSWORD", PASSWORD),
    ];
    let limit = Duration::from_secs(180);
    baton_testkit::browser::run(Path::new(ROOT), &python, "console.py", &env, limit).await;
}

/// `email` (a user already) joins the tenant of the admin key `admin` as a viewer: invited,
/// then accepting with a session of its own.
async fn join(base: &str, admin: &str, email: &str) {
    use crate::common::Api;
    use serde_json::json;
    let invited = Api::new(base, Some(admin.to_string()))
        .post("/v1/invitations", json!({"email": email, "role": "viewer"}))
        .await;
    assert_eq!(invited.status, 201, "{}", invited.body);
    let login = Api::new(base, None)
        .post("/v1/login", json!({"email": email, "password": PASSWORD}))
        .await;
    assert_eq!(login.status, 200, "{}", login.body);
    let session = Api::new(base, login.body["token"].as_str().map(str::to_string));
    let id = invited.body["id"].as_str().expect("an invitation id");
    let accepted = session
        .post(&format!("/v1/me/invitations/{id}/accept"), json!({}))
        .await;
    assert_eq!(accepted.status, 200, "{}", accepted.body);
}

/// `baton admin create-tenant NAME` on the data directory `data`: its owner key.
fn create_tenant(dir: &Path, name: &str, data: &str) -> String {
    admin(dir, &["create-tenant", name, "--data-dir", data], None)
        .lines()
        .find_map(|l| l.strip_prefix("api_key:"))
        .expect("an owner key")
        .trim()
        .to_string()
}

/// `baton admin ARGS` in `dir`, with `stdin` as its input; its output.
fn admin(dir: &Path, args: &[&str], stdin: Option<&str>) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_baton"))
        .arg("admin")
        .args(args)
        .current_dir(dir)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("baton admin runs");
    let mut input = child.stdin.take().expect("stdin");
    if let Some(line) = stdin {
        writeln!(input, "{line}").expect("write the password");
    }
    drop(input);
    let out = child.wait_with_output().expect("baton admin ends");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "baton admin {args:?}: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

#[tokio::test]
async fn the_embedded_tier_console_needs_no_login() {
    let Some(python) = baton_testkit::browser::python(Path::new(ROOT)).await else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let bin = Path::new(env!("CARGO_BIN_EXE_baton"));
    let served = Serve::start(
        bin,
        dir.path(),
        &["--data-dir", data.to_str().expect("UTF-8")],
        &[],
    );
    let local = crate::common::Api::new(&served.base, None);
    let agent = local
        .post(
            "/v1/agents",
            serde_json::json!({"name": "greeter", "provider": {"kind": "scripted",
                "replies": [{"content": "Hi there", "delay_ms": 200}]}}),
        )
        .await;
    assert_eq!(agent.status, 201, "{}", agent.body);
    let id = agent.body["id"].as_str().expect("an id").to_string();
    let env = [("BATON", served.base.as_str()), ("AGENT", id.as_str())];
    let limit = Duration::from_secs(120);
    baton_testkit::browser::run(Path::new(ROOT), &python, "console_local.py", &env, limit).await;
}
