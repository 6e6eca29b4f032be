//! Where the machine's CPU went during a measurement, read from Linux's `/proc`: the
//! share of all cores busy (and how much of it was softirq, where loopback networking is
//! mostly accounted), the processes started meanwhile, the cores used by the harness
//! itself, by each `baton` replica it spawned and by every `postgres` and `nats-server`
//! process (all databases: the server is shared), and the busiest other programs. On a
//! shared machine this says whether a figure was limited by CPU and whose. Every process
//! is read twice a second from a helper thread, so one that lives half a second or more
//! is counted even if it ends before the measurement does. Elsewhere (no `/proc`) the
//! readings are empty.

use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Clock ticks per second of `/proc` CPU times (`USER_HZ`, 100 on Linux).
const TICKS_PER_SEC: f64 = 100.0;

/// Processes counted by name, besides the replicas and the harness.
const SERVICES: [&str; 2] = ["postgres", "nats-server"];

/// Other programs listed in a [`Usage`], the busiest first.
const OTHERS_LISTED: usize = 4;

/// How often every process is read.
const SAMPLE_EVERY: Duration = Duration::from_millis(500);

/// pid -> (program name, CPU ticks used so far).
type Procs = BTreeMap<u32, (String, u64)>;

/// A measurement under way: the counters at its start and the helper thread that keeps
/// the latest reading of every process.
#[derive(Debug)]
pub struct Snapshot {
    at: Instant,
    machine: Option<Machine>,
    first: Procs,
    /// The context switches of the watched processes (name, pid) at the start.
    switches: Vec<(String, u32, u64)>,
    latest: Arc<Mutex<Procs>>,
    stop: Arc<AtomicBool>,
    sampler: Option<std::thread::JoinHandle<()>>,
}

/// The machine-wide counters of `/proc/stat`.
#[derive(Debug, Clone, Copy)]
struct Machine {
    busy: u64,
    softirq: u64,
    total: u64,
    /// Processes created since boot.
    forks: u64,
}

/// What happened between a [`snapshot`] and [`since`].
#[derive(Debug, Clone, Default, Serialize)]
pub struct Usage {
    pub secs: f64,
    /// Share of all cores busy (anyone's work), in percent.
    pub machine_busy_pct: Option<f64>,
    /// Of which softirq (mostly network processing, loopback included), in percent.
    pub softirq_pct: Option<f64>,
    /// Processes started on the machine meanwhile (the harness starts none while it
    /// measures): a sign of other work, such as builds and test runs.
    pub processes_started: Option<u64>,
    /// Cores used on average, by who (`harness`, `replica-<i>`, `postgres`, `nats-server`).
    pub cores: BTreeMap<String, f64>,
    /// Cores used on average by the busiest other programs, by name.
    pub others: Vec<(String, f64)>,
    /// Context switches (voluntary or not, over all threads) of each watched process
    /// ([`snapshot_of`]) in the window: each is a thread put to sleep or taken off its
    /// core, and unlike CPU time they hardly vary with what else the machine does.
    pub context_switches: BTreeMap<String, u64>,
    /// The 1-minute load average at the end.
    pub loadavg_1m: Option<f64>,
}

impl Usage {
    /// A short line for the Markdown reports.
    pub fn md(&self) -> String {
        let list = |v: Vec<(&String, f64)>| {
            v.iter()
                .map(|(k, c)| format!("{k} {c:.2}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let opt = |v: Option<f64>, f: fn(f64) -> String| v.map_or("?".to_string(), f);
        format!(
            "CPU: machine {} busy ({} softirq), load average {}, {} processes started; \
             cores used: {}; others: {}",
            opt(self.machine_busy_pct, |p| format!("{p:.0}%")),
            opt(self.softirq_pct, |p| format!("{p:.0}%")),
            opt(self.loadavg_1m, |l| format!("{l:.2}")),
            self.processes_started
                .map_or("?".to_string(), |n| n.to_string()),
            list(self.cores.iter().map(|(k, c)| (k, *c)).collect()),
            list(self.others.iter().map(|(k, c)| (k, *c)).collect()),
        )
    }
}

/// The reports' "where the CPU went" list: one line per measurement that has a usage,
/// each headed by its label.
pub fn md_list<'a>(measured: impl IntoIterator<Item = (String, Option<&'a Usage>)>) -> String {
    let mut md = String::from("\nWhere the CPU went, per measurement:\n");
    for (label, usage) in measured {
        if let Some(u) = usage {
            md.push_str(&format!("- {label}: {}\n", u.md()));
        }
    }
    md
}

/// Starts a measurement now.
pub fn snapshot() -> Snapshot {
    snapshot_of(&[])
}

/// Starts a measurement now that also counts the context switches of `watched` (name,
/// pid).
pub fn snapshot_of(watched: &[(String, u32)]) -> Snapshot {
    let switches = watched
        .iter()
        .filter_map(|(name, pid)| Some((name.clone(), *pid, context_switches(*pid)?)))
        .collect();
    let first = processes();
    let latest = Arc::new(Mutex::new(first.clone()));
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (latest, stop) = (latest.clone(), stop.clone());
        std::thread::Builder::new()
            .name("cpu-sampler".into())
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(SAMPLE_EVERY);
                    merge(&latest, processes());
                }
            })
            .ok()
    };
    Snapshot {
        at: Instant::now(),
        machine: machine(),
        first,
        switches,
        latest,
        stop,
        sampler,
    }
}

/// Keeps the newest reading of every process ever seen.
fn merge(latest: &Mutex<Procs>, now: Procs) {
    let mut l = latest.lock().unwrap_or_else(|e| e.into_inner());
    l.extend(now);
}

/// Ends the measurement: where the CPU went since `before`. `replicas` are (name, pid) of
/// the spawned replicas.
pub fn since(mut before: Snapshot, replicas: &[(String, u32)]) -> Usage {
    before.stop.store(true, Ordering::Relaxed);
    if let Some(t) = before.sampler.take() {
        // The thread only reads /proc; if it panicked its readings are still there.
        let _ = t.join();
    }
    merge(&before.latest, processes());
    let after = machine();
    let context_switches = before
        .switches
        .iter()
        .filter_map(|(name, pid, first)| {
            Some((name.clone(), context_switches(*pid)?.saturating_sub(*first)))
        })
        .collect();
    let secs = before.at.elapsed().as_secs_f64();
    let per_core = |ticks: u64| {
        let used = ticks as f64 / TICKS_PER_SEC;
        if secs > 0.0 { used / secs } else { 0.0 }
    };
    let own = std::process::id();
    let mut cores: BTreeMap<String, f64> = BTreeMap::new();
    let mut others: BTreeMap<String, f64> = BTreeMap::new();
    let latest = before.latest.lock().unwrap_or_else(|e| e.into_inner());
    for (pid, (name, t1)) in latest.iter() {
        // A process first seen after the start used all its ticks in the window.
        let t0 = before.first.get(pid).map_or(0, |(_, t)| *t);
        let used = per_core(t1.saturating_sub(t0));
        let who = if *pid == own {
            Some("harness".to_string())
        } else if let Some((r, _)) = replicas.iter().find(|(_, p)| p == pid) {
            Some(r.clone())
        } else if SERVICES.contains(&name.as_str()) {
            Some(name.clone())
        } else {
            None
        };
        match who {
            Some(w) => *cores.entry(w).or_default() += used,
            None if used > 0.0 => *others.entry(name.clone()).or_default() += used,
            None => {}
        }
    }
    let mut others: Vec<(String, f64)> = others.into_iter().collect();
    others.sort_by(|a, b| b.1.total_cmp(&a.1));
    others.truncate(OTHERS_LISTED);
    let share = |a: Machine, b: Machine, f: fn(&Machine) -> u64| {
        let total = b.total.saturating_sub(a.total);
        (total > 0).then(|| f(&b).saturating_sub(f(&a)) as f64 * 100.0 / total as f64)
    };
    let (a, b) = (before.machine, after);
    Usage {
        secs,
        machine_busy_pct: a.zip(b).and_then(|(a, b)| share(a, b, |m| m.busy)),
        softirq_pct: a.zip(b).and_then(|(a, b)| share(a, b, |m| m.softirq)),
        processes_started: a.zip(b).map(|(a, b)| b.forks.saturating_sub(a.forks)),
        cores,
        others,
        context_switches,
        loadavg_1m: loadavg(),
    }
}

/// The context switches of process `pid` so far, summed over its threads (a thread that
/// ended takes its count with it).
fn context_switches(pid: u32) -> Option<u64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut sum = 0;
    for task in tasks.flatten() {
        let Ok(status) = std::fs::read_to_string(task.path().join("status")) else {
            continue;
        };
        sum += status
            .lines()
            .filter(|l| l.contains("ctxt_switches:"))
            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .sum::<u64>();
    }
    Some(sum)
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The 1-minute load average.
pub fn loadavg() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// utime + stime of `/proc/<pid>/stat` (fields 14 and 15; the name in field 2 may hold
/// spaces, so fields are counted after its closing parenthesis).
fn proc_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3, so utime (14) and stime (15) are at 11 and 12.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// Every process now.
fn processes() -> Procs {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Procs::new();
    };
    let mut out = Procs::new();
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|p| p.parse().ok()) else {
            continue;
        };
        let Ok(comm) = std::fs::read_to_string(format!("/proc/{pid}/comm")) else {
            continue;
        };
        if let Some(t) = proc_ticks(pid) {
            out.insert(pid, (comm.trim().to_string(), t));
        }
    }
    out
}

/// The machine-wide counters of `/proc/stat`: all cores' ticks (idle and iowait are not
/// busy), softirq ticks and the fork count.
fn machine() -> Option<Machine> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let v: Vec<u64> = line
        .split_whitespace()
        .filter_map(|f| f.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is inside user).
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3)? + v.get(4).copied().unwrap_or(0);
    let forks = stat
        .lines()
        .find_map(|l| l.strip_prefix("processes "))
        .and_then(|n| n.trim().parse().ok())?;
    Some(Machine {
        busy: total.saturating_sub(idle),
        softirq: *v.get(6)?,
        total,
        forks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_harness_sees_its_own_cpu_time() {
        let before = snapshot();
        // Burn a little CPU so the counters move.
        let mut x = 0u64;
        let until = Instant::now() + Duration::from_millis(60);
        while Instant::now() < until {
            x = x.wrapping_mul(31).wrapping_add(7);
        }
        std::hint::black_box(x);
        let u = since(before, &[]);
        if std::path::Path::new("/proc/self/stat").exists() {
            assert!(u.cores.contains_key("harness"), "{u:?}");
            assert!(u.machine_busy_pct.is_some_and(|p| p > 0.0), "{u:?}");
            assert!(u.processes_started.is_some(), "{u:?}");
        }
    }
}
