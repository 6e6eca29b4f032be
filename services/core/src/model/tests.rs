//! given(events) / then(projection) tests of the runs projection.

use super::*;
use baton_events::*;
use chrono::Utc;

fn fold(events: &[RunEvent]) -> RunSummary {
    let at = Utc::now();
    let mut s = RunSummary::empty(TenantId::new(), RunId::new(), at);
    for (i, e) in events.iter().enumerate() {
        s.apply(e, i as i64 + 1, at);
    }
    s
}

fn created() -> RunEvent {
    RunEvent::RunCreated(RunCreated {
        agent_id: AgentId::new(),
        agent_version: 3,
        title: Some("t".into()),
        metadata: Default::default(),
        tool_versions: Default::default(),
        parent: None,
    })
}

fn user_message() -> RunEvent {
    RunEvent::MessageAppended(MessageAppended {
        message_id: MessageId::new(),
        role: MessageRole::User,
        content: "hi".into(),
        queued: false,
    })
}

#[test]
fn a_new_run_waits_for_input() {
    let s = fold(&[created()]);
    assert_eq!(s.status, RunStatus::Waiting);
    assert_eq!(s.version, 1);
    assert_eq!(s.agent_version, 3);
}

#[test]
fn a_requested_turn_makes_the_run_busy_until_it_completes() {
    let mut events = vec![
        created(),
        user_message(),
        RunEvent::TurnRequested(TurnRequested {
            turn: 1,
            message_id: MessageId::new(),
        }),
    ];
    assert_eq!(fold(&events).status, RunStatus::Queued);
    events.push(RunEvent::TurnStarted(TurnStarted { turn: 1 }));
    assert!(fold(&events).status.is_busy());
    events.push(RunEvent::TurnCompleted(TurnCompleted {
        turn: 1,
        finish_reason: None,
    }));
    let s = fold(&events);
    assert_eq!(s.status, RunStatus::Waiting);
    assert_eq!((s.message_count, s.turn_count, s.version), (1, 1, 5));
}

#[test]
fn a_failed_turn_records_its_error_and_frees_the_run() {
    let s = fold(&[
        created(),
        RunEvent::TurnFailed(TurnFailed {
            turn: 1,
            error: ErrorInfo {
                code: "x".into(),
                message: "y".into(),
            },
        }),
    ]);
    assert_eq!(s.status, RunStatus::Waiting);
    assert_eq!(s.last_error.map(|e| e.code).as_deref(), Some("x"));
}

#[test]
fn nothing_reopens_a_terminal_run() {
    let s = fold(&[
        created(),
        RunEvent::RunCancelRequested(RunCancelRequested { reason: None }),
        RunEvent::RunCancelled(RunCancelled { reason: None }),
        user_message(),
    ]);
    assert_eq!(s.status, RunStatus::Cancelled);
    assert!(s.cancel_requested);
    assert_eq!(s.version, 4, "version still follows the stream");
}

#[test]
fn status_names_round_trip() {
    for st in RunStatus::ALL {
        assert_eq!(RunStatus::parse(st.as_str()), Some(st));
    }
    assert_eq!(RunStatus::parse("bogus"), None);
}

fn turn(n: i64) -> Vec<RunEvent> {
    vec![
        user_message(),
        RunEvent::TurnRequested(TurnRequested {
            turn: n,
            message_id: MessageId::new(),
        }),
        RunEvent::TurnStarted(TurnStarted { turn: n }),
    ]
}

fn failed(n: i64) -> RunEvent {
    RunEvent::TurnFailed(TurnFailed {
        turn: n,
        error: ErrorInfo {
            code: "model_timeout".into(),
            message: "slow".into(),
        },
    })
}

#[test]
fn failed_turns_count_in_a_row_and_a_completed_turn_starts_them_again() {
    let mut events = vec![created()];
    events.extend(turn(1));
    events.push(failed(1));
    events.extend(turn(2));
    events.push(failed(2));
    let s = fold(&events);
    assert_eq!(
        (s.failed_turns, s.last_turn_outcome),
        (2, Some(TurnEnd::Failed))
    );
    assert_eq!(s.status, RunStatus::Waiting);
    events.extend(turn(3));
    events.push(RunEvent::TurnCompleted(TurnCompleted {
        turn: 3,
        finish_reason: None,
    }));
    let s = fold(&events);
    assert_eq!(
        (s.failed_turns, s.last_turn_outcome),
        (0, Some(TurnEnd::Completed))
    );
    assert_eq!(s.last_error, None);
    // Cancelled in a turn: that turn's outcome; cancelled while idle: the last one stays.
    let mut busy = events.clone();
    busy.extend(turn(4));
    busy.push(RunEvent::RunCancelled(RunCancelled { reason: None }));
    assert_eq!(fold(&busy).last_turn_outcome, Some(TurnEnd::Cancelled));
    events.push(RunEvent::RunCancelled(RunCancelled { reason: None }));
    assert_eq!(fold(&events).last_turn_outcome, Some(TurnEnd::Completed));
}

#[test]
fn labels_change_after_the_end_too() {
    let s = fold(&[
        created(),
        RunEvent::RunCancelled(RunCancelled { reason: None }),
        RunEvent::RunUpdated(RunUpdated {
            title: None,
            metadata: [("k".to_string(), "v".to_string())].into(),
        }),
    ]);
    assert_eq!(s.status, RunStatus::Cancelled);
    assert_eq!(
        (s.title, s.metadata.get("k").map(String::as_str)),
        (None, Some("v"))
    );
}
