//! Golden fixtures: every event shape ever written must keep deserializing, and an event
//! this build does not know must still be readable as raw JSON.

use baton_events::{Decoded, Envelope};
use std::path::PathBuf;

fn fixtures() -> Vec<(String, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut out: Vec<(String, String)> = std::fs::read_dir(&dir)
        .expect("fixtures dir")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| {
            let name = p.file_name().expect("name").to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&p).expect("read fixture"))
        })
        .collect();
    out.sort();
    out
}

#[test]
fn every_known_fixture_decodes_and_round_trips_its_payload() {
    let mut known = 0;
    for (name, text) in fixtures()
        .into_iter()
        .filter(|(n, _)| !n.starts_with("unknown."))
    {
        let env: Envelope = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        match env.decode() {
            Decoded::Known(event) => {
                assert_eq!(event.event_type(), env.event_type, "{name}");
                assert_eq!(event.data(), env.data, "{name}: payload must round-trip");
            }
            Decoded::Unknown { reason } => panic!("{name} did not decode: {reason}"),
        }
        let again: Envelope =
            serde_json::from_value(serde_json::to_value(&env).expect("ser")).expect("de");
        assert_eq!(again, env, "{name}: envelope must round-trip");
        known += 1;
    }
    assert!(
        known >= 10,
        "expected a fixture per known event type, found {known}"
    );
}

#[test]
fn every_event_type_this_build_writes_has_a_golden_fixture() {
    let names: Vec<String> = fixtures().into_iter().map(|(n, _)| n).collect();
    let samples = [
        "run.created",
        "message.appended",
        "turn.requested",
        "turn.started",
        "turn.completed",
        "turn.failed",
        "run.cancel_requested",
        "run.cancelled",
        "run.completed",
        "run.failed",
        "lease.acquired",
        "lease.released",
    ];
    for t in samples {
        let schema = baton_events::upcast::current_schema(t).expect("known type");
        let file = format!("{t}.v{schema}.json");
        assert!(names.contains(&file), "missing golden fixture {file}");
    }
}

#[test]
fn unknown_event_type_reads_as_raw_json_not_an_error() {
    let (_, text) = fixtures()
        .into_iter()
        .find(|(n, _)| n.starts_with("unknown."))
        .expect("an unknown-type fixture");
    let env: Envelope = serde_json::from_str(&text).expect("envelope of unknown type parses");
    assert!(matches!(env.decode(), Decoded::Unknown { .. }));
    assert_eq!(env.data["tool"], "search", "raw payload kept");
    assert!(!env.is_terminal());
}

#[test]
fn newer_schema_than_this_build_knows_is_unknown_not_misread() {
    let data = serde_json::json!({"turn": 1});
    let decoded = baton_events::envelope::decode_payload("turn.started", 2, &data);
    match decoded {
        Decoded::Unknown { reason } => assert!(reason.contains("v2"), "{reason}"),
        other => panic!("expected unknown, got {other:?}"),
    }
}

#[test]
fn payload_of_the_wrong_shape_is_unknown_with_a_reason() {
    let data = serde_json::json!({"turn": "one"});
    match baton_events::envelope::decode_payload("turn.started", 1, &data) {
        Decoded::Unknown { reason } => assert!(reason.contains("turn.started")),
        other => panic!("expected unknown, got {other:?}"),
    }
}

#[test]
fn terminal_events_are_exactly_cancelled_completed_failed() {
    use baton_events::*;
    assert!(RunEvent::RunCompleted(RunCompleted {}).is_terminal());
    assert!(RunEvent::RunCancelled(RunCancelled { reason: None }).is_terminal());
    assert!(!RunEvent::TurnStarted(TurnStarted { turn: 1 }).is_terminal());
}

#[test]
fn the_api_guide_names_every_event_type_this_build_writes() {
    let guide = include_str!("../../docs/api.md");
    let fixtures: Vec<String> = fixtures()
        .into_iter()
        .map(|(n, _)| n)
        .filter(|n| !n.starts_with("unknown."))
        .collect();
    for name in fixtures {
        let event_type = name.split(".v").next().unwrap_or_default();
        assert!(
            guide.contains(&format!("`{event_type}`")),
            "docs/api.md does not mention {event_type}"
        );
    }
}
