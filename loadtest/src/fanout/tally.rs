//! Adding up what the `fanout` subscribers saw (integrity counts, latency histograms,
//! one failure line per subscriber that did not get exactly its run's versions) and the
//! replicas' memory readings. Pure arithmetic over what was collected.

use super::subscriber::Got;
use crate::stats::Hdr;
use serde::Serialize;
use std::collections::BTreeMap;

/// Memory of one replica, from `/proc`.
#[derive(Debug, Clone, Serialize)]
pub struct Memory {
    pub replica: String,
    pub connections: usize,
    pub rss_before_bytes: u64,
    /// Once every subscriber's stream was open.
    pub rss_connected_bytes: u64,
    pub rss_after_load_bytes: u64,
    /// (connected - before) / connections.
    pub bytes_per_connection: f64,
}

/// Integrity of what the subscribers saw.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Checks {
    pub events_received: u64,
    pub gaps: u64,
    pub repeats: u64,
    /// Versions up to their run's last never received.
    pub missing: i64,
    pub malformed: u64,
    /// Streams reopened after the first (a replica closing a slow subscriber, an idle or
    /// broken stream).
    pub reopens: u64,
    pub unfinished: usize,
    pub cuts: BTreeMap<String, u64>,
    pub runs_checked: usize,
}

/// The subscribers added up.
pub struct Tally {
    pub checks: Checks,
    pub all: Hdr,
    pub cross: Hdr,
    pub same: Hdr,
    /// Bytes of event data received.
    pub data_bytes: u64,
    pub failures: Vec<String>,
}

/// Adds up the subscribers; `finals` is each run's last version once settled.
pub fn subscribers(got: &[Got], finals: &BTreeMap<uuid::Uuid, i64>) -> Tally {
    let mut t = Tally {
        checks: Checks::default(),
        all: Hdr::new(),
        cross: Hdr::new(),
        same: Hdr::new(),
        data_bytes: 0,
        failures: Vec::new(),
    };
    let c = &mut t.checks;
    for g in got {
        let last = finals.get(&g.seat.run).copied().unwrap_or(0);
        c.events_received += g.watched.check.seen;
        c.gaps += g.watched.check.gaps;
        c.repeats += g.watched.check.repeats;
        c.missing += g.watched.check.missing_up_to(last);
        c.malformed += g.watched.malformed;
        c.reopens += g.watched.resumes;
        c.unfinished += usize::from(!g.watched.finished);
        for (k, v) in &g.watched.cuts {
            *c.cuts.entry(k.clone()).or_default() += v;
        }
        if !g.watched.check.exactly(last) {
            t.failures.push(format!(
                "{} on replica {}: expected versions 1..={last}, got {:?}",
                g.seat.run, g.seat.replica, g.watched.check
            ));
        }
        t.data_bytes += g.data_bytes;
        t.all.add(&g.cross);
        t.all.add(&g.same);
        t.cross.add(&g.cross);
        t.same.add(&g.same);
    }
    t
}

/// Per replica with subscribers (`by_replica`), its RSS readings; replicas without all
/// three readings are left out.
pub fn memory(
    by_replica: &[usize],
    before: &[Option<u64>],
    connected: &[Option<u64>],
    after: &[Option<u64>],
) -> Vec<Memory> {
    let mut memory = Vec::new();
    for (i, &connections) in by_replica.iter().enumerate().filter(|(_, n)| **n > 0) {
        let at = |v: &[Option<u64>]| v.get(i).copied().flatten();
        if let (Some(b), Some(c), Some(a)) = (at(before), at(connected), at(after)) {
            memory.push(Memory {
                replica: format!("replica-{i}"),
                connections,
                rss_before_bytes: b,
                rss_connected_bytes: c,
                rss_after_load_bytes: a,
                bytes_per_connection: (c as f64 - b as f64) / connections as f64,
            });
        }
    }
    memory
}

/// The RSS growth of every replica in `memory` over all their streams; `None` when empty.
pub fn per_connection(memory: &[Memory]) -> Option<f64> {
    let streams: usize = memory.iter().map(|m| m.connections).sum();
    (streams > 0).then(|| {
        let grown: f64 = memory
            .iter()
            .map(|m| m.rss_connected_bytes as f64 - m.rss_before_bytes as f64)
            .sum();
        grown / streams as f64
    })
}
