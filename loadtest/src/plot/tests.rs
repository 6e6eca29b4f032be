use super::*;
use std::time::Duration;

/// Checks that `doc` is well-formed XML as far as this plot goes: one root, every element
/// closed in order, attributes quoted, no raw `<` or `&` in text. Returns the element
/// names in document order.
fn elements(doc: &str) -> Vec<String> {
    let body = doc
        .strip_prefix(r#"<?xml version="1.0" encoding="UTF-8"?>"#)
        .expect("an XML declaration")
        .trim();
    let mut open: Vec<String> = Vec::new();
    let mut names = Vec::new();
    let mut rest = body;
    let mut roots = 0;
    while let Some(lt) = rest.find('<') {
        let text = &rest[..lt];
        assert!(!text.contains('>'), "raw > in text: {text:?}");
        for (i, _) in text.match_indices('&') {
            let entity = &text[i..];
            assert!(
                ["&amp;", "&lt;", "&gt;", "&quot;"]
                    .iter()
                    .any(|e| entity.starts_with(e)),
                "bare & in {text:?}"
            );
        }
        let gt = rest[lt..].find('>').expect("an unclosed tag") + lt;
        let tag = &rest[lt + 1..gt];
        assert!(!tag.contains('<'), "< inside a tag: {tag:?}");
        assert_eq!(
            tag.matches('"').count() % 2,
            0,
            "unbalanced quotes: {tag:?}"
        );
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(
                open.pop().as_deref(),
                Some(name.trim()),
                "mismatched </{name}>"
            );
        } else {
            let name = tag
                .split_whitespace()
                .next()
                .expect("a tag name")
                .trim_end_matches('/')
                .to_string();
            if open.is_empty() {
                roots += 1;
            }
            names.push(name.clone());
            if !tag.ends_with('/') {
                open.push(name);
            }
        }
        rest = &rest[gt + 1..];
    }
    assert!(rest.trim().is_empty(), "text after the root: {rest:?}");
    assert!(open.is_empty(), "unclosed: {open:?}");
    assert_eq!(roots, 1, "one root element");
    names
}

fn sample(op: &'static str, at_ms: f64, ms: u64, outcome: Outcome) -> Sample {
    Sample {
        op,
        at_ms,
        latency: Duration::from_millis(ms),
        outcome,
    }
}

#[test]
fn the_plot_is_well_formed_svg_with_a_line_per_operation_and_a_line_per_marker() {
    let samples = vec![
        sample("get_run", 10.0, 3, Outcome::Ok),
        sample("get_run", 300.0, 5, Outcome::Ok),
        sample("get_run", 600.0, 2500, Outcome::Ok),
        sample("post_message", 20.0, 8, Outcome::Ok),
        sample("post_message", 400.0, 9, Outcome::Busy),
        sample("post_message", 520.0, 0, Outcome::Error("connect".into())),
    ];
    let (series, errors) = p99_windows(&samples, 250.0);
    assert_eq!(series.len(), 2);
    assert_eq!(series[0].name, "get_run");
    assert_eq!(series[0].points.len(), 3);
    assert_eq!(
        series[1].points.len(),
        1,
        "busy and errors are not latencies"
    );
    assert_eq!(errors, vec![(0.625, 1)]);
    let markers = vec![
        Marker {
            t: 0.3,
            label: "SIGTERM replica-0".into(),
        },
        Marker {
            t: 0.7,
            label: "start <replica-0> & ready".into(),
        },
    ];
    let doc = svg("rolling-upgrade \"smoke\"", &series, &errors, &markers, 1.0);
    let names = elements(&doc);
    assert_eq!(names[0], "svg");
    assert_eq!(names.iter().filter(|n| *n == "polyline").count(), 2);
    assert!(doc.contains(r#"data-series="get_run""#), "{doc}");
    assert!(doc.contains(r#"data-series="post_message""#), "{doc}");
    assert_eq!(doc.matches(r#"<g class="marker">"#).count(), 2);
    assert!(doc.contains("start &lt;replica-0&gt; &amp; ready"), "{doc}");
    assert_eq!(doc.matches(r#"class="error""#).count(), 1);
    // The 2.5 s window reaches the top decade: the axis goes up to 10 s.
    assert!(doc.contains(">10 s<"), "{doc}");
}

#[test]
fn an_empty_plot_is_still_well_formed() {
    let doc = svg("nothing", &[], &[], &[], 0.0);
    let names = elements(&doc);
    assert_eq!(names[0], "svg");
    assert!(!names.iter().any(|n| n == "polyline"));
}

#[test]
fn the_checker_rejects_broken_xml() {
    for broken in [
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><svg><g></svg>",
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><svg><text>a & b</text></svg>",
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><svg/><svg/>",
    ] {
        let r = std::panic::catch_unwind(|| elements(broken));
        assert!(r.is_err(), "accepted {broken}");
    }
}
