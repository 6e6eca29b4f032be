//! The API guide runs as written. `docs/api.md`'s `sh` blocks are run in order, in one
//! `bash -euo pipefail` process, against a `baton serve` child process (embedded tier,
//! auth required, its own data directory) whose key comes from `baton admin
//! create-tenant`, as the guide tells a reader to do.
//!
//! What makes a block fail: a command that fails; any request that does not answer 2xx,
//! unless the example prints the status itself (`curl -w`), which is how the guide shows
//! error answers; a `# => text` line of the block whose text is not in the block's output
//! (in order). On top of that the outputs that matter most are checked here by name: the
//! resumed stream starts right after the `Last-Event-ID` it gave, the retried message is
//! the original one, and the error answers carry their documented status and code.

use baton_testkit::{McpOptions, McpTestServer, Serve};
use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// The guide, read when the test runs (not compiled in), so an edit is tested at once.
const GUIDE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/api.md");

/// How long every block together may take; they take about 4 s.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(20);

/// Marks in the script's stdout and stderr where a block's output starts.
const BLOCK_MARK: &str = "@@block ";
/// Printed after the last block: the script got to the end.
const DONE_MARK: &str = "@@done";
/// Starts the line the `curl` wrapper writes to stderr for every request.
const HTTP_MARK: &str = "@@http ";

/// Defined before the guide's blocks: every `curl` of the guide goes through it. `-q` keeps
/// a `.curlrc` out; `--max-time` bounds a stream that would never end; the write-out ends
/// each body with a newline (so outputs are lines) and logs the request's status to
/// stderr. An example's own `-w` replaces this one (curl keeps the last), so requests
/// whose status the guide prints itself are not logged.
const CURL_WRAPPER: &str = r#"curl() {
  command curl -q --max-time 15 \
    --write-out '\n%{stderr}@@http %{http_code} %{method} %{url_effective}\n' "$@"
}"#;

/// Endpoints and headers the guide must keep showing, so a flow cannot silently drop out.
const MUST_SHOW: &[&str] = &[
    "authorization: Bearer",
    "/v1/agents",
    "/v1/runs",
    "/messages",
    "\"request_id\"",
    "text/event-stream",
    "last-event-id",
    "/events?after=",
    "/cancel",
    "/v1/tools",
    "\"kind\": \"client\"",
    "\"requires_approval\": true",
    "/receipts",
    "/approvals/",
    "/tool-outputs",
    "/v1/secrets",
    "\"wait\": 10",
    "-X PATCH",
    "metadata=team:billing",
    "/v1/schedules",
    "/run\"",
    "/v1/webhooks",
    "/rotate-secret",
    "/v1/mcp-servers",
    "/discover",
    "/enable",
];

/// Why the guide cannot be turned into a script.
#[derive(Debug, thiserror::Error)]
enum GuideError {
    #[error("docs/api.md:{0}: a code block opened here is never closed")]
    Unclosed(usize),
    #[error("docs/api.md has no sh blocks")]
    NoBlocks,
}

/// One ```sh block of the guide.
#[derive(Debug)]
struct Block {
    /// 1-based line of the opening fence.
    line: usize,
    source: String,
    /// The `# => text` lines: text the block's output contains, in this order.
    expect: Vec<String>,
}

/// The ```sh blocks, in order. Other fences (```text, ```json) are illustrations only.
fn sh_blocks(markdown: &str) -> Result<Vec<Block>, GuideError> {
    let mut blocks = Vec::new();
    // The open fence: its line and, for an sh block, the lines so far.
    let mut open: Option<(usize, Option<Vec<&str>>)> = None;
    for (i, line) in markdown.lines().enumerate() {
        let fence = line.trim_start().strip_prefix("```");
        match (&mut open, fence) {
            (None, Some(info)) => {
                let lines = (info.trim() == "sh").then(Vec::new);
                open = Some((i + 1, lines));
            }
            (Some(_), Some(_)) => {
                if let Some((line, Some(lines))) = open.take() {
                    let expect = lines
                        .iter()
                        .filter_map(|l| l.trim_start().strip_prefix("# => "))
                        .map(|t| t.trim_end().to_string())
                        .collect();
                    blocks.push(Block {
                        line,
                        source: lines.join("\n"),
                        expect,
                    });
                }
            }
            (Some((_, Some(lines))), None) => lines.push(line),
            _ => {}
        }
    }
    if let Some((line, _)) = open {
        return Err(GuideError::Unclosed(line));
    }
    if blocks.is_empty() {
        return Err(GuideError::NoBlocks);
    }
    Ok(blocks)
}

/// The script: the wrapper, then each block after a mark on stdout and stderr.
fn script(blocks: &[Block]) -> String {
    let mut s = format!("{CURL_WRAPPER}\n");
    for (i, b) in blocks.iter().enumerate() {
        s.push_str(&format!(
            "printf '\\n{BLOCK_MARK}{i}\\n'; printf '{BLOCK_MARK}{i}\\n' >&2\n{}\n",
            b.source
        ));
    }
    s.push_str(&format!("printf '\\n{DONE_MARK}\\n'\n"));
    s
}

/// Output lines per block (index = block number), from a stream with block marks.
fn per_block(text: &str, blocks: usize) -> Vec<Vec<String>> {
    let mut out = vec![Vec::new(); blocks];
    let mut current: Option<usize> = None;
    for line in text.lines() {
        if let Some(n) = line.strip_prefix(BLOCK_MARK) {
            current = n.trim().parse().ok().filter(|n| *n < blocks);
        } else if line == DONE_MARK {
            current = None;
        } else if let Some(i) = current {
            out[i].push(line.to_string());
        }
    }
    out
}

/// The number of the last block that started, if any did.
fn last_started(stdout: &str) -> Option<usize> {
    stdout
        .lines()
        .rev()
        .filter_map(|l| l.strip_prefix(BLOCK_MARK))
        .find_map(|n| n.trim().parse().ok())
}

/// The guide's bash process, leader of its own process group: dropping it kills the
/// whole group, including streams the guide left running in the background.
struct Script {
    child: Child,
}

impl Script {
    /// Runs `bash -euo pipefail SCRIPT` in `dir` with a clean environment holding only
    /// `PATH` and `env`, its output going to the two files.
    fn start(
        script: &Path,
        dir: &Path,
        env: &[(&str, &str)],
        (out, err): (&Path, &Path),
    ) -> Script {
        let child = Command::new("bash")
            .arg("-euo")
            .arg("pipefail")
            .arg(script)
            .current_dir(dir)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .envs(env.iter().copied())
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(File::create(out).expect("stdout file"))
            .stderr(File::create(err).expect("stderr file"))
            .spawn()
            .expect("spawn bash");
        Script { child }
    }

    /// Waits for the script to exit, at most `timeout`; `None` when it did not.
    fn wait(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for bash") {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Script {
    fn drop(&mut self) {
        // The group id is the leader's pid. The kernel does not hand out a pid that is
        // still a live group's id, so this reaches only the script's processes.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `baton admin create-tenant acme` on the data directory: the owner key it prints.
fn create_tenant(dir: &Path, data: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["admin", "create-tenant", "acme", "--data-dir", data])
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .output()
        .expect("run baton admin create-tenant");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "create-tenant failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // What the guide's reader copies: the value after `api_key:`.
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("api_key:"))
        .map(|k| k.trim().to_string())
        .unwrap_or_else(|| panic!("no api_key in {stdout}"))
}

/// Everything about one block, for a failure message.
fn explain(blocks: &[Block], i: usize, out: &[Vec<String>], err: &[Vec<String>]) -> String {
    let b = &blocks[i];
    format!(
        "block {i} (docs/api.md:{}):\n{}\n--- its output ---\n{}\n--- its stderr ---\n{}",
        b.line,
        b.source,
        out[i].join("\n"),
        err[i].join("\n")
    )
}

/// The index of the first line at or after `from` containing `text`.
fn find_from(lines: &[String], from: usize, text: &str) -> Option<usize> {
    lines
        .iter()
        .enumerate()
        .skip(from)
        .find(|(_, l)| l.contains(text))
        .map(|(i, _)| i)
}

/// The index of the first block whose source contains `text`.
fn block_with(blocks: &[Block], text: &str) -> usize {
    blocks
        .iter()
        .position(|b| b.source.contains(text))
        .unwrap_or_else(|| panic!("no sh block of the guide contains {text:?}"))
}

/// The `N` of the first literal `last-event-id: N` in a block, and the block's index.
fn resume_block(blocks: &[Block]) -> (usize, i64) {
    blocks
        .iter()
        .enumerate()
        .find_map(|(i, b)| {
            b.source.lines().find_map(|l| {
                let at = l.find("last-event-id: ")?;
                let digits: String = l[at + "last-event-id: ".len()..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                digits.parse().ok().map(|n| (i, n))
            })
        })
        .expect("the guide resumes a stream with a literal `last-event-id: N`")
}

#[test]
fn every_sh_block_of_the_api_guide_runs_against_a_real_server() {
    let markdown = std::fs::read_to_string(GUIDE).expect("read docs/api.md");
    let blocks = sh_blocks(&markdown).unwrap_or_else(|e| panic!("{e}"));
    for must in MUST_SHOW {
        assert!(
            blocks.iter().any(|b| b.source.contains(must)),
            "no sh block of the guide shows {must:?}"
        );
    }

    // The MCP server the guide registers: the suite's own, with a bearer token.
    let runtime = tokio::runtime::Runtime::new().expect("a runtime for the MCP server");
    let token = "guide-token-5c1d";
    let options = McpOptions {
        bearer: Some(token.to_string()),
        ..McpOptions::default()
    };
    let Some(mcp) = runtime.block_on(McpTestServer::start(Path::new(ROOT), options)) else {
        return;
    };
    let mcp_url = mcp.url();

    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("baton-data").to_string_lossy().into_owned();
    let key = create_tenant(dir.path(), &data);
    let server = Serve::start(
        Path::new(env!("CARGO_BIN_EXE_baton")),
        dir.path(),
        &["--data-dir", &data, "--auth-required"],
        &[],
    );

    // The guide's files (the live stream's `live.txt`) land in a directory of their own.
    let work = dir.path().join("reader");
    std::fs::create_dir(&work).expect("work dir");
    let script_path = dir.path().join("guide.sh");
    std::fs::write(&script_path, script(&blocks)).expect("write the script");
    let (out_path, err_path) = (dir.path().join("guide.out"), dir.path().join("guide.err"));
    let mut bash = Script::start(
        &script_path,
        &work,
        &[
            ("BATON", &server.base),
            ("KEY", &key),
            ("MCP_URL", &mcp_url),
            ("MCP_TOKEN", token),
        ],
        (&out_path, &err_path),
    );
    let status = bash.wait(SCRIPT_TIMEOUT);
    drop(bash);
    let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    let out = per_block(&stdout, blocks.len());
    let err = per_block(&stderr, blocks.len());

    let finished = status.is_some_and(|s| s.success()) && stdout.lines().any(|l| l == DONE_MARK);
    if !finished {
        let why = match status {
            None => format!("still running after {SCRIPT_TIMEOUT:?}"),
            Some(s) => format!("exited with {s}"),
        };
        let at = last_started(&stdout).map_or_else(
            || format!("before the first block:\n{stderr}"),
            |i| explain(&blocks, i, &out, &err),
        );
        panic!(
            "the guide's script {why} in {at}\n--- server log ---\n{}",
            server.log_tail()
        );
    }

    // Every request answered 2xx, except those whose status the example prints.
    for i in 0..blocks.len() {
        for line in err[i].iter().filter_map(|l| l.strip_prefix(HTTP_MARK)) {
            assert!(
                line.starts_with('2'),
                "a request answered {line} in {}\n(an example that shows an error answer \
                 prints its status with curl -w)",
                explain(&blocks, i, &out, &err)
            );
        }
    }

    // Every `# => text`, in order (several may be found on one line).
    for (i, b) in blocks.iter().enumerate() {
        let mut from = 0;
        for want in &b.expect {
            match find_from(&out[i], from, want) {
                Some(at) => from = at,
                None => panic!(
                    "{want:?} is not in the output (after what the lines before it matched) \
                     of {}",
                    explain(&blocks, i, &out, &err)
                ),
            }
        }
    }

    // Resuming after event N starts at N + 1, then goes on without a gap to the end.
    let (i, after) = resume_block(&blocks);
    let ids: Vec<i64> = out[i]
        .iter()
        .filter_map(|l| l.strip_prefix("id: "))
        .filter_map(|v| v.trim().parse().ok())
        .collect();
    let expected: Vec<i64> = (after + 1..after + 1 + ids.len() as i64).collect();
    assert!(
        !ids.is_empty() && ids == expected,
        "the resumed stream should start at {} and go on without gaps: {ids:?} in {}",
        after + 1,
        explain(&blocks, i, &out, &err)
    );
    let last_event = out[i].iter().rev().find_map(|l| l.strip_prefix("event: "));
    assert_eq!(
        last_event,
        Some("run.completed"),
        "the resumed stream of an ended run ends with its terminal event: {}",
        explain(&blocks, i, &out, &err)
    );

    // A retried message with the same request_id is the original message.
    let i = block_with(&blocks, "\"request_id\": \"");
    let answers: Vec<&String> = out[i]
        .iter()
        .filter(|l| l.starts_with("{\"state\":\"started\",\"message\":{\"id\":\""))
        .collect();
    assert!(
        answers.len() >= 2 && answers.iter().all(|a| *a == answers[0]),
        "the retry should answer the original message, byte for byte: {}",
        explain(&blocks, i, &out, &err)
    );

    // The error answers the guide shows carry their documented status and code.
    for (status, code) in [
        (401, "unauthorized"),
        (409, "run_busy"),
        (409, "run_ended"),
        (409, "wrong_state"),
        (422, "idempotency_key_reused"),
    ] {
        let shown = out.iter().flatten().any(|l| {
            l.contains(&format!("\"code\":\"{code}\""))
                && l.contains(&format!("\"status\":{status}"))
        });
        assert!(shown, "no example shows a {status} {code} problem");
    }

    // The requires_action flows reached each state they demonstrate.
    for state in ["awaiting_client", "approved", "ok", "denied"] {
        let seen = out
            .iter()
            .flatten()
            .any(|l| l.contains(&format!("\"state\":\"{state}\"")));
        assert!(seen, "no example shows a receipt in state {state}");
    }
}

#[test]
fn only_sh_blocks_are_run_and_their_expectations_are_read() {
    let guide = "intro\n```sh\necho hi\n# => hi\n```\n\n```text\nnot run\n```\n\
                 ```json\n{}\n```\n  ```sh\ntrue\n  ```\n";
    let blocks = sh_blocks(guide).expect("parses");
    assert_eq!(blocks.len(), 2);
    assert_eq!(blocks[0].line, 2);
    assert_eq!(blocks[0].source, "echo hi\n# => hi");
    assert_eq!(blocks[0].expect, ["hi"]);
    assert_eq!(blocks[1].source, "true");
    assert!(matches!(
        sh_blocks("```sh\necho\n"),
        Err(GuideError::Unclosed(1))
    ));
    assert!(matches!(sh_blocks("no code"), Err(GuideError::NoBlocks)));
}
