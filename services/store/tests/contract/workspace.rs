//! Contract: a run's workspace is the fold of its `workspace.changed` events; contents
//! are stored once per tenant and counted by the files holding them, so a content no file
//! holds any more is gone; a change naming a content neither stored nor supplied, or
//! supplied under another name, writes nothing; a deleted run takes its files and the
//! contents only it held; another tenant sees none of it.

use crate::support::{Store, append_ok, audited, event, new_run, request, tenant};
use baton_core::StoreError;
use baton_core::model::{AuditAction, AuditEntry, RunSummary};
use baton_core::ports::{AppendRequest, Blob};
use baton_events::{
    Envelope, FileChange, FileChangeKind, RunEvent, RunId, TenantId, WorkspaceChanged,
    WorkspaceSource,
};

fn added(path: &str, content: &[u8]) -> FileChange {
    FileChange {
        path: path.into(),
        change: FileChangeKind::Added,
        sha256: Some(Blob::name_of(content)),
        size: Some(content.len() as u64),
    }
}

fn removed(path: &str) -> FileChange {
    FileChange {
        path: path.into(),
        change: FileChangeKind::Removed,
        sha256: None,
        size: None,
    }
}

/// A `workspace.changed` of `changes` at `version`, supplying `blobs`.
fn change(
    t: TenantId,
    run: RunId,
    version: i64,
    changes: Vec<FileChange>,
    blobs: &[&[u8]],
) -> AppendRequest {
    let e = RunEvent::WorkspaceChanged(WorkspaceChanged {
        source: WorkspaceSource::Upload,
        receipt_id: None,
        changes,
    });
    let mut req = request(run, version, vec![event(t, e)]);
    req.blobs = blobs.iter().map(|b| Blob::of(b.to_vec())).collect();
    req
}

/// Stores `content` at `path` of `run` (at `version`).
pub async fn put<S: Store>(
    s: &S,
    t: TenantId,
    run: RunId,
    version: i64,
    path: &str,
    content: &[u8],
) -> (RunSummary, Vec<Envelope>) {
    let req = change(t, run, version, vec![added(path, content)], &[content]);
    append_ok(s, t, req).await
}

async fn content<S: Store>(s: &S, t: TenantId, run: RunId, path: &str) -> Option<Vec<u8>> {
    let file = s.read_file(t, run, path).await.expect("read");
    file.map(|f| f.content)
}

pub async fn contents_are_stored_once_and_go_when_no_file_holds_them<S: Store>(s: &S) {
    let t = tenant(s).await;
    let run = new_run(s, t).await;
    let (after, events) = append_ok(
        s,
        t,
        change(
            t,
            run,
            1,
            vec![added("a.txt", b"same"), added("dir/b.txt", b"same")],
            &[b"same"],
        ),
    )
    .await;
    assert_eq!(after.version, 2);
    assert_eq!(events[0].event_type, "workspace.changed");
    let files = s.list_files(t, run, None, 10).await.expect("list");
    let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, ["a.txt", "dir/b.txt"]);
    assert!(files.iter().all(|f| f.version == 2 && f.size == 4));
    assert_eq!(files[0].sha256, Blob::name_of(b"same"));
    assert_eq!(
        content(s, t, run, "dir/b.txt").await.as_deref(),
        Some(&b"same"[..])
    );
    let usage = s.workspace_usage(t, run).await.expect("usage");
    assert_eq!(
        (usage.files, usage.bytes, usage.tenant_bytes),
        (2, 8, 4),
        "one copy"
    );
    let contents = s.run_contents(t, run).await.expect("contents");
    assert_eq!(
        contents,
        [Blob::of(b"same".to_vec())],
        "each content once, in one read"
    );

    // A page after a cursor.
    let page = s.list_files(t, run, Some("a.txt"), 10).await.expect("list");
    assert_eq!(page.len(), 1);
    assert_eq!(page[0].path, "dir/b.txt");

    // a.txt gets new content, b.txt goes: "same" is held by nothing and goes too.
    let mut modified = added("a.txt", b"newer!");
    modified.change = FileChangeKind::Modified;
    let req = change(
        t,
        run,
        2,
        vec![modified, removed("dir/b.txt")],
        &[b"newer!"],
    );
    append_ok(s, t, req).await;
    assert!(
        s.get_file(t, run, "dir/b.txt")
            .await
            .expect("get")
            .is_none()
    );
    assert!(content(s, t, run, "dir/b.txt").await.is_none());
    assert_eq!(
        content(s, t, run, "a.txt").await.as_deref(),
        Some(&b"newer!"[..])
    );
    let file = s
        .get_file(t, run, "a.txt")
        .await
        .expect("get")
        .expect("a.txt");
    assert_eq!(file.version, 3);
    let usage = s.workspace_usage(t, run).await.expect("usage");
    assert_eq!((usage.files, usage.bytes, usage.tenant_bytes), (1, 6, 6));
    let contents = s.run_contents(t, run).await.expect("contents");
    assert_eq!(
        contents,
        [Blob::of(b"newer!".to_vec())],
        "removed files' contents are not"
    );

    // Naming the content that went without supplying it is refused whole.
    let req = change(t, run, 3, vec![added("c.txt", b"same")], &[]);
    let refused = s.append(t, req).await;
    assert!(
        matches!(&refused, Err(StoreError::Other(m)) if m.contains("neither stored nor supplied")),
        "{refused:?}"
    );
    assert_eq!(
        s.get_run(t, run).await.expect("get").expect("run").version,
        3
    );

    // A content held elsewhere may be named without supplying it again.
    let req = change(t, run, 3, vec![added("copy.txt", b"newer!")], &[]);
    append_ok(s, t, req).await;
    let usage = s.workspace_usage(t, run).await.expect("usage");
    assert_eq!((usage.files, usage.bytes, usage.tenant_bytes), (2, 12, 6));
}

pub async fn a_content_supplied_under_another_name_writes_nothing<S: Store>(s: &S) {
    let t = tenant(s).await;
    let run = new_run(s, t).await;
    let mut req = change(t, run, 1, vec![added("a.txt", b"real")], &[]);
    req.blobs = vec![Blob {
        sha256: Blob::name_of(b"real"),
        content: b"forged".to_vec(),
    }];
    let refused = s.append(t, req).await;
    assert!(
        matches!(&refused, Err(StoreError::Other(m)) if m.contains("does not hash")),
        "{refused:?}"
    );
    assert!(
        s.list_files(t, run, None, 10)
            .await
            .expect("list")
            .is_empty()
    );
    assert_eq!(
        s.workspace_usage(t, run).await.expect("usage").tenant_bytes,
        0
    );
}

pub async fn a_deleted_run_takes_its_files_and_the_contents_only_it_held<S: Store>(s: &S) {
    let t = tenant(s).await;
    let doomed = new_run(s, t).await;
    let kept = new_run(s, t).await;
    put(s, t, doomed, 1, "shared.txt", b"shared").await;
    let (last, _) = put(s, t, doomed, 2, "mine.txt", b"only mine").await;
    put(s, t, kept, 1, "shared.txt", b"shared").await;
    let usage = s.workspace_usage(t, kept).await.expect("usage");
    assert_eq!(usage.tenant_bytes, 6 + 9);

    let audit = AuditEntry {
        action: AuditAction::RunDeleted,
        target: doomed.to_string(),
        ..audited()
    };
    s.delete_run(t, doomed, last.version, &audit)
        .await
        .expect("delete");
    assert!(
        s.list_files(t, doomed, None, 10)
            .await
            .expect("list")
            .is_empty()
    );
    assert_eq!(
        content(s, t, kept, "shared.txt").await.as_deref(),
        Some(&b"shared"[..])
    );
    let usage = s.workspace_usage(t, kept).await.expect("usage");
    assert_eq!(
        usage.tenant_bytes, 6,
        "the content only the deleted run held went"
    );
}

pub async fn another_tenants_workspace_is_invisible<S: Store>(s: &S) {
    let t = tenant(s).await;
    let run = new_run(s, t).await;
    put(s, t, run, 1, "secret.txt", b"theirs").await;
    let other = tenant(s).await;
    assert!(
        s.list_files(other, run, None, 10)
            .await
            .expect("list")
            .is_empty()
    );
    assert!(
        s.get_file(other, run, "secret.txt")
            .await
            .expect("get")
            .is_none()
    );
    assert!(content(s, other, run, "secret.txt").await.is_none());
    assert!(
        s.run_contents(other, run)
            .await
            .expect("contents")
            .is_empty()
    );
    assert_eq!(
        s.workspace_usage(other, run)
            .await
            .expect("usage")
            .tenant_bytes,
        0
    );
}
