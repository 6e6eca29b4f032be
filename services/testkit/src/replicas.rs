//! A cluster of `baton serve` child processes ("replicas") on loopback ports sharing one
//! fresh Postgres database and one NATS, for the multi-replica tests and `loadtest/`:
//! start them, signal them (TERM, KILL, STOP, CONT), wait for them, restart them, read run
//! invariants from the shared database ([`Cluster::check_run_invariants`],
//! [`Cluster::event_rows`]), and kill every process when the [`Cluster`] drops.
//!
//! Knows the binary only by its command line, its environment and the stdout line
//! `baton listening on http://ADDR` it prints once ready. Each replica's stderr (its JSON
//! logs) and stdout go to `<name>.log` in the cluster's temporary directory.

mod invariants;
mod replica;
#[cfg(test)]
mod tests;

pub use invariants::{EventRow, LeaseRow};
pub use replica::Replica;

use crate::TestDatabase;
use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

/// The environment variable naming the shared NATS server.
pub const NATS_URL_ENV: &str = "BATON_TEST_NATS_URL";

/// Where the shared NATS server is when [`NATS_URL_ENV`] is unset.
pub const DEFAULT_NATS_URL: &str = "nats://127.0.0.1:4222";

/// What a replica prints on stdout, followed by its base URL, once it serves.
const LISTENING: &str = "baton listening on ";

/// How long a replica may take to print its address, and `admin create-tenant` to finish.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// How often exits are polled.
const POLL: Duration = Duration::from_millis(10);

/// Lines of each replica's log that [`Cluster`] prints when dropped during a panic.
const TAIL_ON_PANIC: usize = 40;

/// The encryption key of team-tier test processes: fixed and public, for test data only.
pub const TEST_KEY: &str = "dGVzdC1vbmx5LWtleS1kby1ub3QtdXNlLWluLXByb2Q=";

/// The variables that give a team-tier `baton` process [`TEST_KEY`] (id `test`) as its
/// active encryption key; every replica of a [`Cluster`] gets them.
pub fn crypto_env() -> [(&'static str, &'static str); 2] {
    [
        ("BATON_CRYPTO__KEYS__TEST", TEST_KEY),
        ("BATON_CRYPTO__ACTIVE_KEY", "test"),
    ]
}

/// The shared NATS server: [`NATS_URL_ENV`] or [`DEFAULT_NATS_URL`].
pub fn nats_url() -> String {
    std::env::var(NATS_URL_ENV).unwrap_or_else(|_| DEFAULT_NATS_URL.to_string())
}

/// How to start a [`Cluster`]; see [`Cluster::builder`].
#[derive(Debug)]
pub struct ClusterBuilder {
    bin: PathBuf,
    replicas: usize,
    nats_url: Option<String>,
    env: Vec<(String, String)>,
}

impl ClusterBuilder {
    /// How many replicas to start (default 1).
    pub fn replicas(mut self, n: usize) -> Self {
        self.replicas = n;
        self
    }

    /// The NATS server the replicas use (default [`nats_url`]), e.g. a private
    /// [`crate::TestNats`].
    pub fn nats_url(mut self, url: impl Into<String>) -> Self {
        self.nats_url = Some(url.into());
        self
    }

    /// An extra environment variable for every replica and admin command (timing knobs).
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Creates a fresh database and starts the replicas one after another (the first
    /// migrates the database before it listens).
    pub async fn start(self) -> anyhow::Result<Cluster> {
        let db = TestDatabase::postgres().await?;
        let dir = tempfile::Builder::new()
            .prefix("baton-cluster-")
            .tempdir()
            .context("cannot create a temporary directory")?;
        let mut env = vec![
            ("BATON_DATABASE__URL".to_string(), db.url().to_string()),
            (
                "BATON_BUS__NATS_URL".to_string(),
                self.nats_url.unwrap_or_else(nats_url),
            ),
            ("BATON_LOG__FORMAT".to_string(), "json".to_string()),
            // Tests poll as fast as they like; a test of the limits sets its own.
            ("BATON_HTTP__KEY_RATE_LIMIT".to_string(), "0".to_string()),
            ("BATON_HTTP__TENANT_RATE_LIMIT".to_string(), "0".to_string()),
            // The tests' tool and model servers listen on loopback: an operator's
            // allowlist, as an installation with an internal tool service would have.
            ("BATON_EGRESS__ALLOW".to_string(), "127.0.0.1".to_string()),
        ];
        env.extend(crypto_env().map(|(k, v)| (k.to_string(), v.to_string())));
        env.extend(self.env);
        let mut cluster = Cluster {
            bin: self.bin,
            env,
            replicas: Vec::new(),
            pool: tokio::sync::OnceCell::new(),
            db: Some(db),
            dir,
        };
        for _ in 0..self.replicas {
            cluster.add_replica().await?;
        }
        Ok(cluster)
    }
}

/// Several `baton serve` processes on one database and one NATS. Dropping it kills every
/// replica (SIGKILL, then reaps it) and drops the database; dropping it while a test
/// panics first prints the tail of every replica's log.
#[derive(Debug)]
pub struct Cluster {
    bin: PathBuf,
    /// Every replica's environment apart from `PATH` and its name.
    env: Vec<(String, String)>,
    replicas: Vec<Replica>,
    pool: tokio::sync::OnceCell<sqlx::PgPool>,
    db: Option<TestDatabase>,
    dir: tempfile::TempDir,
}

impl Cluster {
    /// A builder for a cluster of the `baton` binary at `bin` (tests pass
    /// `env!("CARGO_BIN_EXE_baton")`).
    pub fn builder(bin: impl Into<PathBuf>) -> ClusterBuilder {
        ClusterBuilder {
            bin: bin.into(),
            replicas: 1,
            nats_url: None,
            env: Vec::new(),
        }
    }

    /// `n` replicas of `bin` on a fresh database and the shared NATS.
    pub async fn start(bin: impl Into<PathBuf>, n: usize) -> anyhow::Result<Self> {
        Self::builder(bin).replicas(n).start().await
    }

    /// Starts one more replica, named `replica-<index>`; returns its index.
    pub async fn add_replica(&mut self) -> anyhow::Result<usize> {
        let index = self.replicas.len();
        let replica = self.launch(format!("replica-{index}")).await?;
        self.replicas.push(replica);
        Ok(index)
    }

    /// The number of replicas started (running or not).
    pub fn len(&self) -> usize {
        self.replicas.len()
    }

    pub fn is_empty(&self) -> bool {
        self.replicas.is_empty()
    }

    /// Replica `i`. Panics if there is no such replica, like slice indexing.
    pub fn replica(&self, i: usize) -> &Replica {
        &self.replicas[i]
    }

    /// `http://127.0.0.1:PORT` of replica `i`'s current process. Panics like [`Self::replica`].
    pub fn base_url(&self, i: usize) -> &str {
        self.replicas[i].base_url()
    }

    /// The process id of replica `i`'s current process. Panics like [`Self::replica`].
    pub fn pid(&self, i: usize) -> u32 {
        self.replicas[i].pid()
    }

    /// The shared database's URL.
    pub fn database_url(&self) -> &str {
        self.db.as_ref().map_or("", TestDatabase::url)
    }

    /// The environment every replica gets (besides `PATH` and `BATON_REPLICA_NAME`).
    pub fn env(&self) -> &[(String, String)] {
        &self.env
    }

    /// The temporary directory holding the replicas' logs (and working directories).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Sends SIGTERM (graceful drain) to replica `i`.
    pub fn sigterm(&mut self, i: usize) -> anyhow::Result<()> {
        self.signal(i, "TERM")
    }

    /// Sends SIGKILL (a crash) to replica `i`.
    pub fn sigkill(&mut self, i: usize) -> anyhow::Result<()> {
        self.signal(i, "KILL")
    }

    /// Sends SIGSTOP (a pause: alive, silent, holding its connections) to replica `i`.
    pub fn sigstop(&mut self, i: usize) -> anyhow::Result<()> {
        self.signal(i, "STOP")
    }

    /// Sends SIGCONT (resume after [`Self::sigstop`]) to replica `i`.
    pub fn sigcont(&mut self, i: usize) -> anyhow::Result<()> {
        self.signal(i, "CONT")
    }

    /// Sends `SIG<name>` to replica `i` with `kill(1)`; fails if the process has exited
    /// (its pid may belong to someone else by now).
    pub fn signal(&mut self, i: usize, name: &str) -> anyhow::Result<()> {
        let replica = self.replica_mut(i)?;
        if let Some(status) = replica.try_exit()? {
            bail!("{} has exited already ({status})", replica.name());
        }
        let pid = replica.pid();
        let out = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(pid.to_string())
            .output()
            .context("cannot run kill(1)")?;
        if !out.status.success() {
            bail!(
                "kill -{name} {pid} failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }

    /// Waits until replica `i`'s process exits and returns its status; fails after
    /// `timeout`, leaving the process running.
    pub async fn wait_exit(&mut self, i: usize, timeout: Duration) -> anyhow::Result<ExitStatus> {
        let deadline = tokio::time::Instant::now() + timeout;
        let replica = self.replica_mut(i)?;
        loop {
            if let Some(status) = replica.try_exit()? {
                return Ok(status);
            }
            if tokio::time::Instant::now() >= deadline {
                bail!("{} still runs after {timeout:?}", replica.name());
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Whether replica `i`'s current process is alive (a stopped process is alive).
    pub fn is_running(&mut self, i: usize) -> anyhow::Result<bool> {
        Ok(self.replica_mut(i)?.try_exit()?.is_none())
    }

    /// Replaces replica `i` with a new process of the same name on a new port (a pod
    /// restart: same name, new boot id). Kills the old process first if it still runs.
    pub async fn restart(&mut self, i: usize) -> anyhow::Result<()> {
        let name = self.replica_mut(i)?.name().to_string();
        self.replicas[i].kill();
        let replica = self.launch(name).await?;
        self.replicas[i] = replica;
        Ok(())
    }

    /// Creates a tenant with `baton admin create-tenant NAME` on the shared database (it
    /// migrates first, so it works before any replica starts) and returns its id and owner
    /// API key.
    pub async fn create_tenant(&self, name: &str) -> anyhow::Result<(uuid::Uuid, String)> {
        let stdout = self.admin(&["create-tenant", name], None).await?;
        let field = |key: &str| {
            stdout
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .map(|v| v.trim().to_string())
                .with_context(|| format!("no {key:?} in the output of create-tenant: {stdout}"))
        };
        let tenant = field("tenant_id:")?
            .parse()
            .context("create-tenant printed a tenant id that is not a UUID")?;
        Ok((tenant, field("api_key:")?))
    }

    /// Creates a user with `password`, a member of the tenant named `tenant` with `role`,
    /// with `baton admin create-user` (the password on its standard input).
    pub async fn create_user(
        &self,
        email: &str,
        password: &str,
        tenant: &str,
        role: &str,
    ) -> anyhow::Result<()> {
        let args = ["create-user", email, "--tenant", tenant, "--role", role];
        self.admin(&args, Some(password)).await.map(drop)
    }

    /// `baton admin ARGS` of the team tier on the shared database, with `stdin` as its
    /// input; its standard output.
    async fn admin(&self, args: &[&str], stdin: Option<&str>) -> anyhow::Result<String> {
        use tokio::io::AsyncWriteExt;
        let what = args.first().copied().unwrap_or("admin");
        let mut cmd = tokio::process::Command::new(&self.bin);
        cmd.arg("admin")
            .args(args)
            .args(["--tier", "team", "--auth-required"])
            .current_dir(self.dir.path())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd
            .spawn()
            .with_context(|| format!("cannot run baton admin {what}"))?;
        let mut input = child.stdin.take().context("baton admin's stdin")?;
        if let Some(line) = stdin {
            input
                .write_all(format!("{line}\n").as_bytes())
                .await
                .context("writing to baton admin")?;
        }
        drop(input);
        let out = tokio::time::timeout(START_TIMEOUT, child.wait_with_output())
            .await
            .with_context(|| format!("baton admin {what} took over {START_TIMEOUT:?}"))?
            .with_context(|| format!("cannot run baton admin {what}"))?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if !out.status.success() {
            bail!(
                "baton admin {what} failed ({}): {stdout}{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(stdout)
    }

    /// The last `lines` lines of every replica's log, each under a header naming it.
    pub fn dump_logs(&self, lines: usize) -> String {
        let mut out = String::new();
        for r in &self.replicas {
            out.push_str(&format!(
                "===== {} ({}) =====\n",
                r.name(),
                r.log_path().display()
            ));
            out.push_str(&r.log_tail(lines));
        }
        out
    }

    /// Kills every replica (SIGKILL) and drops the database, reporting failure.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        for r in &mut self.replicas {
            r.kill();
        }
        self.pool.take();
        match self.db.take() {
            Some(db) => db.drop_db().await,
            None => Ok(()),
        }
    }

    fn replica_mut(&mut self, i: usize) -> anyhow::Result<&mut Replica> {
        let n = self.replicas.len();
        self.replicas
            .get_mut(i)
            .with_context(|| format!("no replica {i}: the cluster has {n}"))
    }

    async fn launch(&self, name: String) -> anyhow::Result<Replica> {
        Replica::launch(&self.bin, &self.env, self.dir.path(), name).await
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking() && !self.replicas.is_empty() {
            eprintln!("{}", self.dump_logs(TAIL_ON_PANIC));
        }
        for r in &mut self.replicas {
            r.kill();
        }
    }
}
