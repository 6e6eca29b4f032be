//! Queued input: a message posted with `strategy: enqueue` while a turn is in progress
//! waits in the run's queue (`message.queued`), and the append that settles the turn
//! before it takes it: the same append carries the message (`message.appended` with
//! `queued: true`) and the next `turn.requested`, and keeps the lease for that turn.
//! So a run never rests idle with a queue, a queued message is taken exactly once (the
//! append is fenced and checked against the version), and in order, on whichever
//! replica settles the turn, after a crash or hand-off as much as before.

use crate::state::RunState;
use baton_events::{MessageAppended, MessageRole, RunEvent, TurnRequested};

/// The turn `events` settle while leaving the run open: the turn they complete, fail or
/// interrupt, unless they also end the run.
pub(crate) fn settled_turn(events: &[RunEvent]) -> Option<i64> {
    let mut settled = None;
    for e in events {
        match e {
            RunEvent::TurnCompleted(t) => settled = Some(t.turn),
            RunEvent::TurnFailed(t) => settled = Some(t.turn),
            RunEvent::TurnInterrupted(t) => settled = Some(t.turn),
            RunEvent::RunCompleted(_) | RunEvent::RunFailed(_) | RunEvent::RunCancelled(_) => {
                return None;
            }
            _ => {}
        }
    }
    settled
}

/// The events that take the run's next queued message when `events` settle the turn in
/// progress and leave the run open; none otherwise.
pub(crate) fn next_turn(state: &RunState, events: &[RunEvent]) -> Vec<RunEvent> {
    let (Some(turn), Some(next)) = (settled_turn(events), state.queue.front()) else {
        return Vec::new();
    };
    vec![
        RunEvent::MessageAppended(MessageAppended {
            message_id: next.message_id,
            role: MessageRole::User,
            content: next.content.clone(),
            queued: true,
        }),
        RunEvent::TurnRequested(TurnRequested {
            turn: turn + 1,
            message_id: next.message_id,
        }),
    ]
}

/// Whether an event a client appended while the engine worked leaves the engine's step
/// as valid as before: it neither touches the turn's calls nor the run's status. The
/// engine folds such events and appends again rather than redoing the step. A message
/// that interrupts the turn does not: the step it was about to record (calls to make, an
/// approval to wait for) is no longer wanted.
pub(crate) fn leaves_the_step_valid(event: &RunEvent) -> bool {
    match event {
        RunEvent::MessageQueued(m) => m.interrupts.is_none(),
        RunEvent::RunUpdated(_) => true,
        // A member's upload: the turn's commands promote against the files they saw,
        // keeping both versions where a path changed meanwhile.
        RunEvent::WorkspaceChanged(w) => w.source == baton_events::WorkspaceSource::Upload,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::given::{intent, interrupting, model_asks, read, result_of, state, turn_started};
    use baton_events::{
        ErrorInfo, MessageId, MessageQueued, RunCancelled, RunCompleted, TurnCompleted, TurnFailed,
    };

    fn queued(content: &str) -> RunEvent {
        RunEvent::MessageQueued(MessageQueued {
            message_id: MessageId::new(),
            content: content.into(),
            interrupts: None,
        })
    }

    fn completed() -> RunEvent {
        RunEvent::TurnCompleted(TurnCompleted {
            turn: 1,
            finish_reason: None,
        })
    }

    fn failed() -> RunEvent {
        RunEvent::TurnFailed(TurnFailed {
            turn: 1,
            error: ErrorInfo {
                code: "x".into(),
                message: "y".into(),
            },
        })
    }

    /// A turn in progress with `contents` queued behind it, in order.
    fn with_queue(contents: &[&str]) -> RunState {
        let mut events = turn_started();
        events.extend(contents.iter().map(|c| queued(c)));
        state(&events)
    }

    #[test]
    fn a_settling_append_takes_the_oldest_queued_message_as_the_next_turn() {
        let s = with_queue(&["first", "second"]);
        for settling in [completed(), failed()] {
            let taken = next_turn(&s, &[settling]);
            let [RunEvent::MessageAppended(m), RunEvent::TurnRequested(t)] = taken.as_slice()
            else {
                panic!("not taken: {taken:?}");
            };
            assert_eq!((m.content.as_str(), m.queued), ("first", true));
            assert_eq!((t.turn, t.message_id), (2, m.message_id));
            assert_eq!(m.message_id, s.queue[0].message_id);
        }
    }

    #[test]
    fn a_turn_acts_for_whoever_asked_for_it_a_queued_one_for_whoever_queued_it() {
        // `turn_started` is asked for by a client; then two members queue messages, and
        // the engine (actor `engine`) takes the first as the next turn.
        let mut events = crate::given::stored(&turn_started());
        let by = |actor: &str, e: RunEvent| {
            let mut stored = crate::given::stored(&[e]).remove(0);
            stored.meta.actor = Some(actor.into());
            stored
        };
        for e in &mut events {
            e.meta.actor = Some("key:asker".into());
        }
        events.push(by("user:first", queued("first")));
        events.push(by("user:second", queued("second")));
        events.push(by("engine", completed()));
        let mut s = RunState::default();
        s.fold(&renumbered(events.clone())).expect("folds");
        assert_eq!(s.turn_actor.as_deref(), Some("key:asker"));
        for e in next_turn(&s, &[completed()]) {
            events.push(by("engine", e));
        }
        let mut s = RunState::default();
        s.fold(&renumbered(events)).expect("folds");
        assert_eq!(
            s.turn_actor.as_deref(),
            Some("user:first"),
            "the engine's turn acts for the member whose message it took"
        );
    }

    /// `events` as one stream, versions 1 to n.
    fn renumbered(mut events: Vec<baton_events::Envelope>) -> Vec<baton_events::Envelope> {
        for (i, e) in events.iter_mut().enumerate() {
            e.version = i as i64 + 1;
        }
        events
    }

    #[test]
    fn a_taken_message_leaves_the_queue_and_the_next_is_taken_next() {
        let mut events = turn_started();
        events.extend([queued("first"), queued("second"), completed()]);
        let s = state(&events);
        let taken = next_turn(&s, &[completed()]);
        events.extend(taken);
        let s = state(&events);
        assert_eq!(s.queue.len(), 1);
        assert_eq!(s.queue[0].content, "second");
        let RunEvent::MessageAppended(m) = &next_turn(&s, &[completed()])[0] else {
            panic!("not taken");
        };
        assert_eq!(m.content, "second");
    }

    #[test]
    fn nothing_is_taken_without_a_queue_mid_turn_or_when_the_run_ends() {
        let empty = with_queue(&[]);
        assert_eq!(next_turn(&empty, &[completed()]), []);
        let s = with_queue(&["first"]);
        assert_eq!(next_turn(&s, &[]), []);
        assert_eq!(
            next_turn(&s, &[completed(), RunEvent::RunCompleted(RunCompleted {})]),
            []
        );
        let cancelled = RunEvent::RunCancelled(RunCancelled { reason: None });
        assert_eq!(next_turn(&s, std::slice::from_ref(&cancelled)), []);
        // And a run that ended drops its queue.
        let mut events = turn_started();
        events.extend([queued("first"), cancelled]);
        assert!(state(&events).queue.is_empty());
    }

    fn interrupted(of: &RunEvent, rollback: bool) -> RunEvent {
        let RunEvent::MessageQueued(m) = of else {
            panic!("not a queued message");
        };
        RunEvent::TurnInterrupted(baton_events::TurnInterrupted {
            turn: 1,
            message_id: m.message_id,
            rollback,
        })
    }

    #[test]
    fn an_interrupting_message_goes_to_the_head_of_the_queue_and_is_taken_next() {
        let stop = interrupting("stop", false);
        let mut events = turn_started();
        events.extend([queued("later"), stop.clone()]);
        let s = state(&events);
        let RunEvent::MessageAppended(m) = &next_turn(&s, &[interrupted(&stop, false)])[0] else {
            panic!("not taken");
        };
        assert_eq!(m.content, "stop");
        assert_eq!(s.queue.len(), 2, "the earlier message still waits");
    }

    #[test]
    fn an_interrupted_turn_keeps_its_steps_and_a_rolled_back_one_drops_them() {
        let tool = read("look");
        let i = intent("c1", &tool);
        for (rollback, seen) in [(false, 3), (true, 1)] {
            let stop = interrupting("stop", rollback);
            let mut events = turn_started();
            events.extend([
                model_asks(1, &[("c1", &tool)]),
                RunEvent::ToolIntent(i.clone()),
                RunEvent::ToolResult(result_of(&i)),
                stop.clone(),
                interrupted(&stop, rollback),
            ]);
            let s = state(&events);
            // The user's message, then (kept) the model's call and its output.
            assert_eq!(s.conversation.len(), seen, "rollback {rollback}");
            assert_eq!(s.interrupt, None);
            assert!(s.calls.is_empty());
        }
    }

    #[test]
    fn only_a_message_that_does_not_interrupt_leaves_the_engines_step_valid() {
        assert!(leaves_the_step_valid(&queued("later")));
        assert!(!leaves_the_step_valid(&interrupting("stop", false)));
        assert!(!leaves_the_step_valid(&interrupting("undo", true)));
        assert!(!leaves_the_step_valid(&completed()));
    }

    #[test]
    fn rolling_back_a_turn_not_yet_started_keeps_its_message_and_the_turns_before() {
        let mut events = turn_started();
        events.push(RunEvent::ModelCompleted(baton_events::ModelCompleted {
            turn: 1,
            step: 1,
            message_id: MessageId::new(),
            content: Some("first answer".into()),
            reasoning: None,
            tool_calls: vec![],
            finish_reason: "stop".into(),
            usage: None,
            model: None,
        }));
        events.push(completed());
        let next = MessageId::new();
        events.push(RunEvent::MessageAppended(baton_events::MessageAppended {
            message_id: next,
            role: baton_events::MessageRole::User,
            content: "second".into(),
            queued: false,
        }));
        events.push(RunEvent::TurnRequested(baton_events::TurnRequested {
            turn: 2,
            message_id: next,
        }));
        let undo = interrupting("undo", true);
        events.push(undo.clone());
        let RunEvent::MessageQueued(m) = &undo else {
            panic!("not queued");
        };
        events.push(RunEvent::TurnInterrupted(baton_events::TurnInterrupted {
            turn: 2,
            message_id: m.message_id,
            rollback: true,
        }));
        let s = state(&events);
        let said: Vec<Option<&str>> = s
            .conversation
            .iter()
            .map(|m| m.content.as_deref())
            .collect();
        assert_eq!(said, [Some("hi"), Some("first answer"), Some("second")]);
    }
}
