//! The open-loop scheduler shared by `steady` and `burst`: requests of each class start on
//! a fixed timetable (request `i` of a class at `start + i / rate`), whatever the server
//! does, and each latency is measured from that *intended* start to the end of the
//! answer's body. A stalled server therefore shows up as latency of every request that
//! should have started meanwhile, not as a lower request rate (no coordinated omission).
//! In-flight requests are capped; a request due while the cap is reached does not start
//! and counts as a `not_started` error. Prints progress once a second; every loop is
//! bounded by the timetable's length and the drain timeout.

use crate::stats::Progress;
use serde::Serialize;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// How often progress is printed.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// How often the drain checks for requests still in flight.
const DRAIN_POLL: Duration = Duration::from_millis(10);

/// One class of requests on the timetable (e.g. reads, writes).
#[derive(Debug, Clone)]
pub struct Class {
    /// Intended starts per second; 0 schedules nothing.
    pub per_sec: f64,
}

/// What to schedule.
#[derive(Debug, Clone)]
pub struct Plan {
    pub classes: Vec<Class>,
    /// Length of the timetable: no request is due after it.
    pub duration: Duration,
    /// Cap on requests in flight.
    pub max_in_flight: usize,
    /// Bound on waiting for the last requests once the timetable is over; at least the
    /// request timeout, so every started request ends within it.
    pub drain: Duration,
}

/// One due request.
#[derive(Debug, Clone, Copy)]
pub struct Slot {
    /// Index into [`Plan::classes`].
    pub class: usize,
    /// Position of the request in its class, from 0.
    pub seq: u64,
}

/// How a request ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// A 2xx answer.
    Ok,
    /// `409 run_busy`: the run was in a turn. Expected now and then; not an error.
    Busy,
    /// Anything else, by kind (`http_503_unavailable`, `timeout`, `not_started`, ...).
    Error(String),
}

/// One request's record.
#[derive(Debug, Clone)]
pub struct Sample {
    pub op: &'static str,
    /// The intended start, in ms after the timetable's start.
    pub at_ms: f64,
    /// Intended start -> end of the answer (or of the failure).
    pub latency: Duration,
    pub outcome: Outcome,
}

impl Sample {
    /// The intended end, in ms after the timetable's start.
    pub fn end_ms(&self) -> f64 {
        self.at_ms + self.latency.as_secs_f64() * 1e3
    }
}

/// What a timetable produced.
#[derive(Debug)]
pub struct Done {
    /// The wall clock at the timetable's start, to place server timestamps on the timetable.
    pub started_wall: chrono::DateTime<chrono::Utc>,
    pub samples: Vec<Sample>,
    /// Requests still in flight when the drain timed out (their samples are missing).
    pub undrained: usize,
    /// How far behind its timetable the scheduler itself fell at worst, in ms (the
    /// harness's own lag; a large value means the client machine was saturated).
    pub max_schedule_lag_ms: f64,
}

#[derive(Default)]
struct Counters {
    done: AtomicU64,
    ok: AtomicU64,
    busy: AtomicU64,
    errors: AtomicU64,
    /// Worst latency since the last progress line, in µs.
    worst_us: AtomicU64,
}

/// Runs the timetable of `plan` from `started` (now, or a moment other tasks align
/// with). For each due slot `fire` names the operation and gives the request as a future
/// returning its [`Outcome`]; the future runs on its own task. `fire` is called on the
/// scheduler's task for every slot, in time order, so it may keep round-robin state.
pub async fn drive<F, Fut>(
    plan: &Plan,
    started: Instant,
    label: &str,
    p: Progress,
    mut fire: F,
) -> Done
where
    F: FnMut(Slot) -> (&'static str, Fut),
    Fut: Future<Output = Outcome> + Send + 'static,
{
    let secs = plan.duration.as_secs_f64();
    // Per class: the interval between starts and the number of starts.
    let lanes: Vec<(Duration, u64)> = plan
        .classes
        .iter()
        .map(|c| {
            if c.per_sec > 0.0 {
                let n = (c.per_sec * secs).floor() as u64;
                (Duration::from_secs_f64(1.0 / c.per_sec), n)
            } else {
                (Duration::ZERO, 0)
            }
        })
        .collect();
    let mut next: Vec<u64> = vec![0; lanes.len()];
    let total: u64 = lanes.iter().map(|(_, n)| n).sum();
    let sem = Arc::new(Semaphore::new(plan.max_in_flight));
    let samples = Arc::new(Mutex::new(Vec::with_capacity(total as usize)));
    let counters = Arc::new(Counters::default());
    let started_wall = wall_at(started);
    let mut last_said = started;
    let mut max_lag = Duration::ZERO;

    for _ in 0..total {
        // The earliest due slot over all classes.
        let Some((class, intended)) = lanes
            .iter()
            .enumerate()
            .filter(|(c, (_, n))| next[*c] < *n)
            .map(|(c, (every, _))| (c, started + every.mul_f64(next[c] as f64)))
            .min_by_key(|(_, at)| *at)
        else {
            break;
        };
        let seq = next[class];
        next[class] += 1;
        tokio::time::sleep_until(intended.into()).await;
        max_lag = max_lag.max(intended.elapsed());
        let (op, request) = fire(Slot { class, seq });
        let at_ms = (intended - started).as_secs_f64() * 1e3;
        match sem.clone().try_acquire_owned() {
            Ok(permit) => {
                let (samples, counters) = (samples.clone(), counters.clone());
                tokio::spawn(async move {
                    let outcome = request.await;
                    let latency = intended.elapsed();
                    drop(permit);
                    record(&counters, &samples, op, at_ms, latency, outcome);
                });
            }
            Err(_) => {
                drop(request);
                let outcome = Outcome::Error("not_started".into());
                record(&counters, &samples, op, at_ms, Duration::ZERO, outcome);
            }
        }
        if last_said.elapsed() >= PROGRESS_EVERY {
            last_said = Instant::now();
            say(p, label, started, plan, &sem, &counters);
        }
    }

    // Every started request ends within its timeout; wait for them (bounded).
    let drain_until = Instant::now() + plan.drain;
    let mut undrained = 0;
    loop {
        let in_flight = plan.max_in_flight - sem.available_permits();
        if in_flight == 0 {
            break;
        }
        if Instant::now() >= drain_until {
            undrained = in_flight;
            break;
        }
        if last_said.elapsed() >= PROGRESS_EVERY {
            last_said = Instant::now();
            say(p, label, started, plan, &sem, &counters);
        }
        tokio::time::sleep(DRAIN_POLL).await;
    }
    say(p, label, started, plan, &sem, &counters);
    let samples = std::mem::take(&mut *samples.lock().unwrap_or_else(|e| e.into_inner()));
    Done {
        started_wall,
        samples,
        undrained,
        max_schedule_lag_ms: max_lag.as_secs_f64() * 1e3,
    }
}

/// The wall-clock time of `t`, to compare with timestamps servers record.
pub fn wall_at(t: Instant) -> chrono::DateTime<chrono::Utc> {
    let (now, wall) = (Instant::now(), chrono::Utc::now());
    let delta = |d: Duration| chrono::TimeDelta::from_std(d).unwrap_or_default();
    if t <= now {
        wall - delta(now - t)
    } else {
        wall + delta(t - now)
    }
}

fn record(
    counters: &Counters,
    samples: &Mutex<Vec<Sample>>,
    op: &'static str,
    at_ms: f64,
    latency: Duration,
    outcome: Outcome,
) {
    counters.done.fetch_add(1, Ordering::Relaxed);
    let which = match outcome {
        Outcome::Ok => &counters.ok,
        Outcome::Busy => &counters.busy,
        Outcome::Error(_) => &counters.errors,
    };
    which.fetch_add(1, Ordering::Relaxed);
    let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
    counters.worst_us.fetch_max(us, Ordering::Relaxed);
    // A poisoned lock only means another recorder panicked; the data is still whole.
    samples
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(Sample {
            op,
            at_ms,
            latency,
            outcome,
        });
}

fn say(p: Progress, label: &str, started: Instant, plan: &Plan, sem: &Semaphore, c: &Counters) {
    let worst = c.worst_us.swap(0, Ordering::Relaxed) as f64 / 1e3;
    p.say(format!(
        "{label}: t={:.0}/{:.0} s, done {} (ok {}, 409 busy {}, errors {}), in flight {}, \
         worst latency in the last second {worst:.1} ms",
        started.elapsed().as_secs_f64(),
        plan.duration.as_secs_f64(),
        c.done.load(Ordering::Relaxed),
        c.ok.load(Ordering::Relaxed),
        c.busy.load(Ordering::Relaxed),
        c.errors.load(Ordering::Relaxed),
        plan.max_in_flight - sem.available_permits(),
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn slots_follow_the_timetable_and_latency_counts_from_the_intended_start() {
        let plan = Plan {
            classes: vec![Class { per_sec: 100.0 }, Class { per_sec: 20.0 }],
            duration: Duration::from_millis(500),
            max_in_flight: 1000,
            drain: Duration::from_secs(5),
        };
        let mut seen = Vec::new();
        let done = drive(&plan, Instant::now(), "test", Progress::new(), |slot| {
            seen.push((slot.class, slot.seq));
            let op = if slot.class == 0 { "a" } else { "b" };
            (op, async {
                tokio::time::sleep(Duration::from_millis(20)).await;
                Outcome::Ok
            })
        })
        .await;
        assert_eq!(seen.iter().filter(|(c, _)| *c == 0).count(), 50);
        assert_eq!(seen.iter().filter(|(c, _)| *c == 1).count(), 10);
        assert_eq!(done.samples.len(), 60);
        assert_eq!(done.undrained, 0);
        assert!(
            done.samples
                .iter()
                .all(|s| s.latency >= Duration::from_millis(20))
        );
        let mut at: Vec<f64> = done.samples.iter().map(|s| s.at_ms).collect();
        at.sort_by(f64::total_cmp);
        assert!(at[0] < 1.0 && at[59] < 500.0, "{at:?}");
    }

    #[tokio::test]
    async fn requests_over_the_cap_count_as_not_started() {
        let plan = Plan {
            classes: vec![Class { per_sec: 200.0 }],
            duration: Duration::from_millis(200),
            max_in_flight: 2,
            drain: Duration::from_millis(100),
        };
        // Requests that never answer: the first two hold the cap for good.
        let done = drive(&plan, Instant::now(), "test", Progress::new(), |_| {
            ("a", std::future::pending::<Outcome>())
        })
        .await;
        assert_eq!(done.undrained, 2);
        let not_started = done
            .samples
            .iter()
            .filter(|s| s.outcome == Outcome::Error("not_started".into()))
            .count();
        assert_eq!(done.samples.len(), 38);
        assert_eq!(not_started, 38);
    }
}
