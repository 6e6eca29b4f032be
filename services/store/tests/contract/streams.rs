//! Contract: appending to and reading run streams, optimistic concurrency, projections.

use crate::support::*;
use baton_core::StoreError;
use baton_core::model::{RunStatus, RunSummary};
use baton_core::ports::AppendOutcome;
use baton_events::{
    Decoded, ErrorInfo, MessageRole, RunCancelRequested, RunCompleted, RunEvent, RunId,
    TurnCompleted, TurnFailed, TurnStarted,
};

pub async fn a_new_stream_reads_back_in_order<S: Store>(s: &S) {
    let t = tenant(s).await;
    let run = RunId::new();
    let req = request(
        run,
        0,
        vec![
            created(t),
            message(t, MessageRole::User, "hi"),
            turn_requested(t, 1),
        ],
    );
    let at = req.at;
    let (summary, stored) = append_ok(s, t, req.clone()).await;
    assert_eq!(versions(&stored), vec![1, 2, 3]);
    assert!(stored.windows(2).all(|w| w[0].position < w[1].position));
    for (e, new) in stored.iter().zip(&req.events) {
        assert_eq!((e.id, e.stream, e.recorded_at), (new.id, run, at));
        assert_eq!(e.event_type, new.event_type());
        assert_eq!(e.data, new.data());
        assert_eq!(e.meta, new.meta);
        assert!(matches!(e.decode(), Decoded::Known(k) if k == new.event));
    }
    assert_eq!(all_events(s, t, run).await, stored);
    assert_eq!(s.get_run(t, run).await.expect("get"), Some(summary));
}

/// An append of more events than one `INSERT` writes (the store writes them in several)
/// returns and stores each with its own version and position, in order.
pub async fn a_long_append_reads_back_in_order<S: Store>(s: &S) {
    let t = tenant(s).await;
    let run = RunId::new();
    let mut events = vec![created(t)];
    events.extend((0..70).map(|i| message(t, MessageRole::User, &format!("m{i}"))));
    let (summary, stored) = append_ok(s, t, request(run, 0, events)).await;
    assert_eq!(versions(&stored), (1..=71).collect::<Vec<i64>>());
    assert!(stored.windows(2).all(|w| w[0].position < w[1].position));
    assert_eq!(all_events(s, t, run).await, stored);
    assert_eq!(summary.message_count, 70);
    assert_eq!(s.get_run(t, run).await.expect("get"), Some(summary));
}

pub async fn a_new_stream_must_start_with_run_created<S: Store>(s: &S) {
    let t = tenant(s).await;
    let run = RunId::new();
    let err = s
        .append(
            t,
            request(run, 0, vec![message(t, MessageRole::User, "hi")]),
        )
        .await
        .expect_err("a stream starting with a message");
    assert!(matches!(err, StoreError::Other(_)), "{err:?}");
    assert_eq!(s.get_run(t, run).await.expect("get"), None);
    assert!(all_events(s, t, run).await.is_empty());

    append_ok(s, t, request(run, 0, vec![created(t)])).await;
    let again = s.append(t, request(run, 0, vec![created(t)])).await;
    assert!(
        matches!(
            again,
            Err(StoreError::Conflict {
                expected: 0,
                actual: 1
            })
        ),
        "{again:?}"
    );
    let later = s.append(t, request(run, 1, vec![created(t)])).await;
    assert!(matches!(later, Err(StoreError::Other(_))), "{later:?}");
    assert_eq!(versions(&all_events(s, t, run).await), vec![1]);
}

pub async fn an_append_at_a_stale_version_is_a_conflict_and_writes_nothing<S: Store>(s: &S) {
    let t = tenant(s).await;
    let run = new_run(s, t).await;
    let msg = |c: &str| message(t, MessageRole::User, c);
    append_ok(s, t, request(run, 1, vec![msg("a"), msg("b")])).await;

    let stale = s.append(t, request(run, 1, vec![msg("late")])).await;
    assert!(
        matches!(
            stale,
            Err(StoreError::Conflict {
                expected: 1,
                actual: 3
            })
        ),
        "{stale:?}"
    );
    let ahead = s.append(t, request(run, 7, vec![msg("ahead")])).await;
    assert!(matches!(
        ahead,
        Err(StoreError::Conflict {
            expected: 7,
            actual: 3
        })
    ));
    let summary = s.get_run(t, run).await.expect("get").expect("run");
    assert_eq!((summary.version, summary.message_count), (3, 2));
    let messages = s.list_messages(t, run, 0, 100).await.expect("messages");
    assert_eq!(messages.len(), 2);

    append_ok(s, t, request(run, 3, vec![msg("c")])).await;
    assert_eq!(versions(&all_events(s, t, run).await), vec![1, 2, 3, 4]);
}

pub async fn concurrent_appends_at_one_version_have_exactly_one_winner<S: Store>(s: &S) {
    let t = tenant(s).await;
    let run = new_run(s, t).await;
    let mut tasks = Vec::new();
    for i in 0..8 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let events = vec![message(t, MessageRole::User, &format!("m{i}"))];
            s.append(t, request(run, 1, events)).await
        }));
    }
    let (mut won, mut conflicts) = (0, 0);
    for task in tasks {
        match task.await.expect("task") {
            Ok(AppendOutcome::Appended { .. }) => won += 1,
            Err(StoreError::Conflict {
                expected: 1,
                actual: 2,
            }) => conflicts += 1,
            other => panic!("unexpected outcome {other:?}"),
        }
    }
    assert_eq!((won, conflicts), (1, 7));

    // Writers that retry on conflict all land, with no gap and no duplicate version.
    let mut tasks = Vec::new();
    for i in 0..8 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..200 {
                let v = s.get_run(t, run).await.expect("get").expect("run").version;
                let events = vec![message(t, MessageRole::User, &format!("r{i}"))];
                match s.append(t, request(run, v, events)).await {
                    Ok(_) => return,
                    Err(StoreError::Conflict { .. }) => continue,
                    Err(e) => panic!("append failed: {e}"),
                }
            }
            panic!("writer {i} never landed");
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    let events = all_events(s, t, run).await;
    assert_eq!(versions(&events), (1..=10).collect::<Vec<_>>());
    let summary = s.get_run(t, run).await.expect("get").expect("run");
    assert_eq!((summary.version, summary.message_count), (10, 9));
    let seqs: Vec<i64> = s
        .list_messages(t, run, 0, 100)
        .await
        .expect("messages")
        .iter()
        .map(|m| m.seq)
        .collect();
    assert_eq!(seqs, (1..=9).collect::<Vec<_>>());
}

pub async fn reading_from_a_version_respects_the_limit<S: Store>(s: &S) {
    let t = tenant(s).await;
    let run = new_run(s, t).await;
    let events = (0..9)
        .map(|i| message(t, MessageRole::User, &i.to_string()))
        .collect();
    append_ok(s, t, request(run, 1, events)).await;
    let page = s.read_stream(t, run, 3, 4).await.expect("read");
    assert_eq!(versions(&page), vec![4, 5, 6, 7]);
    assert_eq!(
        versions(&s.read_stream(t, run, 8, 100).await.expect("read")),
        vec![9, 10]
    );
    assert!(
        s.read_stream(t, run, 10, 100)
            .await
            .expect("read")
            .is_empty()
    );
    let messages = s.list_messages(t, run, 2, 3).await.expect("messages");
    let seqs: Vec<i64> = messages.iter().map(|m| m.seq).collect();
    assert_eq!(seqs, vec![3, 4, 5]);
    assert_eq!(messages[0].content, "2");
}

pub async fn projections_match_a_fold_of_the_events<S: Store>(s: &S) {
    let t = tenant(s).await;
    let run = RunId::new();
    let first = request(
        run,
        0,
        vec![
            created(t),
            message(t, MessageRole::User, "q1"),
            turn_requested(t, 1),
        ],
    );
    let created_at = first.at;
    let (summary, _) = append_ok(s, t, first).await;
    assert_eq!(summary.status, RunStatus::Queued);
    let steps: Vec<Vec<RunEvent>> = vec![
        vec![RunEvent::TurnStarted(TurnStarted { turn: 1 })],
        vec![RunEvent::TurnFailed(TurnFailed {
            turn: 1,
            error: ErrorInfo {
                code: "model_error".into(),
                message: "boom".into(),
            },
        })],
        vec![RunEvent::TurnStarted(TurnStarted { turn: 2 })],
        vec![RunEvent::RunCancelRequested(RunCancelRequested {
            reason: Some("stop".into()),
        })],
        vec![RunEvent::TurnCompleted(TurnCompleted {
            turn: 2,
            finish_reason: Some("stop".into()),
        })],
    ];
    let mut last = summary;
    for step in steps {
        let mut events: Vec<_> = step.into_iter().map(|e| event(t, e)).collect();
        events.push(message(t, MessageRole::Assistant, "a"));
        let (after, _) = append_ok(s, t, request(run, last.version, events)).await;
        assert_eq!(s.get_run(t, run).await.expect("get"), Some(after.clone()));
        last = after;
    }

    let stored = all_events(s, t, run).await;
    let mut fold = RunSummary::empty(t, run, created_at);
    for e in &stored {
        let Decoded::Known(known) = e.decode() else {
            panic!("unknown event {e:?}");
        };
        fold.apply(&known, e.version, e.recorded_at);
    }
    assert_eq!(last, fold);
    assert_eq!(last.version, stored.len() as i64);
    assert_eq!(last.created_at, created_at);
    assert_eq!(last.updated_at, stored.last().expect("events").recorded_at);
    assert!(last.cancel_requested);
    assert_eq!((last.message_count, last.turn_count), (6, 1));

    let messages = s.list_messages(t, run, 0, 100).await.expect("messages");
    let appended: Vec<_> = stored
        .iter()
        .filter_map(|e| match e.decode() {
            Decoded::Known(RunEvent::MessageAppended(m)) => Some((e, m)),
            _ => None,
        })
        .collect();
    assert_eq!(messages.len(), appended.len());
    for (i, (m, (e, payload))) in messages.iter().zip(&appended).enumerate() {
        assert_eq!(m.seq, i as i64 + 1);
        assert_eq!(
            (m.id, m.run_id, m.version),
            (payload.message_id, run, e.version)
        );
        assert_eq!((m.role, &m.content), (payload.role, &payload.content));
        assert_eq!(m.created_at, e.recorded_at);
    }
}

pub async fn unknown_event_types_read_back_as_raw_json<S: Store>(s: &S) {
    let t = tenant(s).await;
    let run = new_run(s, t).await;
    let data = serde_json::json!({ "plan": ["a", "b"], "depth": 3, "nested": { "ok": true } });
    s.insert_raw_event(
        t,
        run,
        RawEvent {
            version: 2,
            event_type: "future.planned",
            schema: 1,
            data: data.clone(),
            at: now(),
        },
    )
    .await;
    s.insert_raw_event(
        t,
        run,
        RawEvent {
            version: 3,
            event_type: "message.appended",
            schema: 99,
            data: serde_json::json!({ "parts": [] }),
            at: now(),
        },
    )
    .await;
    let events = all_events(s, t, run).await;
    assert_eq!(versions(&events), vec![1, 2, 3]);
    assert_eq!(events[1].event_type, "future.planned");
    assert_eq!(events[1].data, data);
    assert!(matches!(events[1].decode(), Decoded::Unknown { .. }));
    assert_eq!(events[2].schema, 99);
    assert!(matches!(events[2].decode(), Decoded::Unknown { .. }));

    // The stream stays appendable after them.
    let (summary, _) = append_ok(s, t, request(run, 3, vec![turn_requested(t, 1)])).await;
    assert_eq!(summary.version, 4);
}

pub async fn a_terminal_run_stores_events_but_counts_no_more_messages<S: Store>(s: &S) {
    let t = tenant(s).await;
    let run = new_run(s, t).await;
    let end = event(t, RunEvent::RunCompleted(RunCompleted {}));
    append_ok(s, t, request(run, 1, vec![end])).await;
    let late = vec![message(t, MessageRole::User, "too late")];
    let (summary, stored) = append_ok(s, t, request(run, 2, late)).await;
    assert_eq!(versions(&stored), vec![3]);
    assert_eq!(summary.status, RunStatus::Completed);
    assert_eq!((summary.version, summary.message_count), (3, 0));
    assert!(
        s.list_messages(t, run, 0, 100)
            .await
            .expect("msgs")
            .is_empty()
    );
}
