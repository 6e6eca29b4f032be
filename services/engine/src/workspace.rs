//! The built-in workspace tools: `read_file` and `list_files` read the store; `write_file`
//! and the commands (`shell`, `python`, in a `baton-sandbox` sandbox over a private copy
//! of the workspace) end in a [`Promotion`]: the files they changed, against the
//! workspace version they saw, which the result's append lands with it
//! (`calls::execute`) after `core::workspace::promote` resolved it against the files as
//! they are then. A command that does not exit with status 0 (it failed, timed out, was
//! killed) promotes nothing; a crash before the append leaves the workspace as it was, and
//! the call is run again (it is idempotent: its only effect is its promotion).

use crate::contents::{Content, ContentCache};
use crate::shared::Shared;
use crate::tools::{Called, Planned};
use baton_core::environments::acting_role;
use baton_core::model::{DEFAULT_ENVIRONMENT, Environment, ToolKindSpec, WorkspaceOp};
use baton_core::workspace::{WorkspaceLimits, path};
use baton_core::{RunId, TenantId};
use baton_egress::TenantEgress;
use baton_egress::proxy::Proxy;
use baton_events::{ErrorInfo, FileChangeKind, ToolOutcome, ToolResult};
use baton_sandbox::{Change, Exit, Limits, Relay, Sandbox, Spec, Workdir};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The most output a workspace tool's result keeps.
const OUTPUT_CAP: usize = 32 << 10;

/// Where this replica runs commands.
#[derive(Clone)]
pub struct CodeTools {
    /// The sandbox, or why there is none here (said to the model in the call's result).
    pub sandbox: Result<Arc<Sandbox>, String>,
    /// Where commands' private copies are made.
    pub scratch: PathBuf,
    pub limits: WorkspaceLimits,
    /// The operator's switch: when off, `shell` and `python` tools are neither offered to
    /// models nor run, whatever agents enable.
    pub enabled: bool,
    /// The contents this replica read or made lately, which copies are made of.
    pub contents: Arc<ContentCache>,
}

/// The bytes of contents a replica keeps by default ([`CodeTools::with_cache`]).
pub const CACHE_BYTES: u64 = 256 << 20;

impl CodeTools {
    /// Finds the sandbox (bubblewrap) and makes a scratch directory under `parent` (and
    /// removes those of processes gone). Networked commands run only with a `relay`.
    pub async fn detect(
        parent: &std::path::Path,
        limits: WorkspaceLimits,
        relay: Option<Relay>,
    ) -> Self {
        let scratch = baton_sandbox::bwrap::scratch_of(parent);
        let sandbox = Sandbox::detect()
            .await
            .map(|s| match relay {
                Some(relay) => Arc::new(s.with_relay(relay)),
                None => Arc::new(s),
            })
            .map_err(|e| e.to_string());
        match scratch {
            Ok(scratch) => Self {
                sandbox,
                scratch,
                limits,
                enabled: true,
                contents: Arc::new(ContentCache::new(CACHE_BYTES)),
            },
            Err(e) => Self::unavailable(format!("no scratch directory: {e}"), limits),
        }
    }

    /// No commands on this replica, for `why`; the file tools still work.
    pub fn unavailable(why: impl Into<String>, limits: WorkspaceLimits) -> Self {
        Self {
            sandbox: Err(why.into()),
            scratch: std::env::temp_dir(),
            limits,
            enabled: true,
            contents: Arc::new(ContentCache::new(CACHE_BYTES)),
        }
    }

    /// These code tools, keeping at most `bytes` of contents.
    pub fn with_cache(mut self, bytes: u64) -> Self {
        self.contents = Arc::new(ContentCache::new(bytes));
        self
    }

    /// Code tools switched off by the operator: commands are hidden and refused.
    pub fn disabled(limits: WorkspaceLimits) -> Self {
        Self {
            enabled: false,
            ..Self::unavailable("disabled by the operator (workspaces.code_tools)", limits)
        }
    }

    /// Whether `tool` is a command this replica must neither offer nor run.
    pub(crate) fn hides(&self, tool: &baton_core::model::Tool) -> bool {
        !self.enabled
            && matches!(
                tool.kind,
                baton_core::model::ToolKindSpec::Workspace {
                    op: WorkspaceOp::Shell | WorkspaceOp::Python,
                    ..
                }
            )
    }
}

/// The files a write or a command changed, against the workspace version it saw.
#[derive(Debug)]
pub(crate) struct Promotion {
    pub(crate) base: i64,
    pub(crate) changes: Vec<Change>,
}

/// The turn a workspace call is made in.
pub(crate) struct Turn {
    pub(crate) tenant: TenantId,
    pub(crate) run: RunId,
    /// Who asked for the turn (`RunState::turn_actor`).
    pub(crate) actor: Option<String>,
    /// The turn's outbound client: a networked command's connections go through it.
    pub(crate) egress: TenantEgress,
}

/// Carries out planned call `p` of workspace tool `op` in `turn`.
pub(crate) async fn call(shared: &Shared, turn: &Turn, p: &Planned, op: WorkspaceOp) -> Called {
    let started = Instant::now();
    let (tenant, run) = (turn.tenant, turn.run);
    let done = match op {
        WorkspaceOp::ReadFile => read_file(shared, tenant, run, p).await,
        WorkspaceOp::ListFiles => list_files(shared, tenant, run, p).await,
        WorkspaceOp::WriteFile => write_file(shared, tenant, run, p).await,
        WorkspaceOp::Shell => command(shared, turn, p, "command", &["/bin/sh", "-c"]).await,
        WorkspaceOp::Python => command(shared, turn, p, "script", &["python3", "-c"]).await,
    };
    let duration_ms = started.elapsed().as_millis() as u64;
    let (outcome, output, error, promotion) = match done {
        Ok(Done { output, promotion }) => (ToolOutcome::Ok, output, None, promotion),
        Err(e) => (
            ToolOutcome::Error,
            format!("Error ({}): {}", e.code, e.message),
            Some(e),
            None,
        ),
    };
    let (output, truncated) = cap(output);
    let result = ToolResult {
        receipt_id: p.intent.receipt_id,
        call_id: p.intent.call_id.clone(),
        tool: p.intent.tool.clone(),
        outcome,
        output,
        error,
        duration_ms,
        truncated,
        from_client: false,
        attempts: Some(1),
        delegated_run: None,
    };
    match promotion {
        Some(promotion) => Called::Promote(result, promotion),
        None => Called::Result(result),
    }
}

struct Done {
    output: String,
    promotion: Option<Promotion>,
}

type Outcome = Result<Done, ErrorInfo>;

fn failed(code: &str, message: impl Into<String>) -> ErrorInfo {
    ErrorInfo {
        code: code.into(),
        message: message.into(),
    }
}

/// The string argument `name`.
fn argument<'p>(p: &'p Planned, name: &str) -> Result<&'p str, ErrorInfo> {
    p.intent.arguments[name]
        .as_str()
        .ok_or_else(|| failed("invalid_arguments", format!("{name} must be a string")))
}

fn path_argument(p: &Planned) -> Result<String, ErrorInfo> {
    path::normalize(argument(p, "path")?).map_err(|e| failed("invalid_path", e.to_string()))
}

fn store_error(e: impl std::fmt::Display) -> ErrorInfo {
    failed(
        "workspace_unavailable",
        format!("the workspace could not be read: {e}"),
    )
}

async fn read_file(shared: &Shared, tenant: TenantId, run: RunId, p: &Planned) -> Outcome {
    let path = path_argument(p)?;
    let found = shared.ports.workspaces.read_file(tenant, run, &path).await;
    match found.map_err(store_error)? {
        Some(f) => Ok(Done {
            output: String::from_utf8_lossy(&f.content).into_owned(),
            promotion: None,
        }),
        None => Err(failed("no_such_file", format!("there is no file {path}"))),
    }
}

async fn list_files(shared: &Shared, tenant: TenantId, run: RunId, p: &Planned) -> Outcome {
    let prefix = p.intent.arguments["prefix"].as_str().unwrap_or("");
    let state = shared.ports.workspaces.workspace_state(tenant, run).await;
    let lines: Vec<String> = state
        .map_err(store_error)?
        .into_iter()
        .filter(|s| s.sha256.is_some() && s.path.starts_with(prefix))
        .map(|s| format!("{}\t{} bytes", s.path, s.size))
        .collect();
    let output = if lines.is_empty() {
        "no files".to_string()
    } else {
        lines.join("\n")
    };
    Ok(Done {
        output,
        promotion: None,
    })
}

async fn write_file(shared: &Shared, tenant: TenantId, run: RunId, p: &Planned) -> Outcome {
    let path = path_argument(p)?;
    let content = argument(p, "content")?.as_bytes().to_vec();
    let limit = shared.ports.code.limits.max_file_bytes;
    if content.len() as u64 > limit {
        return Err(failed(
            "file_too_large",
            format!(
                "the file would be {} bytes, more than {limit}",
                content.len()
            ),
        ));
    }
    let state = shared.ports.workspaces.workspace_state(tenant, run).await;
    let base = version_of(&state.map_err(store_error)?);
    let output = format!("wrote {path} ({} bytes)", content.len());
    Ok(Done {
        output,
        promotion: Some(Promotion {
            base,
            changes: vec![Change {
                path,
                kind: FileChangeKind::Modified,
                content: Some(content),
            }],
        }),
    })
}

/// The workspace's version in `state`: that of its latest change (0 before any), which
/// a change made from what was read is made against.
fn version_of(state: &[baton_core::ports::PathState]) -> i64 {
    state.iter().map(|s| s.version).max().unwrap_or(0)
}

/// The environment `p`'s command runs in, once the turn may acquire it: it exists, whoever
/// asked for the turn has (still) a role that may execute there, and a networked one is
/// not used by a tool whose calls would be repeated after a crash.
async fn acquire(shared: &Shared, turn: &Turn, p: &Planned) -> Result<Environment, ErrorInfo> {
    let name = match &p.tool.kind {
        ToolKindSpec::Workspace {
            environment: Some(name),
            ..
        } => name.as_str(),
        _ => DEFAULT_ENVIRONMENT,
    };
    let ports = &shared.ports;
    let env = ports
        .environments
        .resolve(turn.tenant, name)
        .await
        .map_err(store_error)?
        .ok_or_else(|| {
            failed(
                "environment_missing",
                format!(
                    "there is no environment {name:?} (any more): an admin defines it \
                     (PUT /v1/environments/{name}), or the tool names another"
                ),
            )
        })?;
    let role = match &turn.actor {
        Some(actor) => acting_role(
            &*ports.api_keys,
            &*ports.users,
            turn.tenant,
            actor,
            ports.clock.now(),
        )
        .await
        .map_err(store_error)?,
        None => None,
    };
    if role.is_none_or(|r| r < env.execute_role) {
        let who = turn.actor.as_deref().unwrap_or("nobody recorded");
        return Err(failed(
            "environment_denied",
            format!(
                "whoever asked for this turn ({who}) may not execute in environment {name:?}: \
                 it takes the {} role or above",
                env.execute_role.as_str()
            ),
        ));
    }
    if env.network && p.tool.idempotent {
        return Err(failed(
            "environment_changed",
            format!(
                "environment {name:?} now allows network, which this tool was not defined \
                 for: an admin updates the tool so its calls are held for a decision after a crash"
            ),
        ));
    }
    Ok(env)
}

/// The limits of a command of `p` in `env`: the environment's, and the tool's timeout.
fn limits_in(env: &Environment, p: &Planned, code: &CodeTools) -> Limits {
    let d = Limits::default();
    let l = env.limits;
    let wall = l
        .wall_ms
        .map_or(p.tool.timeout_ms, |w| w.min(p.tool.timeout_ms));
    Limits {
        wall: Duration::from_millis(wall),
        processes: l.processes.unwrap_or(d.processes),
        memory_bytes: l.memory_bytes.unwrap_or(d.memory_bytes),
        open_files: l.open_files.unwrap_or(d.open_files),
        file_bytes: code.limits.max_file_bytes,
        output_bytes: d.output_bytes,
    }
}

/// Runs argument `arg` of `p` with `argv` in a sandbox over a copy of the workspace.
async fn command(shared: &Shared, turn: &Turn, p: &Planned, arg: &str, argv: &[&str]) -> Outcome {
    let code = &shared.ports.code;
    if code.hides(&p.tool) {
        return Err(failed(
            "code_tools_disabled",
            "the operator has switched commands off on this server",
        ));
    }
    let env = acquire(shared, turn, p).await?;
    let sandbox = code.sandbox.as_ref().map_err(|why| {
        failed(
            "code_tools_unavailable",
            format!("commands cannot run on this server: {why}"),
        )
    })?;
    if env.network && !sandbox.relays() {
        return Err(failed(
            "code_tools_unavailable",
            "commands with network cannot run on this server (no relay to the egress proxy)",
        ));
    }
    let source = argument(p, arg)?.to_string();
    let (base, files) = workspace_files(shared, turn.tenant, turn.run).await?;
    let workdir = Workdir::materialize(&code.scratch, files, sandbox.owner()).map_err(|e| {
        failed(
            "workspace_unavailable",
            format!("the workspace could not be made: {e}"),
        )
    })?;
    // A networked command's way out: a proxy on a socket in its own directory.
    let proxy = match env.network {
        true => Some(
            Proxy::start(&code.scratch, turn.egress.clone()).map_err(|e| {
                failed(
                    "command_not_started",
                    format!("the egress proxy could not start: {e}"),
                )
            })?,
        ),
        false => None,
    };
    let spec = Spec {
        argv: argv.iter().map(|a| a.to_string()).chain([source]).collect(),
        env: Vec::new(),
        egress: proxy.as_ref().map(|p| p.path().to_path_buf()),
        root: env.base.root.as_ref().map(PathBuf::from),
        layers: env
            .base
            .layers
            .iter()
            .map(|l| (PathBuf::from(&l.host), l.at.clone()))
            .collect(),
        path: env.base.path.clone(),
    };
    let limits = limits_in(&env, p, code);
    let out = sandbox.run(&workdir, &spec, &limits).await.map_err(|e| {
        failed(
            "command_not_started",
            format!("the command could not start: {e}"),
        )
    })?;
    drop(proxy);
    let mut output = format!(
        "--- stdout ---\n{}\n--- stderr ---\n{}",
        String::from_utf8_lossy(&out.stdout).trim_end(),
        String::from_utf8_lossy(&out.stderr).trim_end()
    );
    if out.truncated {
        output.push_str("\n(output cut)");
    }
    match out.exit {
        Exit::Code(0) => {}
        Exit::Code(n) => {
            return Err(failed(
                "command_failed",
                format!("exit status {n}; no file changes kept\n{output}"),
            ));
        }
        Exit::Signal(s) => {
            return Err(failed(
                "command_killed",
                format!("killed by signal {s}; no file changes kept\n{output}"),
            ));
        }
        Exit::TimedOut => {
            return Err(failed(
                "command_timed_out",
                format!(
                    "timed out after {} ms and was killed; no file changes kept\n{output}",
                    limits.wall.as_millis()
                ),
            ));
        }
    }
    let limits = &code.limits;
    let set = workdir
        .changes(limits.max_file_bytes, limits.max_run_files as usize)
        .map_err(|e| {
            failed(
                "workspace_unavailable",
                format!("the changes could not be read: {e}"),
            )
        })?;
    if let Some(refused) = set.refused_line() {
        output.push_str(&format!("\n{refused}"));
    }
    remember(code, turn.tenant, &set.changes);
    Ok(Done {
        output: format!("exit status 0\n{output}"),
        promotion: Some(Promotion {
            base,
            changes: set.changes,
        }),
    })
}

/// The workspace's version and every file of it with its content: one read of the paths,
/// and one of the contents unless this replica keeps them all already.
async fn workspace_files(
    shared: &Shared,
    tenant: TenantId,
    run: RunId,
) -> Result<(i64, Vec<(String, Vec<u8>)>), ErrorInfo> {
    let store = &shared.ports.workspaces;
    let cache = &shared.ports.code.contents;
    let state = store
        .workspace_state(tenant, run)
        .await
        .map_err(store_error)?;
    let base = version_of(&state);
    let live: Vec<(String, String)> = state
        .into_iter()
        .filter_map(|s| s.sha256.map(|sha| (s.path, sha)))
        .collect();
    let mut found: HashMap<String, Content> = HashMap::new();
    for (_, sha) in &live {
        if let Some(c) = cache.get(tenant, sha) {
            found.insert(sha.clone(), c);
        }
    }
    if live.iter().any(|(_, sha)| !found.contains_key(sha)) {
        let read = store.run_contents(tenant, run).await.map_err(store_error)?;
        for blob in read {
            let content = Arc::new(blob.content);
            cache.put(tenant, blob.sha256.clone(), content.clone());
            found.insert(blob.sha256, content);
        }
    }
    let mut files = Vec::with_capacity(live.len());
    for (path, sha) in live {
        // A file whose content went since the paths were read (the run was written
        // meanwhile): that promotion is resolved against the new state anyway.
        if let Some(content) = found.get(&sha) {
            files.push((path, content.as_ref().clone()));
        }
    }
    Ok((base, files))
}

/// Keeps what a command wrote, so the next copy of the workspace on this replica needs
/// no read of it (whether or not the promotion lands: a content's name is its hash).
fn remember(code: &CodeTools, tenant: TenantId, changes: &[Change]) {
    for content in changes.iter().filter_map(|c| c.content.as_ref()) {
        let sha = baton_core::ports::Blob::name_of(content);
        code.contents.put(tenant, sha, Arc::new(content.clone()));
    }
}

/// `output` cut to [`OUTPUT_CAP`] bytes (at a character boundary); whether it was cut.
fn cap(mut output: String) -> (String, bool) {
    if output.len() <= OUTPUT_CAP {
        return (output, false);
    }
    let mut end = OUTPUT_CAP;
    while !output.is_char_boundary(end) {
        end -= 1;
    }
    output.truncate(end);
    (output, true)
}
