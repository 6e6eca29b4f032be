//! One `baton serve` child process of the embedded tier (or whatever its arguments make
//! it), in a directory of the test's, on a free loopback port: what a user starts with
//! the README's command. Killed on drop, whatever happened.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How long `baton serve` may take to listen.
const START_TIMEOUT: Duration = Duration::from_secs(15);
/// The line `baton serve` prints on stdout once it listens, before its base URL.
const LISTENING: &str = "baton listening on ";

pub struct Serve {
    child: Child,
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    log: PathBuf,
}

impl Serve {
    /// Starts `bin serve ARGS` in `dir` with a clean environment (`PATH` and `env`), its
    /// stderr in `dir/serve.log`, and waits until it listens.
    pub fn start(bin: &Path, dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Serve {
        let log = dir.join("serve.log");
        let err = File::create(&log).expect("server log");
        let mut child = Command::new(bin)
            .arg("serve")
            .args(args)
            .args(["--listen", "127.0.0.1:0"])
            .current_dir(dir)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(err)
            .spawn()
            .expect("spawn baton serve");
        let stdout = child.stdout.take().expect("stdout");
        let mut server = Serve {
            child,
            base: String::new(),
            log,
        };
        let (tx, rx) = mpsc::channel();
        // Reads stdout to its end, so the server never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(base) = line.strip_prefix(LISTENING) {
                    let _ = tx.send(base.trim().to_string());
                }
            }
        });
        match rx.recv_timeout(START_TIMEOUT) {
            Ok(base) => server.base = base,
            Err(e) => panic!("baton serve is not listening ({e}):\n{}", server.log_tail()),
        }
        server
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The last 30 lines of the server's log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
