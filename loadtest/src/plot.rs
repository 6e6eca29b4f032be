//! The latency-over-time plot of the fault scenarios, as a small hand-written SVG: the
//! p99 latency of each operation per time window (log scale, from the intended starts of
//! the open-loop requests), the windows with errors as red dots on the time axis, and a
//! dashed vertical line at each fault (signal, restart). Pure: builds a string.

use crate::open_loop::{Outcome, Sample};
use crate::stats::Hdr;
use std::collections::BTreeMap;
use std::fmt::Write as _;

const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 440.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 170.0;
const TOP: f64 = 36.0;
const BOTTOM: f64 = 44.0;
const COLOURS: [&str; 8] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#17becf",
];

/// One line of the plot: (seconds, milliseconds) points.
#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// A vertical line at `t` seconds.
#[derive(Debug, Clone)]
pub struct Marker {
    pub t: f64,
    pub label: String,
}

/// Per operation, the p99 of the successful requests whose intended start falls in each
/// `window_ms` window (placed at the window's middle); and the windows with errors, as
/// (seconds, errors).
pub fn p99_windows(samples: &[Sample], window_ms: f64) -> (Vec<Series>, Vec<(f64, u64)>) {
    let mut hists: BTreeMap<&str, BTreeMap<u64, Hdr>> = BTreeMap::new();
    let mut errors: BTreeMap<u64, u64> = BTreeMap::new();
    for s in samples {
        let w = (s.at_ms / window_ms).max(0.0) as u64;
        match s.outcome {
            Outcome::Ok => hists
                .entry(s.op)
                .or_default()
                .entry(w)
                .or_default()
                .record(s.latency),
            Outcome::Busy => {}
            Outcome::Error(_) => *errors.entry(w).or_default() += 1,
        }
    }
    let mid = |w: u64| (w as f64 + 0.5) * window_ms / 1e3;
    let series = hists
        .into_iter()
        .map(|(op, windows)| Series {
            name: op.to_string(),
            points: windows
                .into_iter()
                .map(|(w, h)| (mid(w), h.percentiles().p99_ms))
                .collect(),
        })
        .collect();
    (
        series,
        errors.into_iter().map(|(w, n)| (mid(w), n)).collect(),
    )
}

/// The SVG document: `series` over `0..=span_secs`, `errors` as dots, `markers` as lines.
pub fn svg(
    title: &str,
    series: &[Series],
    errors: &[(f64, u64)],
    markers: &[Marker],
    span_secs: f64,
) -> String {
    let span = if span_secs > 0.0 { span_secs } else { 1.0 };
    let values = series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
    let (lo, hi) = values.fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
    // Decades that hold every value, at least 1 ms .. 1 s.
    let lo_dec = if lo < f64::MAX {
        lo.max(0.01).log10().floor().min(0.0)
    } else {
        0.0
    };
    let hi_dec = if hi > f64::MIN {
        hi.max(1.0).log10().ceil().max(3.0)
    } else {
        3.0
    };
    let (pw, ph) = (WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM);
    let x = |t: f64| LEFT + (t / span).clamp(0.0, 1.0) * pw;
    let y = |ms: f64| {
        let f = (ms.max(1e-3).log10() - lo_dec) / (hi_dec - lo_dec);
        TOP + (1.0 - f.clamp(0.0, 1.0)) * ph
    };
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="11">
<title>{}</title>
<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="white"/>
<text x="{LEFT}" y="20" font-size="13">{}</text>
"#,
        esc(title),
        esc(title)
    );
    // Axes, decades and seconds.
    let _ = writeln!(
        s,
        r##"<g class="axes" stroke="#444" fill="none"><rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}"/></g>"##
    );
    let mut dec = lo_dec;
    while dec <= hi_dec + 1e-9 {
        let ms = 10f64.powf(dec);
        let yy = y(ms);
        let _ = writeln!(
            s,
            r##"<line class="grid" x1="{LEFT}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            LEFT + pw,
            LEFT - 6.0,
            yy + 4.0,
            esc(&ms_label(ms))
        );
        dec += 1.0;
    }
    let step = nice_step(span);
    let mut t = 0.0;
    while t <= span + 1e-9 {
        let xx = x(t);
        let _ = writeln!(
            s,
            r##"<line x1="{xx:.1}" y1="{:.1}" x2="{xx:.1}" y2="{:.1}" stroke="#444"/><text x="{xx:.1}" y="{:.1}" text-anchor="middle">{t:.0}</text>"##,
            TOP + ph,
            TOP + ph + 4.0,
            TOP + ph + 16.0
        );
        t += step;
    }
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">seconds</text><text x="14" y="{:.1}" transform="rotate(-90 14 {:.1})" text-anchor="middle">p99 latency (ms, log)</text>"#,
        LEFT + pw / 2.0,
        HEIGHT - 8.0,
        TOP + ph / 2.0,
        TOP + ph / 2.0
    );
    // Labels run down from the plot's top edge, right of their line: never over the title.
    for m in markers {
        let xx = x(m.t);
        let _ = writeln!(
            s,
            r##"<g class="marker"><line x1="{xx:.1}" y1="{TOP}" x2="{xx:.1}" y2="{:.1}" stroke="#d62728" stroke-dasharray="4 3"/><text x="{:.1}" y="{:.1}" fill="#d62728" font-size="10" text-anchor="end" transform="rotate(-90 {:.1} {:.1})">{}</text></g>"##,
            TOP + ph,
            xx + 11.0,
            TOP + 4.0,
            xx + 11.0,
            TOP + 4.0,
            esc(&m.label)
        );
    }
    for (i, se) in series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let points: Vec<String> = se
            .points
            .iter()
            .map(|(t, ms)| format!("{:.1},{:.1}", x(*t), y(*ms)))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline class="series" data-series="{}" fill="none" stroke="{colour}" stroke-width="1.5" points="{}"/>"#,
            esc(&se.name),
            points.join(" ")
        );
        let ly = TOP + 10.0 + i as f64 * 16.0;
        let _ = writeln!(
            s,
            r#"<line x1="{:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{colour}" stroke-width="2"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            LEFT + pw + 12.0,
            LEFT + pw + 32.0,
            LEFT + pw + 38.0,
            ly + 4.0,
            esc(&se.name)
        );
    }
    if !errors.is_empty() {
        let ly = TOP + 10.0 + series.len() as f64 * 16.0;
        let _ = writeln!(
            s,
            r##"<circle cx="{:.1}" cy="{ly:.1}" r="3" fill="#d62728"/><text x="{:.1}" y="{:.1}">errors</text>"##,
            LEFT + pw + 22.0,
            LEFT + pw + 38.0,
            ly + 4.0
        );
    }
    for (t, n) in errors {
        let _ = writeln!(
            s,
            r##"<circle class="error" cx="{:.1}" cy="{:.1}" r="3" fill="#d62728"><title>{n} errors</title></circle>"##,
            x(*t),
            TOP + ph - 4.0
        );
    }
    s.push_str("</svg>\n");
    s
}

/// A tick step giving about 10 ticks over `span` seconds.
fn nice_step(span: f64) -> f64 {
    let raw = span / 10.0;
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag)
}

fn ms_label(ms: f64) -> String {
    if ms >= 1000.0 {
        format!("{} s", ms / 1000.0)
    } else {
        format!("{ms} ms")
    }
}

/// Escapes text for XML content and attribute values.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests;
