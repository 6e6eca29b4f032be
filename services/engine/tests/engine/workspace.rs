//! Workspace tools with real bubblewrap: a command's file changes land with its result,
//! exactly as it made them; a command that fails or times out lands nothing; a member's
//! upload of a path a command also writes is kept, and the command's version beside it.

use crate::tools::says;
use crate::world::{World, world_with_code};
use baton_core::model::{
    AgentLimits, RunStatus, ScriptedReply, ScriptedToolCall, ToolKindSpec, WorkspaceOp,
};
use baton_core::tools::NewTool;
use baton_core::workspace::{Precondition, WorkspaceLimits, Workspaces};
use baton_core::{RunId, ToolId};
use baton_engine::CodeTools;
use baton_events::ToolEffect;
use serde_json::{Value, json};

async fn world() -> World {
    let code = CodeTools::detect(&std::env::temp_dir(), WorkspaceLimits::default(), None).await;
    if let Err(why) = &code.sandbox {
        panic!("bubblewrap must work here (scripts/test installs it): {why}");
    }
    world_with_code(code).await
}

impl World {
    async fn workspace_tool(&self, name: &str, op: WorkspaceOp, timeout_ms: u64) -> ToolId {
        self.tool(NewTool {
            name: name.into(),
            description: String::new(),
            input_schema: json!({}),
            effect: ToolEffect::Read,
            idempotent: false,
            requires_approval: false,
            timeout_ms,
            kind: ToolKindSpec::Workspace {
                op,
                environment: None,
            },
        })
        .await
    }

    fn workspaces(&self) -> Workspaces {
        Workspaces {
            runs: self.runs.clone(),
            store: std::sync::Arc::new(self.store.clone()),
            limits: WorkspaceLimits::default(),
        }
    }

    async fn file(&self, run: RunId, path: &str) -> Option<String> {
        let read = self.workspaces().read_file(&self.owner, run, path).await;
        read.ok()
            .map(|f| String::from_utf8_lossy(&f.content).into_owned())
    }

    async fn paths(&self, run: RunId) -> Vec<String> {
        let page = self
            .workspaces()
            .list_files(&self.owner, run, None, None)
            .await;
        page.expect("list")
            .items
            .into_iter()
            .map(|f| f.path)
            .collect()
    }

    /// The `data` of every `type` event of the run.
    async fn data_of(&self, run: RunId, kind: &str) -> Vec<Value> {
        self.events(run)
            .await
            .into_iter()
            .filter(|e| e.event_type == kind)
            .map(|e| e.data)
            .collect()
    }
}

fn call(name: &str, arguments: Value) -> ScriptedToolCall {
    ScriptedToolCall {
        name: name.into(),
        arguments,
    }
}

fn calling(calls: Vec<ScriptedToolCall>) -> ScriptedReply {
    ScriptedReply {
        tool_calls: calls,
        ..says("")
    }
}

#[tokio::test]
async fn a_command_lands_exactly_what_it_changed_with_its_result() {
    let w = world().await;
    let write = w
        .workspace_tool("write_file", WorkspaceOp::WriteFile, 30_000)
        .await;
    let shell = w.workspace_tool("shell", WorkspaceOp::Shell, 30_000).await;
    let read = w
        .workspace_tool("read_file", WorkspaceOp::ReadFile, 30_000)
        .await;
    let list = w
        .workspace_tool("list_files", WorkspaceOp::ListFiles, 30_000)
        .await;
    let replies = vec![
        calling(vec![
            call(
                "write_file",
                json!({"path": "edit.txt", "content": "before"}),
            ),
            call("write_file", json!({"path": "gone.txt", "content": "bye"})),
        ]),
        calling(vec![call(
            "shell",
            json!({"command": "cat edit.txt; echo new > added.txt; echo after > edit.txt; \
                   rm gone.txt; ln -s /etc/hostname link"}),
        )]),
        calling(vec![
            call("read_file", json!({"path": "added.txt"})),
            call("list_files", json!({})),
        ]),
        ScriptedReply {
            complete_run: true,
            ..says("done")
        },
    ];
    let run = w
        .run_with(
            vec![write, shell, read, list],
            replies,
            AgentLimits::default(),
        )
        .await;
    w.wait_status(run, RunStatus::Completed).await;

    assert_eq!(w.paths(run).await, ["added.txt", "edit.txt"]);
    assert_eq!(w.file(run, "edit.txt").await.as_deref(), Some("after\n"));
    let results = w.data_of(run, "tool.result").await;
    let outputs: Vec<&str> = results
        .iter()
        .map(|r| r["output"].as_str().unwrap_or(""))
        .collect();
    assert!(results.iter().all(|r| r["outcome"] == "ok"), "{results:?}");
    assert!(
        outputs[2].starts_with("exit status 0\n--- stdout ---\nbefore"),
        "{}",
        outputs[2]
    );
    assert!(
        outputs[2].contains("not kept: link (a symbolic link)"),
        "{}",
        outputs[2]
    );
    assert!(
        outputs[2].ends_with("files: 1 added, 1 modified, 1 removed"),
        "{}",
        outputs[2]
    );
    assert_eq!(outputs[3], "new\n");
    assert!(outputs[4].contains("added.txt\t4 bytes"), "{}", outputs[4]);
    // Each write and command's change is its own event, right after its result.
    let types = w.types(run).await;
    let changed = w.data_of(run, "workspace.changed").await;
    assert_eq!(changed.len(), 3, "{types:?}");
    let command = &changed[2];
    assert_eq!(command["source"], "command");
    assert_eq!(command["receipt_id"], results[2]["receipt_id"]);
    let changes: Vec<(&str, &str)> = command["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .map(|c| {
            (
                c["path"].as_str().unwrap_or(""),
                c["change"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        changes,
        [
            ("added.txt", "added"),
            ("edit.txt", "modified"),
            ("gone.txt", "removed")
        ]
    );
    for (i, _) in types
        .iter()
        .enumerate()
        .filter(|(_, t)| *t == "workspace.changed")
    {
        assert_eq!(types[i - 1], "tool.result", "{types:?}");
    }
}

#[tokio::test]
async fn a_command_that_fails_or_times_out_lands_nothing() {
    let w = world().await;
    let shell = w.workspace_tool("shell", WorkspaceOp::Shell, 1_000).await;
    let replies = vec![
        calling(vec![call(
            "shell",
            json!({"command": "echo partial > p.txt; exit 3"}),
        )]),
        calling(vec![call(
            "shell",
            json!({"command": "echo partial > q.txt; sleep 30 & sleep 30"}),
        )]),
        ScriptedReply {
            complete_run: true,
            ..says("done")
        },
    ];
    let run = w
        .run_with(vec![shell], replies, AgentLimits::default())
        .await;
    w.wait_status(run, RunStatus::Completed).await;
    assert!(w.paths(run).await.is_empty());
    assert!(w.data_of(run, "workspace.changed").await.is_empty());
    let results = w.data_of(run, "tool.result").await;
    let codes: Vec<&str> = results
        .iter()
        .map(|r| r["error"]["code"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        codes,
        ["command_failed", "command_timed_out"],
        "{results:?}"
    );
    assert!(results.iter().all(|r| r["outcome"] == "error"));
}

#[tokio::test]
async fn an_upload_during_a_command_is_kept_and_the_commands_version_beside_it() {
    let w = world().await;
    let shell = w.workspace_tool("shell", WorkspaceOp::Shell, 30_000).await;
    let replies = vec![
        calling(vec![call(
            "shell",
            json!({"command": "sleep 2.0137; mkdir -p uploads; echo mine > uploads/a.txt; echo other > b.txt"}),
        )]),
        ScriptedReply {
            complete_run: true,
            ..says("done")
        },
    ];
    let run = w
        .run_with(vec![shell], replies, AgentLimits::default())
        .await;
    // Once the command runs (its copy made, bwrap started), a member uploads the same
    // path.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while !baton_testkit::process_running("sleep 2.0137") {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the command never started"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    w.workspaces()
        .upload(
            &w.owner,
            run,
            "uploads/a.txt",
            b"theirs".to_vec(),
            Precondition::None,
        )
        .await
        .expect("upload");
    w.wait_status(run, RunStatus::Completed).await;

    assert_eq!(
        w.file(run, "uploads/a.txt").await.as_deref(),
        Some("theirs")
    );
    assert_eq!(
        w.file(run, "uploads/a.txt.conflict-1").await.as_deref(),
        Some("mine\n")
    );
    assert_eq!(w.file(run, "b.txt").await.as_deref(), Some("other\n"));
    let results = w.data_of(run, "tool.result").await;
    let output = results[0]["output"].as_str().unwrap_or("");
    assert!(
        output.contains(
            "uploads/a.txt changed meanwhile: this command's version is uploads/a.txt.conflict-1"
        ),
        "{output}"
    );
}

#[tokio::test]
async fn the_operators_switch_hides_and_refuses_commands_whatever_agents_enable() {
    let w = world_with_code(CodeTools::disabled(WorkspaceLimits::default())).await;
    let shell = w.workspace_tool("shell", WorkspaceOp::Shell, 30_000).await;
    let python = w
        .workspace_tool("python", WorkspaceOp::Python, 30_000)
        .await;
    let write = w
        .workspace_tool("write_file", WorkspaceOp::WriteFile, 30_000)
        .await;
    let replies = vec![
        calling(vec![call("shell", json!({"command": "echo x > x.txt"}))]),
        calling(vec![call("python", json!({"script": "open('y.txt','w')"}))]),
        calling(vec![call(
            "write_file",
            json!({"path": "z.txt", "content": "z"}),
        )]),
        ScriptedReply {
            complete_run: true,
            ..says("done")
        },
    ];
    let run = w
        .run_with(vec![shell, python, write], replies, AgentLimits::default())
        .await;
    w.wait_status(run, RunStatus::Completed).await;
    let results = w.data_of(run, "tool.result").await;
    let codes: Vec<&str> = results
        .iter()
        .map(|r| r["error"]["code"].as_str().unwrap_or("ok"))
        .collect();
    assert_eq!(codes, ["unknown_tool", "unknown_tool", "ok"], "{results:?}");
    // Not offered: the model is told the tools it has, and they are not among them.
    let told = results[0]["output"].as_str().unwrap_or("");
    assert!(told.contains("[\"write_file\"]"), "{told}");
    assert_eq!(w.paths(run).await, ["z.txt"]);
}

/// The run store, counting the reads of contents that copies are made of.
struct CountingContents {
    store: baton_store::SqliteStore,
    reads: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

#[async_trait::async_trait]
impl baton_core::ports::WorkspaceStore for CountingContents {
    async fn list_files(
        &self,
        tenant: baton_core::TenantId,
        run: RunId,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<baton_core::model::WorkspaceFile>, baton_core::StoreError> {
        self.store.list_files(tenant, run, after, limit).await
    }
    async fn get_file(
        &self,
        tenant: baton_core::TenantId,
        run: RunId,
        path: &str,
    ) -> Result<Option<baton_core::model::WorkspaceFile>, baton_core::StoreError> {
        self.store.get_file(tenant, run, path).await
    }
    async fn read_file(
        &self,
        tenant: baton_core::TenantId,
        run: RunId,
        path: &str,
    ) -> Result<Option<baton_core::model::FileContent>, baton_core::StoreError> {
        self.store.read_file(tenant, run, path).await
    }
    async fn workspace_state(
        &self,
        tenant: baton_core::TenantId,
        run: RunId,
    ) -> Result<Vec<baton_core::ports::PathState>, baton_core::StoreError> {
        self.store.workspace_state(tenant, run).await
    }
    async fn run_contents(
        &self,
        tenant: baton_core::TenantId,
        run: RunId,
    ) -> Result<Vec<baton_core::ports::Blob>, baton_core::StoreError> {
        self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.store.run_contents(tenant, run).await
    }
    async fn workspace_usage(
        &self,
        tenant: baton_core::TenantId,
        run: RunId,
    ) -> Result<baton_core::model::WorkspaceUsage, baton_core::StoreError> {
        self.store.workspace_usage(tenant, run).await
    }
}

#[tokio::test]
async fn a_replica_reads_a_runs_contents_once_and_copies_from_what_it_keeps() {
    let code = CodeTools::detect(&std::env::temp_dir(), WorkspaceLimits::default(), None).await;
    assert!(code.sandbox.is_ok(), "bubblewrap must work here");
    let kept = code.contents.clone();
    let reads = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = reads.clone();
    let w = crate::world::world_with_ports(move |ports, store| {
        ports.code = code;
        ports.workspaces = std::sync::Arc::new(CountingContents {
            store: store.clone(),
            reads: counter,
        });
    })
    .await;
    let shell = w.workspace_tool("shell", WorkspaceOp::Shell, 30_000).await;
    let step = |n: u32| {
        calling(vec![call(
            "shell",
            json!({"command": format!("cat uploads/*.txt n.txt 2>/dev/null; echo {n} >> n.txt")}),
        )])
    };
    // Turn 1 runs two commands, each on the files the one before wrote; turns 2 and 3
    // one each, after an upload.
    let replies = vec![
        step(1),
        step(2),
        says("two"),
        step(3),
        says("three"),
        step(4),
        ScriptedReply {
            complete_run: true,
            ..says("done")
        },
    ];
    let run = w
        .run_with(vec![shell], replies, AgentLimits::default())
        .await;
    let count = || reads.load(std::sync::atomic::Ordering::SeqCst);
    w.wait_status(run, RunStatus::Waiting).await;
    assert_eq!(w.file(run, "n.txt").await.as_deref(), Some("1\n2\n"));
    assert_eq!(
        count(),
        0,
        "every content a copy needed was one this replica wrote"
    );
    assert!(kept.bytes() > 0);

    // A member's upload is new to the replica: read once, then kept.
    let next = |content: &str| baton_core::runs::PostMessage {
        content: content.into(),
        request_id: None,
        strategy: None,
    };
    for (turns, content) in [(2, "with the upload"), (3, "once more")] {
        if turns == 2 {
            w.workspaces()
                .upload(
                    &w.owner,
                    run,
                    "uploads/x.txt",
                    b"x".to_vec(),
                    Precondition::None,
                )
                .await
                .expect("upload");
        }
        w.runs
            .post_message(&w.owner, run, next(content))
            .await
            .expect("post");
        w.wait_for(run, "the turn", |r| {
            r.turn_count == turns && !r.status.in_turn()
        })
        .await;
    }
    w.wait_status(run, RunStatus::Completed).await;
    assert_eq!(w.file(run, "n.txt").await.as_deref(), Some("1\n2\n3\n4\n"));
    assert_eq!(
        count(),
        1,
        "the upload was read once, with the run's other contents"
    );
}
