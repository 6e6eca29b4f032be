//! `EventLog::delete_run`: a deleted run leaves no row in any table (read from the tables
//! themselves), with its audit entry; a stale version or another tenant deletes nothing;
//! the tenant's other runs keep every row.

use crate::support::{
    Store, append_ok, audited, created, event, message, new_run, record, request, tenant,
    turn_requested,
};
use baton_core::StoreError;
use baton_core::model::{AuditAction, AuditEntry, CheckpointMeta};
use baton_core::ports::StoredCheckpoint;
use baton_events::{
    CheckpointId, MessageRole, ReceiptId, RunEvent, RunId, TenantId, ToolEffect, ToolId,
    ToolIntent, ToolKind, ToolOutcome, ToolResult, TurnStarted,
};
use chrono::{SubsecRound, Utc};
use serde_json::json;

/// A run with a row in every table that holds rows of runs: an idempotency record, a
/// message, a receipt and a checkpoint. Returns it and its version.
async fn full_run<S: Store>(s: &S, t: TenantId, request_id: &str) -> (RunId, i64) {
    let run = RunId::new();
    let mut first = request(
        run,
        0,
        vec![
            created(t),
            message(t, MessageRole::User, "go"),
            turn_requested(t, 1),
        ],
    );
    first.idempotency = Some(record(request_id, json!({"run": run.to_string()})));
    append_ok(s, t, first).await;
    let receipt = ReceiptId::new();
    let intent = ToolIntent {
        receipt_id: receipt,
        turn: 1,
        call_id: "c1".into(),
        tool_id: ToolId::new(),
        tool: "look".into(),
        kind: ToolKind::Http,
        effect: ToolEffect::Read,
        idempotent: false,
        arguments: json!({}),
        idempotency_key: receipt.to_string(),
    };
    let result = ToolResult {
        receipt_id: receipt,
        call_id: "c1".into(),
        tool: "look".into(),
        outcome: ToolOutcome::Ok,
        output: "seen".into(),
        error: None,
        duration_ms: 1,
        truncated: false,
        from_client: false,
        attempts: None,
        delegated_run: None,
    };
    let turn = vec![
        event(t, RunEvent::TurnStarted(TurnStarted { turn: 1 })),
        event(t, RunEvent::ToolIntent(intent)),
        event(t, RunEvent::ToolResult(result)),
    ];
    let (after, _) = append_ok(s, t, request(run, 3, turn)).await;
    let (after, _) = crate::workspace::put(s, t, run, after.version, "out.txt", b"shared").await;
    let checkpoint = StoredCheckpoint {
        meta: CheckpointMeta {
            id: CheckpointId::new(),
            through_version: after.version,
            key_id: "k1".into(),
            size: 4,
            sha256: format!("{:064}", 1),
            created_at: Utc::now().trunc_subsecs(6),
        },
        ciphertext: vec![1, 2, 3, 4],
    };
    s.save_checkpoint(t, run, &checkpoint).await.expect("save");
    (run, after.version)
}

fn deleted_by(run: RunId) -> AuditEntry {
    AuditEntry {
        action: AuditAction::RunDeleted,
        target: run.to_string(),
        ..audited()
    }
}

pub async fn a_deleted_run_leaves_no_row_and_the_tenants_other_runs_keep_theirs<S: Store>(s: &S) {
    let t = tenant(s).await;
    let (doomed, version) = full_run(s, t, "req-doomed").await;
    let (kept, _) = full_run(s, t, "req-kept").await;
    let before = s.rows_of_run(t, doomed).await;
    assert!(
        before.iter().all(|(_, n)| *n > 0),
        "a row in every table: {before:?}"
    );

    // At a stale version, or by another tenant: nothing goes.
    let stale = s
        .delete_run(t, doomed, version - 1, &deleted_by(doomed))
        .await;
    assert!(
        matches!(stale, Err(StoreError::Conflict { .. })),
        "{stale:?}"
    );
    let other = tenant(s).await;
    let foreign = s
        .delete_run(other, doomed, version, &deleted_by(doomed))
        .await;
    assert!(matches!(foreign, Err(StoreError::NotFound)), "{foreign:?}");
    assert_eq!(s.rows_of_run(t, doomed).await, before);

    s.delete_run(t, doomed, version, &deleted_by(doomed))
        .await
        .expect("delete");
    let after = s.rows_of_run(t, doomed).await;
    assert!(after.iter().all(|(_, n)| *n == 0), "rows left: {after:?}");
    assert!(s.get_run(t, doomed).await.expect("get").is_none());
    assert!(
        s.find_idempotency(t, "req-doomed")
            .await
            .expect("find")
            .is_none()
    );
    let kept_rows = s.rows_of_run(t, kept).await;
    assert!(kept_rows.iter().all(|(_, n)| *n > 0), "{kept_rows:?}");
    assert!(
        s.find_idempotency(t, "req-kept")
            .await
            .expect("find")
            .is_some()
    );

    let again = s.delete_run(t, doomed, version, &deleted_by(doomed)).await;
    assert!(matches!(again, Err(StoreError::NotFound)), "{again:?}");
    let entries = s
        .list_audit(
            t,
            &baton_core::ports::AuditQuery {
                before: None,
                action: Some(AuditAction::RunDeleted),
                limit: 50,
            },
        )
        .await
        .expect("audit");
    let deletions: Vec<_> = entries
        .iter()
        .filter(|e| e.action == AuditAction::RunDeleted)
        .collect();
    assert_eq!(
        deletions.len(),
        1,
        "one entry, for the delete that happened"
    );
    assert_eq!(deletions[0].target, doomed.to_string());
}

pub async fn a_run_under_a_lease_is_not_deleted<S: Store>(s: &S) {
    let t = tenant(s).await;
    let run = new_run(s, t).await;
    append_ok(
        s,
        t,
        request(
            run,
            1,
            vec![message(t, MessageRole::User, "hi"), turn_requested(t, 1)],
        ),
    )
    .await;
    let claimed = s
        .claim_runs(
            "replica-a",
            std::time::Duration::from_secs(30),
            Utc::now(),
            10,
            Some((t, run)),
        )
        .await
        .expect("claim");
    assert_eq!(claimed.len(), 1);
    let refused = s.delete_run(t, run, 3, &deleted_by(run)).await;
    assert!(
        matches!(refused, Err(StoreError::Conflict { .. })),
        "{refused:?}"
    );
    assert!(s.get_run(t, run).await.expect("get").is_some());
}

pub async fn a_checkpoint_of_a_deleted_run_is_not_saved<S: Store>(s: &S) {
    let t = tenant(s).await;
    let (run, version) = full_run(s, t, "req-late").await;
    s.delete_run(t, run, version, &deleted_by(run))
        .await
        .expect("delete");
    // The engine saving the settled turn's snapshot just after the deletion.
    let late = StoredCheckpoint {
        meta: CheckpointMeta {
            id: CheckpointId::new(),
            through_version: version,
            key_id: "k1".into(),
            size: 4,
            sha256: format!("{:064}", 2),
            created_at: Utc::now().trunc_subsecs(6),
        },
        ciphertext: vec![5, 6, 7, 8],
    };
    let saved = s.save_checkpoint(t, run, &late).await;
    assert!(matches!(saved, Err(StoreError::NotFound)), "{saved:?}");
    let rows = s.rows_of_run(t, run).await;
    assert!(rows.iter().all(|(_, n)| *n == 0), "rows left: {rows:?}");
}
