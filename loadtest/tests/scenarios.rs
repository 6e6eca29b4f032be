//! Short runs of the `steady`, `burst`, `append`, `rolling-upgrade`, `chaos`, `fanout`
//! and `lifecycle` scenarios
//! (`--smoke`, a few seconds of load each) against a cluster the harness spawns on the
//! test Postgres (`BATON_TEST_DATABASE_URL`, else 127.0.0.1:5432 as `postgres`) and the
//! local NATS (`BATON_TEST_NATS_URL`, else 127.0.0.1:4222). Each must exit 0 and write a
//! report whose figures are sane: operations completed, percentiles in order, no
//! invariant failure (for the fault scenarios: no SSE gap, no duplicated mutation, no
//! lost event; for `fanout`: no gap, repeat or missing version at any subscriber), and
//! the latency plot it links. Nothing here asserts on speed.

use anyhow::Context;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Bound on one scenario run, setup and checks included.
const RUN_TIMEOUT: Duration = Duration::from_secs(180);

/// The `baton` binary of the same profile as this test, built first if missing (it
/// belongs to another package, so cargo does not build it for these tests).
fn baton() -> anyhow::Result<PathBuf> {
    let harness = PathBuf::from(env!("CARGO_BIN_EXE_baton-loadtest"));
    let bin = harness.with_file_name("baton");
    if bin.exists() {
        return Ok(bin);
    }
    let release = harness.parent().is_some_and(|d| d.ends_with("release"));
    eprintln!("building {} for the scenario tests", bin.display());
    let mut cargo = Command::new(env!("CARGO"));
    cargo.args(["build", "--bin", "baton", "-p", "baton-server"]);
    if release {
        cargo.arg("--release");
    }
    let status = cargo.status().context("cannot run cargo")?;
    anyhow::ensure!(status.success() && bin.exists(), "building baton failed");
    Ok(bin)
}

/// Runs `baton-loadtest <args> --baton BIN --out DIR` and returns the JSON report it
/// wrote; fails unless it exits 0 within [`RUN_TIMEOUT`].
fn scenario(name: &str, args: &[&str]) -> anyhow::Result<Value> {
    let out = tempfile::tempdir()?;
    let bin = baton()?;
    let mut child = Command::new(env!("CARGO_BIN_EXE_baton-loadtest"))
        .arg(name)
        .args(args)
        .arg("--baton")
        .arg(&bin)
        .arg("--out")
        .arg(out.path())
        .spawn()
        .context("cannot start baton-loadtest")?;
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if started.elapsed() > RUN_TIMEOUT {
            child.kill().ok();
            child.wait().ok();
            anyhow::bail!("{name} ran over {RUN_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    anyhow::ensure!(status.success(), "{name} exited with {status}");
    report(out.path(), name)
}

/// The one `<name>-*.json` report in `dir`, next to its `.md`.
fn report(dir: &Path, name: &str) -> anyhow::Result<Value> {
    let mut json = Vec::new();
    let mut md = 0;
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let file = path
            .file_name()
            .and_then(|f| f.to_str())
            .unwrap_or_default();
        if file.starts_with(&format!("{name}-")) {
            match path.extension().and_then(|e| e.to_str()) {
                Some("json") => json.push(path.clone()),
                Some("md") => md += 1,
                _ => {}
            }
        }
    }
    anyhow::ensure!(json.len() == 1 && md == 1, "expected one report in {dir:?}");
    let text = std::fs::read_to_string(&json[0])?;
    let report: Value = serde_json::from_str(&text)?;
    if let Some(plot) = report["plot"].as_str() {
        let svg = std::fs::read_to_string(dir.join(plot)).context("the plot beside the report")?;
        anyhow::ensure!(
            svg.starts_with("<?xml") && svg.trim_end().ends_with("</svg>"),
            "{plot} is not an SVG document"
        );
        let md = std::fs::read_to_string(json[0].with_extension("md"))?;
        anyhow::ensure!(
            md.contains(&format!("]({plot})")),
            "the Markdown links {plot}"
        );
    }
    Ok(report)
}

/// The percentiles of a latency summary are ordered and positive when it has samples.
fn assert_ordered(what: &str, l: &Value) {
    let f = |k: &str| l[k].as_f64().unwrap_or(f64::NAN);
    let qs = [
        f("p50_ms"),
        f("p90_ms"),
        f("p99_ms"),
        f("p999_ms"),
        f("max_ms"),
    ];
    assert!(
        l["count"].as_u64().unwrap_or(0) > 0,
        "{what}: no samples: {l}"
    );
    assert!(qs[0] > 0.0, "{what}: {l}");
    assert!(
        qs.windows(2).all(|w| w[0] <= w[1]),
        "{what}: not ordered: {l}"
    );
}

#[test]
fn steady_smoke_completes_every_operation_and_keeps_the_invariants() -> anyhow::Result<()> {
    let r = scenario("steady", &["--smoke"])?;
    assert_eq!(r["scenario"], "steady");
    let ops = r["ops"].as_object().context("ops")?;
    for op in [
        "get_run",
        "list_messages",
        "events_page",
        "post_message",
        "create_run",
    ] {
        let o = &ops[op];
        assert!(o["ok"].as_u64().unwrap_or(0) > 0, "{op}: {o}");
        assert!(o["ok_per_sec"].as_f64().unwrap_or(0.0) > 0.0, "{op}: {o}");
        assert_ordered(op, &o["latency"]);
    }
    assert!(
        r["checked"]["runs_checked"].as_u64().unwrap_or(0) >= 20,
        "{r}"
    );
    assert_eq!(r["checked"]["failures"], serde_json::json!([]), "{r}");
    Ok(())
}

#[test]
fn burst_smoke_sees_its_bursts_and_keeps_the_invariants() -> anyhow::Result<()> {
    let r = scenario("burst", &["--smoke"])?;
    let bursts = r["bursts"]["each"].as_array().context("bursts")?;
    assert_eq!(bursts.len(), 2, "{r}");
    for b in bursts {
        assert!(b["turns_completed"].as_u64().unwrap_or(0) > 0, "{b}");
    }
    let between = r["classes"]["between"].as_object().context("between")?;
    assert!(
        between.values().any(|o| o["ok"].as_u64().unwrap_or(0) > 0),
        "{r}"
    );
    assert_eq!(r["checked"]["failures"], serde_json::json!([]), "{r}");
    Ok(())
}

#[test]
fn append_smoke_measures_every_path_with_a_ratio_to_raw() -> anyhow::Result<()> {
    let r = scenario("append", &["--smoke"])?;
    let phases = r["phases"].as_array().context("phases")?;
    let paths: Vec<(&str, &str)> = phases
        .iter()
        .map(|p| {
            (
                p["shape"].as_str().unwrap_or_default(),
                p["path"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    for want in [
        ("create", "raw"),
        ("create", "store"),
        ("create", "api"),
        ("message", "raw"),
        ("message", "store"),
        ("message", "api post_message"),
    ] {
        assert!(paths.contains(&want), "{want:?} missing: {paths:?}");
    }
    for p in phases {
        assert!(p["ok"].as_u64().unwrap_or(0) > 0, "{p}");
        assert_ordered(p["path"].as_str().unwrap_or_default(), &p["latency"]);
        if p["path"] != "api post_message" {
            assert!(p["ratio_to_raw"].as_f64().unwrap_or(0.0) > 0.0, "{p}");
        }
    }
    assert_eq!(r["failures"], serde_json::json!([]), "{r}");
    Ok(())
}

#[test]
fn lifecycle_smoke_completes_runs_in_both_tiers_and_costs_them() -> anyhow::Result<()> {
    let r = scenario("lifecycle", &["--smoke"])?;
    let measured = r["measured"].as_array().context("measured")?;
    let seen: Vec<(&str, u64)> = measured
        .iter()
        .map(|m| {
            (
                m["tier"].as_str().unwrap_or_default(),
                m["clients"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [("team", 1), ("team", 4), ("embedded", 1), ("embedded", 4)],
        "{r}"
    );
    for m in measured {
        assert!(m["runs"].as_u64().unwrap_or(0) > 0, "{m}");
        assert_ordered(m["tier"].as_str().unwrap_or_default(), &m["latency"]);
        // Every process that did the work spent some CPU on it, and the machine's cost
        // is at least the server's.
        let cpu = &m["cpu_ms_per_run"];
        let server = cpu["server"].as_f64().unwrap_or(0.0);
        assert!(server > 0.0, "{m}");
        assert!(cpu["machine"].as_f64().unwrap_or(0.0) >= server, "{m}");
        if m["tier"] == "team" {
            assert!(cpu["postgres"].as_f64().unwrap_or(0.0) > 0.0, "{m}");
        }
        // A run wakes the server's threads: its switches are counted.
        assert!(
            m["server_switches_per_run"].as_f64().unwrap_or(0.0) > 0.0,
            "{m}"
        );
    }
    assert_eq!(r["failures"], serde_json::json!([]), "{r}");
    Ok(())
}

/// What both fault scenarios must show: every invariant at zero, mutations made and
/// streamed, every watcher at its run's last version, and the plot.
fn assert_fault_invariants_hold(r: &Value) {
    for k in [
        "sse_gaps",
        "sse_repeats",
        "sse_missing",
        "duplicated_mutations",
        "duplicated_writes",
        "lost_events",
        "other_failures",
    ] {
        assert_eq!(r["invariants"][k], 0, "{k}: {}", r["invariants"]);
    }
    assert_eq!(r["failures"], serde_json::json!([]), "{r}");
    let m = &r["mutations"];
    assert!(m["calls"].as_u64().unwrap_or(0) > 0, "{m}");
    // At most one call per receipt. A replica killed or paused after committing an
    // intent and before sending it makes no call: that receipt must be held uncertain
    // (never reported `ok`), so a member decides.
    let (calls, intents) = (
        m["calls"].as_u64().unwrap_or(u64::MAX),
        m["intents"].as_u64().unwrap_or(0),
    );
    assert!(calls <= intents, "one call per receipt at most: {m}");
    assert!(
        intents - calls <= m["uncertain"].as_u64().unwrap_or(0),
        "an intent never sent is held uncertain: {m}"
    );
    let sse = &r["sse"];
    assert!(sse["events"].as_u64().unwrap_or(0) > 0, "{sse}");
    assert_eq!(sse["finished"], sse["watchers"], "{sse}");
    let active = &r["active"];
    assert!(
        active["turns_accepted"].as_u64().unwrap_or(0) > active["runs"].as_u64().unwrap_or(0),
        "every run took more than its first turn: {active}"
    );
    assert!(
        r["ops"]["get_run"]["ok"].as_u64().unwrap_or(0) > 0,
        "{}",
        r["ops"]
    );
    assert!(
        r["plot"].as_str().is_some_and(|p| p.ends_with(".svg")),
        "{r}"
    );
}

#[test]
fn rolling_upgrade_smoke_replaces_every_replica_without_gaps_duplicates_or_losses()
-> anyhow::Result<()> {
    let r = scenario("rolling-upgrade", &["--smoke"])?;
    assert_fault_invariants_hold(&r);
    let steps = r["fault"]["steps"].as_array().context("steps")?;
    assert_eq!(steps.len(), 3, "{r}");
    let mut held = 0;
    for s in steps {
        assert_eq!(s["exit_status"], "exit status: 0", "a clean drain: {s}");
        assert_eq!(s["taken_over"], s["held"], "{s}");
        held += s["held"].as_u64().unwrap_or(0);
    }
    assert_eq!(r["fault"]["handoff"]["count"], held, "{r}");
    // Every replica was replaced, so every watcher lost its stream at least once.
    let sse = &r["sse"];
    assert!(
        sse["resumes"].as_u64().unwrap_or(0) >= sse["watchers"].as_u64().unwrap_or(u64::MAX),
        "{sse}"
    );
    let markers = r["markers"].as_array().context("markers")?;
    assert!(
        markers.len() >= 6,
        "SIGTERM and restart of each replica: {markers:?}"
    );
    Ok(())
}

#[test]
fn chaos_smoke_kills_and_pauses_replicas_without_gaps_duplicates_or_losses() -> anyhow::Result<()> {
    let r = scenario("chaos", &["--smoke", "--seed", "7", "--kinds", "kill,stop"])?;
    assert_fault_invariants_hold(&r);
    assert_eq!(r["fault"]["seed"], 7);
    let cycles = r["fault"]["cycles"].as_array().context("cycles")?;
    assert_eq!(cycles.len(), 2, "{r}");
    let mut held = 0;
    for c in cycles {
        assert!(c["kind"] == "kill" || c["kind"] == "stop", "{c}");
        assert_eq!(c["adopted"], c["held"], "{c}");
        held += c["held"].as_u64().unwrap_or(0);
    }
    assert_eq!(r["fault"]["adoption"]["count"], held, "{r}");
    Ok(())
}

#[test]
fn fanout_smoke_delivers_every_version_to_every_subscriber_and_sizes_the_streams()
-> anyhow::Result<()> {
    let r = scenario("fanout", &["--smoke"])?;
    let o = &r["outcome"];
    let c = &o["checks"];
    for k in ["gaps", "repeats", "missing", "malformed", "unfinished"] {
        assert_eq!(c[k], 0, "{k}: {c}");
    }
    assert!(c["events_received"].as_u64().unwrap_or(0) > 0, "{c}");
    assert_eq!(c["runs_checked"], 4, "{c}");
    assert_eq!(r["failures"], serde_json::json!([]), "{r}");
    assert_eq!(
        o["subscribers_by_replica"],
        serde_json::json!([8, 8]),
        "{o}"
    );
    assert_ordered("delivery", &o["delivery"]);
    assert_ordered("cross_replica", &o["cross_replica"]);
    assert_ordered("same_replica", &o["same_replica"]);
    assert!(o["bytes_per_connection"].is_f64(), "{o}");
    assert_eq!(o["memory"].as_array().map(Vec::len), Some(2), "{o}");
    assert!(o["closed_slow"].is_u64(), "{o}");
    assert_ordered("raw_nats_quiet", &o["raw_nats_quiet"]["latency"]);
    Ok(())
}
