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
use serde_json::json;
use std::path::Path;
use std::time::Duration;

pub const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
const PASSWORD: &str = "correct horse battery staple";
const TICKET_SECS: u64 = 2;

#[tokio::test]
async fn a_page_elsewhere_streams_with_a_ticket_and_forged_posts_are_refused() {
    let Some(python) = baton_testkit::browser::python(Path::new(ROOT)).await else {
        return;
    };
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

    let (port, secs) = (page_port.to_string(), TICKET_SECS.to_string());
    let env = [
        ("BATON", app.base.as_str()),
        ("KEY", &key),
        ("RUN", &run),
        ("EMAIL", &email),
        ("PASSWORD", PASSWORD),
        ("PAGE_PORT", &port),
        ("TICKET_SECS", &secs),
    ];
    let limit = Duration::from_secs(120);
    let text =
        baton_testkit::browser::run(Path::new(ROOT), &python, "streams.py", &env, limit).await;
    assert_eq!(text.matches("ok: ").count(), 12, "{text}");
}
