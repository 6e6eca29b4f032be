//! `baton serve` as a child process of a test: waiting for the address it prints, a
//! guard that kills it however the test ends, and a server logging at debug level into a
//! file, for tests that check what never reaches the log.

/// The base URL `baton serve` prints once it listens (its output goes to `log`).
async fn wait_for_address(log: &std::path::Path) -> String {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let printed = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(base) = printed
            .lines()
            .find_map(|l| l.strip_prefix("baton listening on "))
        {
            return base.trim().to_string();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "baton did not start: {printed}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// A child process, killed when dropped (also when a test fails).
struct Killed(std::process::Child);

impl Killed {
    fn stop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `baton serve` (embedded tier, auth off, its data under `dir`) logging JSON at debug
/// level into `dir/baton.log`.
pub struct DebugServer {
    pub base: String,
    log: std::path::PathBuf,
    child: Killed,
}

impl DebugServer {
    pub async fn start(dir: &std::path::Path) -> Self {
        let log = dir.join("baton.log");
        let file = std::fs::File::create(&log).expect("log file");
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.join("data"))
            .current_dir(dir)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("BATON_LOG__FILTER", "debug")
            .env("BATON_LOG__FORMAT", "json")
            .stdout(file.try_clone().expect("log file"))
            .stderr(file)
            .spawn()
            .expect("spawn baton serve");
        let child = Killed(child);
        let base = wait_for_address(&log).await;
        Self { base, log, child }
    }

    /// Sends SIGTERM and waits for the server to exit (at most `within`); how long it
    /// took, `None` if it was still running then.
    pub async fn terminate(&mut self, within: std::time::Duration) -> Option<std::time::Duration> {
        let started = std::time::Instant::now();
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &self.child.0.id().to_string()])
            .status()
            .expect("kill -TERM");
        assert!(sent.success(), "kill -TERM: {sent}");
        while started.elapsed() < within {
            if self.child.0.try_wait().expect("wait").is_some() {
                return Some(started.elapsed());
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        None
    }

    /// Stops the server and returns everything it printed.
    pub fn stop_and_read_log(&mut self) -> String {
        self.child.stop();
        std::fs::read_to_string(&self.log).expect("read log")
    }
}
