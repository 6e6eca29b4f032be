//! `baton serve` as a child process of a test: waiting for the address it prints, and
//! a guard that kills it however the test ends.

/// The base URL `baton serve` prints once it listens (its output goes to `log`).
pub async fn wait_for_address(log: &std::path::Path) -> String {
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
pub struct Killed(pub std::process::Child);

impl Killed {
    pub fn stop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        self.stop();
    }
}
