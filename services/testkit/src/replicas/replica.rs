//! One replica's current `baton serve` process: started with a cleared environment,
//! its address read from stdout, its output appended to a log file, reaped at most once
//! so a recycled pid is never signalled.

use super::{LISTENING, POLL, START_TIMEOUT, TAIL_ON_PANIC};
use anyhow::{Context, bail};
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};

/// One replica's current process (see [`super::Cluster`]).
#[derive(Debug)]
pub struct Replica {
    name: String,
    child: Child,
    /// Set once the process has been reaped; its pid must not be signalled after that.
    exit: Option<ExitStatus>,
    base_url: String,
    log: PathBuf,
}

impl Replica {
    /// Starts `baton serve` named `name` in `dir` and waits until it prints its address;
    /// stdout and stderr are appended to `dir/<name>.log`.
    pub(super) async fn launch(
        bin: &Path,
        env: &[(String, String)],
        dir: &Path,
        name: String,
    ) -> anyhow::Result<Replica> {
        let log = dir.join(format!("{name}.log"));
        let mut file = File::options()
            .create(true)
            .append(true)
            .open(&log)
            .with_context(|| format!("cannot open {}", log.display()))?;
        writeln!(file, "----- starting {name} -----").context("cannot write the log")?;
        let mut child = Command::new(bin)
            .args(["serve", "--tier", "team", "--auth-required"])
            .args(["--listen", "127.0.0.1:0"])
            .current_dir(dir)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .envs(env.iter().map(|(k, v)| (k, v)))
            .env("BATON_REPLICA_NAME", &name)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(file.try_clone().context("cannot share the log file")?)
            .spawn()
            .with_context(|| format!("cannot run {}", bin.display()))?;
        let stdout = child.stdout.take().context("no stdout pipe")?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        // Copies stdout into the log until the process exits, handing over the address.
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                // Logged first, so the log has the line once the caller knows the address.
                let _ = writeln!(file, "{line}");
                if let Some(base) = line.strip_prefix(LISTENING)
                    && let Some(tx) = tx.take()
                {
                    let _ = tx.send(base.trim().to_string());
                }
            }
        });
        let mut replica = Replica {
            name,
            child,
            exit: None,
            base_url: String::new(),
            log,
        };
        match tokio::time::timeout(START_TIMEOUT, rx).await {
            Ok(Ok(base)) => {
                replica.base_url = base;
                Ok(replica)
            }
            Ok(Err(_)) => {
                let status = replica.wait_briefly();
                let tail = replica.log_tail(TAIL_ON_PANIC);
                bail!(
                    "{} exited before listening ({status}):\n{tail}",
                    replica.name
                )
            }
            Err(_) => {
                replica.kill();
                let tail = replica.log_tail(TAIL_ON_PANIC);
                bail!(
                    "{} not listening after {START_TIMEOUT:?}:\n{tail}",
                    replica.name
                )
            }
        }
    }

    /// `replica-<index>`, its `BATON_REPLICA_NAME` (event `meta.replica` is
    /// `<name>/<boot id>`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The current process's id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The log file (stderr and stdout of every process this replica has had).
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The last `lines` lines of the log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        let mut tail = all[all.len().saturating_sub(lines)..].join("\n");
        tail.push('\n');
        tail
    }

    /// The exit status, reaping the process if it has exited.
    pub(super) fn try_exit(&mut self) -> anyhow::Result<Option<ExitStatus>> {
        if self.exit.is_none() {
            self.exit = self
                .child
                .try_wait()
                .with_context(|| format!("cannot wait for {}", self.name))?;
        }
        Ok(self.exit)
    }

    /// SIGKILL and reap, unless reaped already (works on a stopped process too).
    pub(super) fn kill(&mut self) {
        if self.exit.is_none() {
            let _ = self.child.kill();
            self.exit = self.child.wait().ok();
        }
    }

    /// Reaps a process whose stdout closed: it has exited or is about to.
    pub(super) fn wait_briefly(&mut self) -> String {
        for _ in 0..100 {
            if let Ok(Some(status)) = self.try_exit() {
                return status.to_string();
            }
            std::thread::sleep(POLL);
        }
        self.kill();
        "closed its stdout".to_string()
    }
}
