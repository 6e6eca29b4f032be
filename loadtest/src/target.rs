//! What the load scenarios drive: replicas the harness spawns (a testkit [`Cluster`] on a
//! fresh database and the local NATS, with a tenant of its own and the request rate
//! limits off) or replicas already running, given by base URL and API key. Either way it knows the base URLs, the key and
//! how to check a run's stream at the end: from the shared database for a spawned
//! cluster, through the API otherwise.

use crate::client::Client;
use anyhow::{Context, bail};
use baton_testkit::Cluster;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

/// Where the load goes.
#[derive(clap::Args, Debug, Clone)]
pub struct TargetArgs {
    /// The `baton` binary to spawn (default: target/release/baton, else target/debug/baton).
    #[arg(long)]
    pub baton: Option<PathBuf>,
    /// Replicas to spawn.
    #[arg(long, default_value_t = 2)]
    pub replicas: usize,
    /// `KEY=VALUE` for every spawned replica (e.g. BATON_DATABASE__APP_POOL=32); repeatable.
    #[arg(long = "replica-env", value_parser = parse_env)]
    pub replica_env: Vec<(String, String)>,
    /// Base URLs of running replicas to drive instead of spawning any (comma-separated or
    /// repeated); needs --key. Their request rate limits should be off (0), or the load
    /// meets `429 rate_limited`.
    #[arg(long, value_delimiter = ',')]
    pub url: Vec<String>,
    /// API key (member role or above) for --url.
    #[arg(long, env = "BATON_LOADTEST_KEY", hide_env_values = true)]
    pub key: Option<String>,
}

pub fn parse_env(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("expected KEY=VALUE, got {s:?}"))
}

/// Describes the target in reports.
#[derive(Debug, Clone, Serialize)]
pub struct About {
    /// `spawned` or `url`.
    pub mode: &'static str,
    pub replicas: usize,
    /// The spawned binary and its profile (`release` or `debug`).
    pub baton: Option<String>,
    pub profile: Option<&'static str>,
    pub replica_env: Vec<(String, String)>,
}

/// The replicas under load.
pub struct Target {
    cluster: Option<Cluster>,
    pub urls: Vec<String>,
    pub key: String,
    pub about: About,
}

impl Target {
    /// Spawns the cluster, or takes the given URLs.
    pub async fn start(args: &TargetArgs) -> anyhow::Result<Self> {
        if !args.url.is_empty() {
            let key = args
                .key
                .clone()
                .context("--url needs --key (or BATON_LOADTEST_KEY)")?;
            let urls: Vec<String> = args
                .url
                .iter()
                .map(|u| u.trim_end_matches('/').to_string())
                .collect();
            return Ok(Target {
                cluster: None,
                about: About {
                    mode: "url",
                    replicas: urls.len(),
                    baton: None,
                    profile: None,
                    replica_env: Vec::new(),
                },
                urls,
                key,
            });
        }
        anyhow::ensure!(args.replicas > 0, "--replicas must be at least 1");
        let bin = resolve_baton(args.baton.as_deref())?;
        let mut builder = Cluster::builder(&bin).replicas(args.replicas);
        // The harness's own settings first: --replica-env may override them.
        let mut env = unlimited(&bin).await?;
        env.extend(args.replica_env.iter().cloned());
        for (k, v) in &env {
            builder = builder.env(k, v);
        }
        let cluster = builder.start().await.context("starting the cluster")?;
        let (_, key) = cluster.create_tenant("loadtest").await?;
        let urls = (0..cluster.len())
            .map(|i| cluster.base_url(i).to_string())
            .collect();
        Ok(Target {
            about: About {
                mode: "spawned",
                replicas: args.replicas,
                baton: Some(bin.display().to_string()),
                profile: Some(profile_of(&bin)),
                replica_env: env,
            },
            cluster: Some(cluster),
            urls,
            key,
        })
    }

    /// The base URL for request number `i`: round-robin over the replicas.
    pub fn url(&self, i: u64) -> &str {
        &self.urls[(i % self.urls.len() as u64) as usize]
    }

    /// (name, pid) of each spawned replica's current process; empty for `--url`.
    pub fn pids(&self) -> Vec<(String, u32)> {
        self.cluster.as_ref().map_or_else(Vec::new, |c| {
            (0..c.len())
                .map(|i| (format!("replica-{i}"), c.pid(i)))
                .collect()
        })
    }

    /// The spawned cluster's database URL, if the harness spawned it.
    pub fn database_url(&self) -> Option<&str> {
        self.cluster.as_ref().map(Cluster::database_url)
    }

    /// Checks that the run's stored versions are exactly `1..=n` and that its projection
    /// is at `n`; returns `n`. Reads the database of a spawned cluster, else the API.
    pub async fn check_run(&self, client: &Client, run: uuid::Uuid) -> anyhow::Result<i64> {
        if let Some(c) = &self.cluster {
            return c.check_run_invariants(run).await;
        }
        let base = self.url(run.as_u128() as u64);
        let events = client.events(base, run).await?;
        let versions: Vec<i64> = events
            .iter()
            .filter_map(|e| e["version"].as_i64())
            .collect();
        let n = versions.len() as i64;
        if n == 0 {
            bail!("run {run} has no events");
        }
        if let Some((want, got)) = (1..=n).zip(&versions).find(|(want, got)| want != *got) {
            bail!("run {run}: expected version {want}, found {got}");
        }
        let projected = client.run(base, run).await?["version"].as_i64();
        if projected != Some(n) {
            bail!("run {run}: the run is at version {projected:?}, its events end at {n}");
        }
        Ok(n)
    }

    /// The spawned cluster, to signal and restart its replicas; fails for `--url`.
    pub fn cluster_mut(&mut self) -> anyhow::Result<&mut Cluster> {
        self.cluster
            .as_mut()
            .context("this scenario signals replicas: it needs a spawned cluster, not --url")
    }

    /// Re-reads the base URLs of a spawned cluster (a restarted replica has a new port).
    pub fn refresh_urls(&mut self) {
        if let Some(c) = &self.cluster {
            self.urls = (0..c.len()).map(|i| c.base_url(i).to_string()).collect();
        }
    }

    /// Stops a spawned cluster and drops its database.
    pub async fn stop(self) -> anyhow::Result<()> {
        match self.cluster {
            Some(c) => c.stop().await,
            None => Ok(()),
        }
    }
}

/// The request rate limits a load test switches off (it measures capacity, not the
/// limiter): those of the variables that the binary knows are set to 0.
const RATE_LIMITS: [&str; 2] = [
    "BATON_HTTP__KEY_RATE_LIMIT",
    "BATON_HTTP__TENANT_RATE_LIMIT",
];

/// `RATE_LIMITS` the binary knows (from `baton config reference`, which reads no
/// configuration), each set to 0; a build that rejects unknown variables never gets one
/// it does not know.
pub(crate) async fn unlimited(bin: &Path) -> anyhow::Result<Vec<(String, String)>> {
    let out = tokio::process::Command::new(bin)
        .args(["config", "reference"])
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(std::time::Duration::from_secs(30), out)
        .await
        .context("baton config reference took over 30 s")?
        .with_context(|| format!("cannot run {} config reference", bin.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(RATE_LIMITS
        .iter()
        .filter(|v| text.contains(*v))
        .map(|v| (v.to_string(), "0".to_string()))
        .collect())
}

/// The given binary, else target/release/baton, else target/debug/baton; made absolute.
pub fn resolve_baton(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    let bin = given.map_or_else(default_baton, Path::to_path_buf);
    anyhow::ensure!(bin.exists(), "no baton binary at {}", bin.display());
    bin.canonicalize()
        .with_context(|| format!("cannot resolve {}", bin.display()))
}

fn default_baton() -> PathBuf {
    let release = PathBuf::from("target/release/baton");
    if release.exists() {
        release
    } else {
        PathBuf::from("target/debug/baton")
    }
}

/// How `bin` was built, as it says itself: `baton --version` names a debug build
/// ("0.1.0 (debug build)"), whatever directory the binary was copied to. A binary that
/// does not answer is `unknown`.
pub fn profile_of(bin: &Path) -> &'static str {
    match std::process::Command::new(bin).arg("--version").output() {
        Ok(out) if out.status.success() => {
            if String::from_utf8_lossy(&out.stdout).contains("(debug build)") {
                "debug"
            } else {
                "release"
            }
        }
        _ => "unknown",
    }
}

/// The replicas that take new requests, by replica index, as a load balancer sees them:
/// a replica about to be signalled leaves the rotation first and comes back (at its new
/// address) once it listens again. Cheap to clone; every clone shares the table.
#[derive(Debug, Clone)]
pub struct Rotation(Arc<RwLock<Vec<Option<String>>>>);

impl Rotation {
    /// Every one of `urls` in rotation.
    pub fn new(urls: &[String]) -> Self {
        Rotation(Arc::new(RwLock::new(
            urls.iter().cloned().map(Some).collect(),
        )))
    }

    /// The base URL for request number `i`: round-robin over the replicas in rotation;
    /// `None` when none is.
    pub fn pick(&self, i: u64) -> Option<String> {
        let table = self.0.read().unwrap_or_else(|e| e.into_inner());
        let live: Vec<&String> = table.iter().flatten().collect();
        if live.is_empty() {
            return None;
        }
        Some(live[(i % live.len() as u64) as usize].clone())
    }

    /// Takes replica `i` out of the rotation.
    pub fn remove(&self, i: usize) {
        self.set(i, None);
    }

    /// Puts replica `i` (back) in the rotation at `url`, or takes it out.
    pub fn set(&self, i: usize, url: Option<String>) {
        let mut table = self.0.write().unwrap_or_else(|e| e.into_inner());
        if table.len() <= i {
            table.resize(i + 1, None);
        }
        table[i] = url;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotation_skips_replicas_taken_out_and_takes_them_back() {
        let r = Rotation::new(&["a".to_string(), "b".to_string(), "c".to_string()]);
        let picks = |r: &Rotation| (0..3).filter_map(|i| r.pick(i)).collect::<Vec<_>>();
        assert_eq!(picks(&r), ["a", "b", "c"]);
        r.remove(1);
        assert_eq!(picks(&r), ["a", "c", "a"]);
        r.set(1, Some("b2".to_string()));
        assert_eq!(picks(&r), ["a", "b2", "c"]);
        for i in 0..3 {
            r.remove(i);
        }
        assert_eq!(r.pick(0), None);
    }
}

#[cfg(test)]
mod profile_tests {
    use super::profile_of;
    use std::os::unix::fs::PermissionsExt;

    /// A stand-in `baton` at `dir/name` whose `--version` prints `says`.
    fn fake(dir: &std::path::Path, name: &str, says: &str) -> std::path::PathBuf {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, format!("#!/bin/sh\necho 'baton {says}'\n")).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        path
    }

    #[test]
    fn the_profile_is_what_the_binary_says_not_where_it_lies() {
        let dir = tempfile::tempdir().expect("tempdir");
        let copied = fake(dir.path(), "opt/bin/baton", "0.1.0");
        assert_eq!(profile_of(&copied), "release");
        let misplaced = fake(dir.path(), "target/release/baton", "0.1.0 (debug build)");
        assert_eq!(profile_of(&misplaced), "debug");
        assert_eq!(profile_of(&dir.path().join("missing")), "unknown");
    }
}
