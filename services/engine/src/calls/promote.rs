//! Landing a workspace write or command: its `tool.result` and the `workspace.changed`
//! of the files it changed, with their contents, in one append. The change set was made
//! against the workspace version the call saw; it is resolved against the files as they
//! are now (`core::workspace::promote`: a path a member changed meanwhile keeps both)
//! and appended at exactly the version read. When a client event got in first and
//! leaves the step valid (an upload, a label), it is resolved again on top; otherwise,
//! or when the lease is gone, nothing lands, and the call, left with an intent and no
//! result, is run again by whoever drives the run next (it is idempotent: its only effect
//! is what this append would have landed).

use crate::outcome::{Next, StepError};
use crate::stream::{Landed, RunStream};
use crate::workspace::Promotion;
use baton_core::model::RunSummary;
use baton_core::ports::{Blob, PathState};
use baton_core::workspace::promote::{Current, resolve};
use baton_events::{
    ErrorInfo, FileChange, FileChangeKind, RunEvent, ToolOutcome, ToolResult, WorkspaceChanged,
    WorkspaceSource,
};
use std::collections::BTreeMap;

/// How often a promotion is resolved again after client events got in first.
const ATTEMPTS: usize = 5;

/// Appends `result` with the files of `promotion`, on the run as read at `after`.
pub(crate) async fn land(
    stream: &mut RunStream,
    after: &RunSummary,
    result: ToolResult,
    promotion: Promotion,
) -> Result<Next, StepError> {
    let mut expected = after.version;
    for _ in 0..ATTEMPTS {
        let (events, blobs) = resolved(stream, &result, &promotion).await?;
        match stream.commit_exact(expected, events, blobs).await? {
            Landed::Written | Landed::NotWritten => return Ok(Next::Continue),
            Landed::Moved(actual) => {
                if !stream.step_stands(expected, actual).await? {
                    return Ok(Next::Continue);
                }
                expected = actual;
            }
        }
    }
    Ok(Next::Continue)
}

/// The events and contents that land `promotion` on the workspace as it is now, within
/// the quotas (past one, the result says so and no file changes).
async fn resolved(
    stream: &RunStream,
    result: &ToolResult,
    promotion: &Promotion,
) -> Result<(Vec<RunEvent>, Vec<Blob>), StepError> {
    let ports = &stream.shared.ports;
    let state = ports
        .workspaces
        .workspace_state(stream.tenant, stream.run)
        .await?;
    let proposed: Vec<FileChange> = promotion
        .changes
        .iter()
        .map(|c| FileChange {
            path: c.path.clone(),
            change: c.kind,
            sha256: c.content.as_deref().map(Blob::name_of),
            size: c.content.as_ref().map(|b| b.len() as u64),
        })
        .collect();
    let current: BTreeMap<String, Current> = state
        .iter()
        .map(|s| {
            let now = Current {
                version: s.version,
                sha256: s.sha256.clone(),
            };
            (s.path.clone(), now)
        })
        .collect();
    let landing = resolve(promotion.base, proposed, &current);
    let mut result = result.clone();
    if let Some(over) = over_quota(stream, &state, &landing.changes).await? {
        result.outcome = ToolOutcome::Error;
        result.output = format!("Error (quota_exceeded): {over}; no file changes kept");
        result.error = Some(ErrorInfo {
            code: "quota_exceeded".into(),
            message: over,
        });
        return Ok((vec![RunEvent::ToolResult(result)], Vec::new()));
    }
    result.output = format!("{}\nfiles: {}", result.output, landing.summary());
    let mut blobs: Vec<Blob> = Vec::new();
    for change in landing.changes.iter().filter(|c| c.sha256.is_some()) {
        let content = promotion
            .changes
            .iter()
            .filter_map(|c| c.content.as_ref())
            .find(|b| Some(Blob::name_of(b)) == change.sha256);
        if let Some(content) = content
            && !blobs
                .iter()
                .any(|b| Some(&b.sha256) == change.sha256.as_ref())
        {
            blobs.push(Blob::of(content.clone()));
        }
    }
    let receipt_id = result.receipt_id;
    let mut events = vec![RunEvent::ToolResult(result)];
    if !landing.changes.is_empty() {
        events.push(RunEvent::WorkspaceChanged(WorkspaceChanged {
            source: WorkspaceSource::Command,
            receipt_id: Some(receipt_id),
            changes: landing.changes,
        }));
    }
    Ok((events, blobs))
}

/// Which quota `changes` would take the run or its tenant past, if any.
async fn over_quota(
    stream: &RunStream,
    state: &[PathState],
    changes: &[FileChange],
) -> Result<Option<String>, StepError> {
    let limits = stream.shared.ports.code.limits;
    let mut sizes: BTreeMap<&str, u64> = state
        .iter()
        .filter(|s| s.sha256.is_some())
        .map(|s| (s.path.as_str(), s.size))
        .collect();
    let mut added = 0u64;
    for c in changes {
        match c.change {
            FileChangeKind::Removed => {
                sizes.remove(c.path.as_str());
            }
            _ => {
                let size = c.size.unwrap_or(0);
                added += size;
                sizes.insert(c.path.as_str(), size);
            }
        }
    }
    let (files, bytes) = (sizes.len() as u64, sizes.values().sum::<u64>());
    if files > limits.max_run_files {
        return Ok(Some(format!(
            "the run's workspace would hold {files} files, more than its quota of {}",
            limits.max_run_files
        )));
    }
    if bytes > limits.max_run_bytes {
        return Ok(Some(format!(
            "the run's workspace would hold {bytes} bytes, more than its quota of {}",
            limits.max_run_bytes
        )));
    }
    let usage = stream
        .shared
        .ports
        .workspaces
        .workspace_usage(stream.tenant, stream.run)
        .await?;
    if usage.tenant_bytes + added > limits.max_tenant_bytes {
        return Ok(Some(format!(
            "the tenant stores {} bytes; {added} more would pass its quota of {}",
            usage.tenant_bytes, limits.max_tenant_bytes
        )));
    }
    Ok(None)
}
