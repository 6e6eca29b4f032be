//! SSE watchers that outlive their replica: each follows one run's event stream on a
//! replica in rotation and, when the stream ends, breaks or stays silent for longer than
//! the idle bound (a stopped replica), resumes on another one with `Last-Event-ID` = the
//! last version it got. [`SeqCheck`] counts what a client must never see: a version
//! skipped (gap) or a version seen again (repeat). A watcher ends once it has the
//! version it is told is the run's last, or at its deadline.

use crate::target::Rotation;
use chrono::{DateTime, Utc};
use eventsource_stream::{Event, Eventsource};
use futures::StreamExt;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Bound on opening a stream (until the answer's headers).
const OPEN_TIMEOUT: Duration = Duration::from_secs(10);

/// Wait before resuming after a failed open.
const BACKOFF: Duration = Duration::from_millis(100);

/// The event name of the ephemeral frames carrying a model reply's pieces.
const DELTA: &str = "message.delta";

/// The most streams one watcher opens.
const MAX_OPENS: u64 = 10_000;

/// The versions one client received, in order of arrival.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct SeqCheck {
    /// Events received.
    pub seen: u64,
    /// The highest version received (0 before any).
    pub last: i64,
    /// Arrivals that skipped versions (each counts once, however many it skipped).
    pub gaps: u64,
    /// Versions skipped in all.
    pub skipped: i64,
    /// Arrivals of a version at or below one already received.
    pub repeats: u64,
}

impl SeqCheck {
    /// Records the arrival of `version`.
    pub fn push(&mut self, version: i64) {
        self.seen += 1;
        if version <= self.last {
            self.repeats += 1;
            return;
        }
        if version > self.last + 1 {
            self.gaps += 1;
            self.skipped += version - self.last - 1;
        }
        self.last = version;
    }

    /// Versions up to `n` (the run's last) never received at the end.
    pub fn missing_up_to(&self, n: i64) -> i64 {
        (n - self.last).max(0)
    }

    /// Whether the client saw exactly `1..=n`, each once.
    pub fn exactly(&self, n: i64) -> bool {
        self.gaps == 0 && self.repeats == 0 && self.last == n && self.seen == n as u64
    }
}

/// What one watcher saw.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Watched {
    pub run: uuid::Uuid,
    pub check: SeqCheck,
    /// Streams opened after the first (resumptions).
    pub resumes: u64,
    /// Why streams ended or could not be opened, by kind.
    pub cuts: BTreeMap<String, u64>,
    /// The longest time between losing a stream and the next event, in ms.
    pub longest_blind_ms: f64,
    /// Frames whose id or data was not an event.
    pub malformed: u64,
    /// Whether it reached the run's last version before its deadline.
    pub finished: bool,
}

/// Where a watcher connects and how.
#[derive(Clone)]
pub struct Setup {
    pub http: reqwest::Client,
    pub key: String,
    pub rotation: Rotation,
    /// A stream silent for this long is given up (a few SSE keep-alive intervals).
    pub idle: Duration,
    pub deadline: Instant,
}

/// Starts a watcher of `run`, first on rotation slot `home`; it ends once it received
/// the version `last` is set to (or at the deadline).
pub fn spawn(
    setup: Setup,
    run: uuid::Uuid,
    home: u64,
    last: watch::Receiver<Option<i64>>,
) -> tokio::task::JoinHandle<Watched> {
    tokio::spawn(follow(setup, run, home, last))
}

async fn follow(
    s: Setup,
    run: uuid::Uuid,
    home: u64,
    last: watch::Receiver<Option<i64>>,
) -> Watched {
    let stream = Stream {
        http: &s.http,
        key: &s.key,
        idle: s.idle,
        deadline: s.deadline,
    };
    let read = |ev: &Event, _: DateTime<Utc>| {
        ev.id.parse::<i64>().ok().filter(|v| {
            serde_json::from_str::<serde_json::Value>(&ev.data).is_ok_and(|d| d["version"] == *v)
        })
    };
    follow_stream(
        &stream,
        run,
        |attempt| s.rotation.pick(home + attempt),
        last,
        || {},
        read,
    )
    .await
}

/// How a follower reaches the replicas.
pub struct Stream<'a> {
    pub http: &'a reqwest::Client,
    pub key: &'a str,
    /// A stream silent for this long is given up.
    pub idle: Duration,
    pub deadline: Instant,
}

/// Follows `run`'s event stream until it has the version `last` is set to, or until the
/// deadline. The stream opens on the replica `base` names for the attempt (`None`: none
/// now) and, after every cut (end, break, silence past the idle bound, a failed open),
/// opens again with `Last-Event-ID` = the last version received. `opened` is told each
/// time a stream opens; `read` gets each event frame (comments, retry hints and deltas
/// are skipped) with its arrival time, before any parsing, and returns its version, or
/// `None` for a frame that is not a well-formed event (counted malformed).
pub async fn follow_stream(
    s: &Stream<'_>,
    run: uuid::Uuid,
    mut base: impl FnMut(u64) -> Option<String>,
    mut last: watch::Receiver<Option<i64>>,
    mut opened: impl FnMut(),
    mut read: impl FnMut(&Event, DateTime<Utc>) -> Option<i64>,
) -> Watched {
    let mut w = Watched {
        run,
        ..Watched::default()
    };
    let done = |w: &Watched, last: &watch::Receiver<Option<i64>>| {
        last.borrow().is_some_and(|n| w.check.last >= n)
    };
    let mut blind_since: Option<Instant> = None;
    for attempt in 0..MAX_OPENS {
        if done(&w, &last) || Instant::now() >= s.deadline {
            break;
        }
        if attempt > 0 {
            w.resumes += 1;
            blind_since.get_or_insert_with(Instant::now);
        }
        let Some(base) = base(attempt) else {
            cut(&mut w, "no_replica");
            tokio::time::sleep(BACKOFF).await;
            continue;
        };
        let mut req = s
            .http
            .get(format!("{base}/v1/runs/{run}/events"))
            .bearer_auth(s.key)
            .header("accept", "text/event-stream");
        if w.check.last > 0 {
            req = req.header("last-event-id", w.check.last.to_string());
        }
        let res = match tokio::time::timeout(OPEN_TIMEOUT, req.send()).await {
            Err(_) => {
                cut(&mut w, "open_timeout");
                continue;
            }
            Ok(Err(e)) => {
                cut(
                    &mut w,
                    if e.is_connect() {
                        "connect"
                    } else {
                        "open_transport"
                    },
                );
                tokio::time::sleep(BACKOFF).await;
                continue;
            }
            Ok(Ok(res)) => res,
        };
        match res.status().as_u16() {
            200 => {}
            204 => {
                // The run ended and nothing follows the cursor.
                cut(&mut w, "ended_204");
                w.finished = true;
                break;
            }
            status => {
                cut(&mut w, &format!("open_http_{status}"));
                tokio::time::sleep(BACKOFF).await;
                continue;
            }
        }
        opened();
        let mut stream = res.bytes_stream().eventsource();
        while !done(&w, &last) {
            let wait = s
                .idle
                .min(s.deadline.saturating_duration_since(Instant::now()));
            let next = tokio::select! {
                next = tokio::time::timeout(wait, stream.next()) => next,
                // The run's last version became known: re-check at once. Without a
                // sender nobody will say it: give up.
                changed = last.changed() => {
                    if changed.is_err() {
                        return w;
                    }
                    continue;
                }
            };
            let ev = match next {
                Err(_) => {
                    cut(&mut w, "idle");
                    break;
                }
                Ok(None) => {
                    cut(&mut w, "closed");
                    break;
                }
                Ok(Some(Err(_))) => {
                    cut(&mut w, "broken");
                    break;
                }
                Ok(Some(Ok(ev))) => ev,
            };
            let received = Utc::now();
            // Comments and retry hints carry no data; deltas are ephemeral (and an SSE
            // client keeps the last id for them).
            if ev.id.is_empty() || ev.data.is_empty() || ev.event == DELTA {
                continue;
            }
            let Some(version) = read(&ev, received) else {
                w.malformed += 1;
                continue;
            };
            if let Some(since) = blind_since.take() {
                let ms = since.elapsed().as_secs_f64() * 1e3;
                w.longest_blind_ms = w.longest_blind_ms.max(ms);
            }
            w.check.push(version);
        }
    }
    w.finished |= done(&w, &last);
    w
}

fn cut(w: &mut Watched, why: &str) {
    *w.cuts.entry(why.to_string()).or_default() += 1;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(versions: &[i64]) -> SeqCheck {
        let mut c = SeqCheck::default();
        for v in versions {
            c.push(*v);
        }
        c
    }

    #[test]
    fn a_contiguous_sequence_passes() {
        let c = check(&[1, 2, 3, 4]);
        assert!(c.exactly(4), "{c:?}");
        assert_eq!((c.gaps, c.repeats, c.missing_up_to(4)), (0, 0, 0));
    }

    #[test]
    fn a_skipped_version_is_a_gap() {
        let c = check(&[1, 2, 5, 6]);
        assert_eq!((c.gaps, c.skipped, c.repeats), (1, 2, 0));
        assert!(!c.exactly(6));
        let late_start = check(&[3, 4]);
        assert_eq!((late_start.gaps, late_start.skipped), (1, 2));
    }

    #[test]
    fn a_version_seen_twice_or_out_of_order_is_a_repeat() {
        let c = check(&[1, 2, 3, 2, 3, 4]);
        assert_eq!((c.gaps, c.repeats, c.last), (0, 2, 4));
        assert!(!c.exactly(4));
        let resumed_too_early = check(&[1, 2, 1]);
        assert_eq!(resumed_too_early.repeats, 1);
    }

    #[test]
    fn stopping_short_of_the_last_version_is_missing() {
        let c = check(&[1, 2, 3]);
        assert_eq!(c.missing_up_to(5), 2);
        assert!(!c.exactly(5));
        assert!(!check(&[]).exactly(1));
    }
}
