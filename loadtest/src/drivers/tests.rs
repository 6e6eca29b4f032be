use super::*;

fn receipt(result: Option<&str>, uncertain: bool, resolved: bool) -> Receipt {
    Receipt {
        result: result.map(str::to_string),
        uncertain,
        resolved,
    }
}

fn keys(k: &[&str]) -> Vec<Option<String>> {
    k.iter().map(|k| Some(k.to_string())).collect()
}

#[test]
fn one_call_per_receipt_is_clean() {
    let r = HashMap::from([
        ("a".to_string(), receipt(Some("ok"), false, false)),
        ("b".to_string(), receipt(None, true, true)),
    ]);
    // `b` was called once and its answer lost with the replica: held, then resolved.
    let m = mutations(&r, 2, &keys(&["a"]));
    assert_eq!(
        (m.duplicated, m.without_intent, m.unfinished, m.failed),
        (0, 0, 0, 0)
    );
    assert_eq!((m.ok, m.uncertain, m.resolved), (1, 1, 1));
}

#[test]
fn a_key_called_twice_is_a_duplicate() {
    let r = HashMap::from([("a".to_string(), receipt(Some("ok"), false, false))]);
    let m = mutations(&r, 2, &keys(&["a", "a"]));
    assert_eq!(m.duplicated, 1);
}

#[test]
fn more_calls_than_receipts_is_a_duplicate_even_when_unanswered() {
    let r = HashMap::from([("a".to_string(), receipt(Some("ok"), false, false))]);
    // The first call was abandoned before it was answered, the second answered.
    let m = mutations(&r, 2, &keys(&["a"]));
    assert_eq!(m.duplicated, 1);
}

#[test]
fn a_call_without_a_receipt_and_a_receipt_without_an_outcome_are_counted() {
    let r = HashMap::from([("a".to_string(), receipt(None, false, false))]);
    let m = mutations(&r, 1, &[Some("zzz".to_string())]);
    assert_eq!((m.without_intent, m.unfinished), (1, 1));
    let failed = HashMap::from([("a".to_string(), receipt(Some("error"), false, false))]);
    assert_eq!(mutations(&failed, 1, &keys(&["a"])).failed, 1);
}

#[test]
fn writes_find_lost_duplicated_and_unexpected_messages() {
    let stored = |s: &[&str]| s.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        writes(&[0, 1, 2], &stored(&["w0", "w1", "w2"])),
        Writes {
            accepted: 3,
            ..Writes::default()
        }
    );
    let w = writes(&[0, 1, 2], &stored(&["w0", "w2", "w2", "w7"]));
    assert_eq!((w.lost, w.duplicated, w.unexpected), (1, 1, 1));
}
