//! Contract: idempotency records are stored with their append and stop repeats.

use crate::support::*;
use baton_core::ports::AppendOutcome;
use baton_events::{MessageRole, RunId};
use serde_json::json;

pub async fn a_repeated_idempotent_append_returns_the_original_and_writes_nothing<S: Store>(s: &S) {
    let t = tenant(s).await;
    let run = new_run(s, t).await;
    let original = record("req-1", json!({ "message": { "seq": 1 }, "turn": 1 }));
    let mut first = request(run, 1, vec![message(t, MessageRole::User, "hi")]);
    first.idempotency = Some(original.clone());
    append_ok(s, t, first).await;
    assert_eq!(
        s.find_idempotency(t, "req-1").await.expect("find"),
        Some(original.clone())
    );

    let mut repeat = request(run, 2, vec![message(t, MessageRole::User, "hi again")]);
    repeat.idempotency = Some(record("req-1", json!({ "other": true })));
    match s.append(t, repeat).await.expect("append") {
        AppendOutcome::Duplicate(rec) => assert_eq!(rec, original),
        other => panic!("expected a duplicate, got {other:?}"),
    }
    assert_eq!(versions(&all_events(s, t, run).await), vec![1, 2]);
    let summary = s.get_run(t, run).await.expect("get").expect("run");
    assert_eq!((summary.version, summary.message_count), (2, 1));
    assert_eq!(
        s.find_idempotency(t, "req-1").await.expect("find"),
        Some(original)
    );
}

pub async fn a_failed_append_keeps_no_idempotency_record<S: Store>(s: &S) {
    let t = tenant(s).await;
    let run = new_run(s, t).await;
    let mut stale = request(run, 5, vec![message(t, MessageRole::User, "hi")]);
    stale.idempotency = Some(record("req-stale", json!(1)));
    assert!(s.append(t, stale).await.is_err());
    assert_eq!(
        s.find_idempotency(t, "req-stale").await.expect("find"),
        None
    );
}

pub async fn racing_appends_with_one_request_id_store_exactly_one<S: Store>(s: &S) {
    let t = tenant(s).await;
    let mut tasks = Vec::new();
    for i in 0..8 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            // Each racer creates a different run: only the request id can stop them.
            let mut req = request(RunId::new(), 0, vec![created(t)]);
            req.idempotency = Some(record("req-race", json!({ "racer": i })));
            s.append(t, req).await.expect("append")
        }));
    }
    let (mut appended, mut duplicates) = (Vec::new(), Vec::new());
    for task in tasks {
        match task.await.expect("task") {
            AppendOutcome::Appended { run, .. } => appended.push(run.id),
            AppendOutcome::Duplicate(rec) => duplicates.push(rec),
        }
    }
    assert_eq!((appended.len(), duplicates.len()), (1, 7));
    let stored = s
        .find_idempotency(t, "req-race")
        .await
        .expect("find")
        .expect("record");
    assert!(duplicates.iter().all(|d| *d == stored));
    let query = baton_core::ports::RunListQuery {
        limit: 100,
        ..Default::default()
    };
    let runs = s.list_runs(t, &query).await.expect("list");
    assert_eq!(runs.iter().map(|r| r.id).collect::<Vec<_>>(), appended);
}

pub async fn request_ids_are_scoped_by_tenant<S: Store>(s: &S) {
    let (a, b) = (tenant(s).await, tenant(s).await);
    for t in [a, b] {
        let mut req = request(RunId::new(), 0, vec![created(t)]);
        req.idempotency = Some(record("shared-id", json!({ "tenant": t })));
        append_ok(s, t, req).await;
    }
    let rec_a = s.find_idempotency(a, "shared-id").await.expect("find");
    let rec_b = s.find_idempotency(b, "shared-id").await.expect("find");
    assert_eq!(rec_a.map(|r| r.response), Some(json!({ "tenant": a })));
    assert_eq!(rec_b.map(|r| r.response), Some(json!({ "tenant": b })));
}
