//! Commands in bubblewrap: a new user, PID, IPC, UTS, cgroup and network namespace; the
//! host's system directories (or an environment's root filesystem) and the environment's
//! layers read-only, and nothing else of the host (no home, no data directory, no
//! keyring, no other run's files); the command's [`Workdir`] as `/workspace`, the only
//! writable place besides a private `/tmp`. A command with network still has only a
//! loopback of its own: [`crate::relay`] on it passes connections to the egress proxy.
//!
//! Limits are the kernel's: `prlimit` sets address space, open files and file size before
//! `bwrap` starts, and processes inside the sandbox's user namespace (where the count is
//! the sandbox's alone), so they hold for everything the command starts; the wall
//! time is ours: at the limit (or when the caller gives up) the `bwrap` process is
//! killed, and `--die-with-parent` takes the whole namespace with it, orphans included.
//! Output is read to its end but kept only up to the limit.
//!
//! When Baton runs as root, sandboxes run as an unprivileged host user ([`NOBODY`] by
//! default): host files bound read-only are then readable only as that user may, and the
//! process limit is enforced (the kernel does not count processes of namespaces root
//! creates).

use crate::workdir::{Owner, Workdir, current_uid};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;

/// The host user sandboxes run as when Baton is root.
pub const NOBODY: Owner = Owner {
    uid: 65534,
    gid: 65534,
};

/// The host directories every sandbox sees, read-only, where they exist (links among
/// them, as `/bin` on a merged-`/usr` system, are recreated as links).
const SYSTEM: [&str; 6] = ["/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32"];

/// The files of `/etc` programs commonly need, read-only, where they exist.
const ETC: [&str; 8] = [
    "/etc/alternatives",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/mime.types",
];

/// What one command may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Wall time; the command and everything it started are killed at the limit.
    pub wall: Duration,
    /// Processes (and threads) at once.
    pub processes: u64,
    /// Address space of each process, in bytes.
    pub memory_bytes: u64,
    pub open_files: u64,
    /// The largest file a process may write, in bytes.
    pub file_bytes: u64,
    /// Of each of stdout and stderr, the bytes kept.
    pub output_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            wall: Duration::from_secs(60),
            processes: 64,
            memory_bytes: 1 << 30,
            open_files: 256,
            file_bytes: 32 << 20,
            output_bytes: 64 << 10,
        }
    }
}

/// A command to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    /// The program and its arguments, run in `/workspace`.
    pub argv: Vec<String>,
    /// Environment variables besides `PATH`, `HOME` and `LANG`.
    pub env: Vec<(String, String)>,
    /// The egress proxy's Unix socket on the host when the command may use the network
    /// (through it alone: [`crate::relay`]); `None`, no network at all. Either way the
    /// command has a network namespace of its own.
    pub egress: Option<PathBuf>,
    /// A directory holding a whole root filesystem, shown read-only instead of the host's
    /// system directories.
    pub root: Option<PathBuf>,
    /// Read-only host directories, each shown at its path inside.
    pub layers: Vec<(PathBuf, String)>,
    /// `PATH` inside; `None`, the usual system directories.
    pub path: Option<String>,
}

impl Spec {
    /// `argv` in the host's system directories, with no network.
    pub fn command(argv: Vec<String>) -> Self {
        Self {
            argv,
            env: Vec::new(),
            egress: None,
            root: None,
            layers: Vec::new(),
            path: None,
        }
    }
}

/// The program that relays a networked sandbox's connections to the egress proxy, with
/// the arguments that make it the relay (the `baton` binary: `sandbox-relay`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relay {
    pub program: PathBuf,
    pub args: Vec<String>,
}

/// Where the relay program is bound inside a sandbox.
const RELAY_INSIDE: &str = "/run/baton/relay";

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    /// Killed by a signal (of its own doing, or the kernel's at a limit).
    Signal(i32),
    /// Killed by us at the wall time limit.
    TimedOut,
}

/// What a command did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub exit: Exit,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// Output beyond [`Limits::output_bytes`] was dropped.
    pub truncated: bool,
    pub duration: Duration,
}

impl Outcome {
    /// A clean exit: the only ending whose changes may be promoted.
    pub fn succeeded(&self) -> bool {
        self.exit == Exit::Code(0)
    }
}

/// Why sandboxes cannot run here.
#[derive(Debug, thiserror::Error)]
pub enum Unavailable {
    #[error("{0} was not found on PATH (install bubblewrap and util-linux)")]
    Missing(&'static str),
    #[error(
        "bubblewrap cannot create a sandbox here ({0}): unprivileged user namespaces may be disabled"
    )]
    Refused(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// The bubblewrap backend.
#[derive(Debug, Clone)]
pub struct Sandbox {
    bwrap: PathBuf,
    prlimit: PathBuf,
    /// The host user the sandbox runs as, when not ours.
    user: Option<Owner>,
    /// How networked commands reach the egress proxy; `None`, they cannot run here.
    relay: Option<Relay>,
}

impl Sandbox {
    /// Finds `bwrap` and `prlimit` and proves a sandbox can be made, so start-up and
    /// `/readyz` can say exactly what is missing.
    pub async fn detect() -> Result<Self, Unavailable> {
        let bwrap = on_path("bwrap").ok_or(Unavailable::Missing("bwrap"))?;
        let prlimit = on_path("prlimit").ok_or(Unavailable::Missing("prlimit"))?;
        let user = (current_uid()? == 0).then_some(NOBODY);
        let sandbox = Self {
            bwrap,
            prlimit,
            user,
            relay: None,
        };
        let probe = tempdir_of(&std::env::temp_dir())?;
        let workdir = Workdir::materialize(&probe, Vec::new(), user)?;
        let spec = Spec::command(vec!["true".into()]);
        let limits = Limits {
            wall: Duration::from_secs(10),
            ..Limits::default()
        };
        let outcome = sandbox.run(&workdir, &spec, &limits).await?;
        drop(workdir);
        let _ = std::fs::remove_dir(&probe);
        if !outcome.succeeded() {
            let why = String::from_utf8_lossy(&outcome.stderr).trim().to_string();
            return Err(Unavailable::Refused(format!("{:?}: {why}", outcome.exit)));
        }
        Ok(sandbox)
    }

    /// This sandbox, running networked commands through `relay`.
    pub fn with_relay(mut self, relay: Relay) -> Self {
        self.relay = Some(relay);
        self
    }

    /// Whether networked commands can run here.
    pub fn relays(&self) -> bool {
        self.relay.is_some()
    }

    /// The host user sandboxes run as when it is not Baton's own: a [`Workdir`] for
    /// them must be owned by it.
    pub fn owner(&self) -> Option<Owner> {
        self.user
    }

    /// Runs `spec` over `workdir` under `limits`. Dropping the future kills the command.
    pub async fn run(
        &self,
        workdir: &Workdir,
        spec: &Spec,
        limits: &Limits,
    ) -> std::io::Result<Outcome> {
        let started = Instant::now();
        let mut cmd = Command::new(&self.prlimit);
        cmd.arg(format!("--as={0}:{0}", limits.memory_bytes))
            .arg(format!("--nofile={0}:{0}", limits.open_files))
            .arg(format!("--fsize={0}:{0}", limits.file_bytes))
            .arg("--core=0:0")
            .arg("--")
            .arg(&self.bwrap)
            .args(self.arguments(workdir.path(), spec, limits))
            .env_clear()
            .current_dir("/")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0);
        if let Some(user) = self.user {
            cmd.uid(user.uid).gid(user.gid);
        }
        let mut child = cmd.spawn()?;
        let stdout = child
            .stdout
            .take()
            .map(|s| tokio::spawn(capped(s, limits.output_bytes)));
        let stderr = child
            .stderr
            .take()
            .map(|s| tokio::spawn(capped(s, limits.output_bytes)));
        let exit = match tokio::time::timeout(limits.wall, child.wait()).await {
            Ok(status) => {
                let status = status?;
                use std::os::unix::process::ExitStatusExt;
                match (status.code(), status.signal()) {
                    (Some(code), _) => Exit::Code(code),
                    (None, Some(signal)) => Exit::Signal(signal),
                    (None, None) => Exit::Signal(0),
                }
            }
            Err(_) => {
                child.kill().await?;
                Exit::TimedOut
            }
        };
        let (stdout, out_cut) = joined(stdout).await;
        let (stderr, err_cut) = joined(stderr).await;
        Ok(Outcome {
            exit,
            stdout,
            stderr,
            truncated: out_cut || err_cut,
            duration: started.elapsed(),
        })
    }

    /// `bwrap`'s arguments for `spec` over `workspace`.
    fn arguments(&self, workspace: &Path, spec: &Spec, limits: &Limits) -> Vec<String> {
        let mut a: Vec<String> = [
            "--unshare-all",
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
            "--hostname",
            "baton",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--tmpfs",
            "/tmp",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        match &spec.root {
            Some(root) => bind_root(&mut a, root),
            None => bind_system(&mut a),
        }
        if spec.egress.is_some() {
            for file in ["/etc/hosts", "/etc/nsswitch.conf"] {
                a.extend(["--ro-bind-try".into(), file.into(), file.into()]);
            }
        }
        for (host, inside) in &spec.layers {
            a.extend([
                "--ro-bind".into(),
                host.display().to_string(),
                inside.clone(),
            ]);
        }
        let path = spec
            .path
            .as_deref()
            .unwrap_or("/usr/local/bin:/usr/bin:/bin");
        a.extend([
            "--bind".into(),
            workspace.display().to_string(),
            "/workspace".into(),
            "--chdir".into(),
            "/workspace".into(),
            "--clearenv".into(),
            "--setenv".into(),
            "PATH".into(),
            path.into(),
            "--setenv".into(),
            "HOME".into(),
            "/workspace".into(),
            "--setenv".into(),
            "LANG".into(),
            "C.UTF-8".into(),
        ]);
        for (k, v) in &spec.env {
            a.extend(["--setenv".into(), k.clone(), v.clone()]);
        }
        // The process limit is set inside the sandbox's user namespace, where the kernel
        // counts only the sandbox's own processes (set outside, it would count every
        // process of the sandbox user on the host, other sandboxes' included).
        let mut inner = vec![
            self.prlimit.display().to_string(),
            format!("--nproc={0}:{0}", limits.processes),
            "--".into(),
        ];
        if let (Some(socket), Some(relay)) = (&spec.egress, &self.relay) {
            let proxy = format!("http://127.0.0.1:{}", crate::relay::PORT);
            for var in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
                a.extend(["--setenv".into(), var.into(), proxy.clone()]);
            }
            a.extend([
                "--ro-bind".into(),
                relay.program.display().to_string(),
                RELAY_INSIDE.into(),
                "--bind".into(),
                socket.display().to_string(),
                crate::relay::SOCKET.into(),
            ]);
            inner.push(RELAY_INSIDE.into());
            inner.extend(relay.args.iter().cloned());
            inner.extend([crate::relay::SOCKET.into(), "--".into()]);
        }
        a.push("--".into());
        a.extend(inner);
        a.extend(spec.argv.iter().cloned());
        a
    }
}

/// The host's system directories, read-only (links among them recreated as links), and
/// the files of `/etc` programs commonly need.
fn bind_system(a: &mut Vec<String>) {
    a.extend(["--dir".into(), "/etc".into()]);
    for dir in SYSTEM {
        let host = Path::new(dir);
        match std::fs::read_link(host) {
            Ok(target) => {
                a.extend(["--symlink".into(), target.display().to_string(), dir.into()]);
            }
            Err(_) if host.is_dir() => {
                a.extend(["--ro-bind".into(), dir.into(), dir.into()]);
            }
            Err(_) => {}
        }
    }
    for file in ETC {
        a.extend(["--ro-bind-try".into(), file.into(), file.into()]);
    }
}

/// Every top-level entry of the root filesystem at `root`, read-only (links as links),
/// but the places the sandbox makes its own.
fn bind_root(a: &mut Vec<String>, root: &Path) {
    const OWN: [&str; 6] = ["proc", "dev", "tmp", "sys", "run", "workspace"];
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    let mut names: Vec<_> = entries.flatten().map(|e| e.file_name()).collect();
    names.sort();
    for name in names {
        let Some(text) = name.to_str() else { continue };
        if OWN.contains(&text) {
            continue;
        }
        let host = root.join(&name);
        let inside = format!("/{text}");
        match std::fs::read_link(&host) {
            Ok(target) => a.extend(["--symlink".into(), target.display().to_string(), inside]),
            Err(_) => a.extend(["--ro-bind".into(), host.display().to_string(), inside]),
        }
    }
}

/// Reads `stream` to its end, keeping the first `cap` bytes; whether more came.
async fn capped(mut stream: impl AsyncRead + Unpin, cap: usize) -> (Vec<u8>, bool) {
    let mut kept = Vec::new();
    let mut cut = false;
    let mut buf = [0u8; 8192];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return (kept, cut),
            Ok(n) => {
                let room = cap.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
                cut |= n > room;
            }
        }
    }
}

async fn joined(task: Option<tokio::task::JoinHandle<(Vec<u8>, bool)>>) -> (Vec<u8>, bool) {
    match task {
        Some(t) => t.await.unwrap_or_default(),
        None => (Vec::new(), false),
    }
}

/// `name` in a directory of `PATH`, or of the usual system directories.
fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/bin", "/bin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The file in a scratch directory naming the process that made it.
const OWNER_FILE: &str = "owner.pid";

/// A new private directory under `parent` for this process's sandboxes ([`tempdir_of`]),
/// after removing those that processes now gone left there (a killed replica leaves its
/// scratch directory, and the copies of commands it was running, behind).
pub fn scratch_of(parent: &Path) -> std::io::Result<PathBuf> {
    sweep(parent);
    let dir = tempdir_of(parent)?;
    std::fs::write(dir.join(OWNER_FILE), std::process::id().to_string())?;
    Ok(dir)
}

/// Removes the scratch directories under `parent` whose owner process is gone.
fn sweep(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().starts_with("baton-sandbox-") {
            continue;
        }
        let dir = entry.path();
        let Ok(pid) = std::fs::read_to_string(dir.join(OWNER_FILE)) else {
            continue;
        };
        let gone = pid
            .trim()
            .parse::<u32>()
            .is_ok_and(|pid| !Path::new(&format!("/proc/{pid}")).exists());
        if gone {
            match std::fs::remove_dir_all(&dir) {
                Ok(()) => {
                    tracing::info!(dir = %dir.display(), "removed a scratch directory left by a process gone")
                }
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, "cannot remove a scratch directory left behind")
                }
            }
        }
    }
}

/// A new private directory under `parent` that the sandbox user can pass through.
pub fn tempdir_of(parent: &Path) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let dir = parent.join(format!("baton-sandbox-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir(&dir)?;
    // Others may enter (bwrap, as the sandbox user, binds a copy inside) but not list.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711))?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sandbox() -> Sandbox {
        Sandbox {
            bwrap: "/usr/bin/bwrap".into(),
            prlimit: "/usr/bin/prlimit".into(),
            user: None,
            relay: None,
        }
    }

    #[test]
    fn a_root_filesystem_replaces_the_hosts_system_directories() {
        let root = tempfile::tempdir().expect("root");
        for d in ["usr", "etc", "proc", "tmp", "workspace"] {
            std::fs::create_dir(root.path().join(d)).expect("dir");
        }
        std::os::unix::fs::symlink("usr/bin", root.path().join("bin")).expect("link");
        let mut spec = Spec::command(vec!["true".into()]);
        spec.root = Some(root.path().to_path_buf());
        let a = sandbox().arguments(Path::new("/w"), &spec, &Limits::default());
        let joined = a.join(" ");
        let r = root.path().display();
        assert!(
            joined.contains(&format!("--ro-bind {r}/usr /usr")),
            "{joined}"
        );
        assert!(
            joined.contains(&format!("--ro-bind {r}/etc /etc")),
            "{joined}"
        );
        assert!(joined.contains("--symlink usr/bin /bin"), "{joined}");
        assert!(
            !joined.contains("--ro-bind /usr /usr"),
            "no host /usr: {joined}"
        );
        for own in ["proc", "tmp", "workspace"] {
            assert!(!joined.contains(&format!("{r}/{own}")), "{own}: {joined}");
        }
    }

    #[test]
    fn a_networked_command_starts_behind_the_relay_with_the_proxy_in_its_environment() {
        let relay = Relay {
            program: "/usr/local/bin/baton".into(),
            args: vec!["sandbox-relay".into()],
        };
        let mut spec = Spec::command(vec!["sh".into(), "-c".into(), "curl x".into()]);
        spec.egress = Some("/scratch/egress-1/egress.sock".into());
        let a = sandbox()
            .with_relay(relay)
            .arguments(Path::new("/w"), &spec, &Limits::default());
        let joined = a.join(" ");
        assert!(joined.starts_with("--unshare-all"), "{joined}");
        assert!(!joined.contains("--share-net"), "{joined}");
        assert!(
            joined.contains("--setenv HTTPS_PROXY http://127.0.0.1:3128"),
            "{joined}"
        );
        assert!(
            joined.ends_with(
                "-- /usr/bin/prlimit --nproc=64:64 -- /run/baton/relay sandbox-relay \
                 /run/baton/egress.sock -- sh -c curl x"
            ),
            "{joined}"
        );
    }

    #[test]
    fn scratch_directories_of_processes_gone_are_swept() {
        let parent = tempfile::tempdir().expect("parent");
        let gone = parent.path().join("baton-sandbox-gone");
        std::fs::create_dir_all(gone.join("ws-1")).expect("gone");
        // No process has this id (above the kernel's pid_max).
        std::fs::write(gone.join(OWNER_FILE), "4194305").expect("pid");
        let alive = parent.path().join("baton-sandbox-alive");
        std::fs::create_dir(&alive).expect("alive");
        std::fs::write(alive.join(OWNER_FILE), std::process::id().to_string()).expect("pid");
        let other = parent.path().join("unrelated");
        std::fs::create_dir(&other).expect("other");
        let mine = scratch_of(parent.path()).expect("scratch");
        assert!(!gone.exists(), "a dead process's directory is removed");
        assert!(alive.exists() && other.exists() && mine.exists());
    }
}
