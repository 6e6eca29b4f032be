//! What the open-loop scenarios report: per operation, the requests scheduled, how they
//! ended and the latency percentiles of the successful ones (from the intended start);
//! errors by kind; latency second by second (where stalls show); the Markdown of it all;
//! and writing `<scenario>-<time>.json` and `.md` under the output directory.

use crate::open_loop::{Outcome, Sample};
use crate::stats::{Hdr, Percentiles};
use anyhow::Context;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// How the requests of one operation went.
#[derive(Debug, Clone, Default, Serialize)]
pub struct OpReport {
    /// Requests due on the timetable (started or not).
    pub scheduled: u64,
    pub ok: u64,
    /// `409 run_busy` answers.
    pub busy: u64,
    pub errors: u64,
    /// Successful requests per second of the measured window.
    pub ok_per_sec: f64,
    /// Latency of the successful requests, from their intended start.
    pub latency: Percentiles,
}

/// Per-operation reports over the samples `keep` accepts, as rates over `secs`, and the
/// errors by `op: kind`.
pub fn summarise(
    samples: &[Sample],
    secs: f64,
    keep: impl Fn(&Sample) -> bool,
) -> (BTreeMap<String, OpReport>, BTreeMap<String, u64>) {
    summarise_by(samples, secs, keep, |s| s.op)
}

/// Like [`summarise`], grouped by `group` instead of by operation.
pub fn summarise_by(
    samples: &[Sample],
    secs: f64,
    keep: impl Fn(&Sample) -> bool,
    group: impl Fn(&Sample) -> &'static str,
) -> (BTreeMap<String, OpReport>, BTreeMap<String, u64>) {
    let mut hists: BTreeMap<&str, Hdr> = BTreeMap::new();
    let mut ops: BTreeMap<String, OpReport> = BTreeMap::new();
    let mut errors: BTreeMap<String, u64> = BTreeMap::new();
    for s in samples.iter().filter(|s| keep(s)) {
        let name = group(s);
        let r = ops.entry(name.to_string()).or_default();
        r.scheduled += 1;
        match &s.outcome {
            Outcome::Ok => {
                r.ok += 1;
                hists.entry(name).or_default().record(s.latency);
            }
            Outcome::Busy => r.busy += 1,
            Outcome::Error(kind) => {
                r.errors += 1;
                *errors.entry(format!("{}: {kind}", s.op)).or_default() += 1;
            }
        }
    }
    for (name, r) in ops.iter_mut() {
        r.ok_per_sec = if secs > 0.0 { r.ok as f64 / secs } else { 0.0 };
        if let Some(h) = hists.get(name.as_str()) {
            r.latency = h.percentiles();
        }
    }
    (ops, errors)
}

/// The Markdown table of `ops`, each operation followed by its group's label (e.g. a
/// window name) when it has one.
pub fn md_table(rows: &[(String, &BTreeMap<String, OpReport>)]) -> String {
    let mut md = String::from(
        "| operation | ok/s | ok | 409 busy | errors | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for (label, ops) in rows {
        for (op, r) in ops.iter() {
            let name = if label.is_empty() {
                op.clone()
            } else {
                format!("{op} ({label})")
            };
            let l = &r.latency;
            md.push_str(&format!(
                "| {name} | {:.1} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |\n",
                r.ok_per_sec,
                r.ok,
                r.busy,
                r.errors,
                l.p50_ms,
                l.p90_ms,
                l.p99_ms,
                l.p999_ms,
                l.max_ms
            ));
        }
    }
    md
}

/// One second of the timetable, all operations together.
#[derive(Debug, Clone, Serialize)]
pub struct Second {
    /// Seconds from the timetable's start (requests whose intended start falls in it).
    pub t: u64,
    pub ok: u64,
    pub busy: u64,
    pub errors: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

/// Latency second by second over every operation, from the intended starts.
pub fn timeline(samples: &[Sample]) -> Vec<Second> {
    let mut secs: BTreeMap<u64, (Hdr, u64, u64)> = BTreeMap::new();
    for s in samples {
        let e = secs.entry((s.at_ms / 1e3) as u64).or_default();
        match s.outcome {
            Outcome::Ok => e.0.record(s.latency),
            Outcome::Busy => e.1 += 1,
            Outcome::Error(_) => e.2 += 1,
        }
    }
    secs.into_iter()
        .map(|(t, (h, busy, errors))| {
            let p = h.percentiles();
            Second {
                t,
                ok: p.count,
                busy,
                errors,
                p50_ms: p.p50_ms,
                p99_ms: p.p99_ms,
                max_ms: p.max_ms,
            }
        })
        .collect()
}

/// The `n` seconds with the highest p99, as one Markdown line.
pub fn md_slowest(timeline: &[Second], n: usize) -> String {
    let mut worst: Vec<&Second> = timeline.iter().collect();
    worst.sort_by(|a, b| b.p99_ms.total_cmp(&a.p99_ms));
    let items: Vec<String> = worst
        .iter()
        .take(n)
        .map(|s| {
            format!(
                "t={} s p99 {:.1} ms, max {:.1} ms ({} ok, {} errors)",
                s.t, s.p99_ms, s.max_ms, s.ok, s.errors
            )
        })
        .collect();
    format!("Slowest seconds: {}.\n", items.join("; "))
}

/// The Markdown list of errors by kind, or a line saying there were none.
pub fn md_errors(errors: &BTreeMap<String, u64>) -> String {
    if errors.is_empty() {
        return "No errors.\n".to_string();
    }
    let mut md = String::from("Errors by kind:\n");
    for (kind, n) in errors {
        md.push_str(&format!("- {kind}: {n}\n"));
    }
    md
}

/// Writes `<name>-<time>.json` and `.md` under `out`; returns the path without extension.
pub fn write(
    out: &Path,
    name: &str,
    json: &serde_json::Value,
    md: &str,
) -> anyhow::Result<PathBuf> {
    let base = base(out, name)?;
    write_at(&base, json, md)?;
    Ok(base)
}

/// `<out>/<name>-<time>`, the path of the reports without extension (for files that go
/// beside them, such as a plot); creates `out`.
pub fn base(out: &Path, name: &str) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%SZ");
    Ok(out.join(format!("{name}-{stamp}")))
}

/// Writes `<base>.json` and `<base>.md`.
pub fn write_at(base: &Path, json: &serde_json::Value, md: &str) -> anyhow::Result<()> {
    let json_path = base.with_extension("json");
    std::fs::write(&json_path, serde_json::to_string_pretty(json)?)
        .with_context(|| format!("cannot write {}", json_path.display()))?;
    let md_path = base.with_extension("md");
    std::fs::write(&md_path, md).with_context(|| format!("cannot write {}", md_path.display()))?;
    eprintln!("reports: {}.json and .md", base.display());
    Ok(())
}

/// The fields every report starts with.
pub fn header(scenario: &str, about: &impl Serialize) -> anyhow::Result<serde_json::Value> {
    Ok(serde_json::json!({
        "scenario": scenario,
        "started_at": chrono::Utc::now().to_rfc3339(),
        "cores": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "target": serde_json::to_value(about)?,
    }))
}
