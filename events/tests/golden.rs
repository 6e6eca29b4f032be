//! Golden fixtures: every event shape ever written must keep deserializing, and an event
//! this build does not know must still be readable as raw JSON.

use baton_events::upcast::known_types;
use baton_events::{Decoded, Envelope};
use std::collections::BTreeSet;
use std::path::PathBuf;

/// The file that holds the golden fixture of `event_type` at `schema`.
fn fixture_name(event_type: &str, schema: u32) -> String {
    format!("{event_type}.v{schema}.json")
}

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
    let mut decoded = BTreeSet::new();
    for (name, text) in fixtures()
        .into_iter()
        .filter(|(n, _)| !n.starts_with("unknown."))
    {
        let env: Envelope = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            name,
            fixture_name(&env.event_type, env.schema),
            "a fixture is named after the type and schema it holds"
        );
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
        decoded.insert(name);
    }
    let undecoded: Vec<String> = known_types()
        .map(|(t, schema)| fixture_name(t, schema))
        .filter(|f| !decoded.contains(f))
        .collect();
    assert!(
        undecoded.is_empty(),
        "every known event type at its current schema must have decoded from a fixture; \
         none did for {undecoded:?}"
    );
}

#[test]
fn every_event_type_this_build_writes_has_a_golden_fixture() {
    let names: BTreeSet<String> = fixtures().into_iter().map(|(n, _)| n).collect();
    let missing: Vec<String> = known_types()
        .map(|(t, schema)| fixture_name(t, schema))
        .filter(|f| !names.contains(f))
        .collect();
    assert!(
        missing.is_empty(),
        "missing golden fixtures in events/tests/fixtures/ (one per type of \
         baton_events::upcast::known_types at its current schema): {missing:?}"
    );
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
