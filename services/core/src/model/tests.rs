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
    })
}

fn user_message() -> RunEvent {
    RunEvent::MessageAppended(MessageAppended {
        message_id: MessageId::new(),
        role: MessageRole::User,
        content: "hi".into(),
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
