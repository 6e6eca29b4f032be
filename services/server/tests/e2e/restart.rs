//! The embedded tier after a `kill -9`: the next `baton serve` on the same data directory
//! holds its lock, so it knows the leases in the database were the dead process's and
//! adopts their runs at once instead of waiting for them to lapse; and a second process on
//! a data directory that is served is refused.

use crate::child::DebugServer;
use baton_testkit::Api;
use std::time::{Duration, Instant};

/// The embedded tier's lease TTL: without adoption at start, a run waits this long.
const LEASE_TTL: Duration = Duration::from_secs(15);

#[tokio::test]
async fn a_killed_processs_runs_are_adopted_at_once_by_the_next_on_its_data_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut first = DebugServer::start(dir.path()).await;
    let api = Api::new(&first.base, None);
    let agent = api.agent(&[("slow reply", 2_000, false)]).await;
    let run = api.run(&agent, Some("hi")).await;
    api.wait_status(&run, "running").await;
    first.stop_and_read_log(); // SIGKILL, mid-turn: its lease stays in the database

    let restarted = Instant::now();
    let second = DebugServer::start(dir.path()).await;
    let api = Api::new(&second.base, None);
    api.wait_status(&run, "waiting").await;
    let took = restarted.elapsed();
    println!("the killed process's run was finished {took:?} after the restart");
    assert!(
        took < LEASE_TTL / 2,
        "the run waited {took:?} for its lease to lapse"
    );
    let adopted = api
        .events(&run)
        .await
        .into_iter()
        .filter(|e| e["type"] == "lease.acquired")
        .map(|e| e["data"]["reason"].clone())
        .collect::<Vec<_>>();
    assert_eq!(
        adopted.last(),
        Some(&serde_json::json!("adopted")),
        "{adopted:?}"
    );

    // While it serves, another process on the same data directory is refused.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("data"))
        .current_dir(dir.path())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .output()
        .expect("run baton");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a second process served: {said}");
    assert!(
        said.contains("another baton process serves the data directory"),
        "{said}"
    );
    drop(second);
}
