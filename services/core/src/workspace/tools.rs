//! The built-in workspace tools as the model sees them: each op's input schema, effect
//! and default description. The engine carries them out (`baton-engine`'s
//! `workspace.rs`).

use crate::model::WorkspaceOp;
use baton_events::ToolEffect;
use serde_json::{Value, json};

/// The arguments `op` takes.
pub fn schema(op: WorkspaceOp) -> Value {
    let path = json!({"type": "string", "description": "A path relative to the workspace, e.g. outputs/report.csv"});
    match op {
        WorkspaceOp::ReadFile => json!({
            "type": "object", "properties": {"path": path},
            "required": ["path"], "additionalProperties": false
        }),
        WorkspaceOp::WriteFile => json!({
            "type": "object",
            "properties": {"path": path, "content": {"type": "string", "description": "The whole new content (UTF-8)"}},
            "required": ["path", "content"], "additionalProperties": false
        }),
        WorkspaceOp::ListFiles => json!({
            "type": "object",
            "properties": {"prefix": {"type": "string", "description": "Only paths starting with this"}},
            "additionalProperties": false
        }),
        WorkspaceOp::Shell => json!({
            "type": "object",
            "properties": {"command": {"type": "string", "description": "Run with /bin/sh -c in the workspace directory"}},
            "required": ["command"], "additionalProperties": false
        }),
        WorkspaceOp::Python => json!({
            "type": "object",
            "properties": {"script": {"type": "string", "description": "Python 3 source, run in the workspace directory"}},
            "required": ["script"], "additionalProperties": false
        }),
    }
}

/// What `op` does to the world: reads read; writes and commands change only the
/// workspace, landing with their result.
pub fn effect(op: WorkspaceOp) -> ToolEffect {
    match op {
        WorkspaceOp::ReadFile | WorkspaceOp::ListFiles => ToolEffect::Read,
        WorkspaceOp::WriteFile | WorkspaceOp::Shell | WorkspaceOp::Python => ToolEffect::Mutation,
    }
}

/// The description the model sees when the definition gives none.
pub fn description(op: WorkspaceOp) -> &'static str {
    match op {
        WorkspaceOp::ReadFile => "Read a file of the run's workspace.",
        WorkspaceOp::WriteFile => "Write a file of the run's workspace (its whole content).",
        WorkspaceOp::ListFiles => "List the files of the run's workspace with their sizes.",
        WorkspaceOp::Shell => {
            "Run a shell command in the run's workspace (no network unless its environment \
             allows it, then through an HTTP proxy). Files it writes, changes or removes are \
             kept when it exits with status 0."
        }
        WorkspaceOp::Python => {
            "Run a Python 3 script in the run's workspace (no network unless its environment \
             allows it, then through an HTTP proxy). Files it writes, changes or removes are \
             kept when it exits with status 0."
        }
    }
}
