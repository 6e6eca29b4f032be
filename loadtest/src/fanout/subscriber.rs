//! One `fanout` subscriber: an SSE client of one run on one replica that records, for
//! every event recorded after the measured window opened, the delivery latency (its
//! receive time, taken as the frame leaves the SSE parser and before its JSON is read,
//! minus the envelope's `recorded_at`; same machine, same clock), split by whether the
//! event was written by the subscriber's own replica. [`SeqCheck`] counts gaps and
//! repeats. A stream that ends or stays silent past the idle bound is reopened on the
//! same replica with `Last-Event-ID` (a replica closes a subscriber that falls behind);
//! the subscriber ends once it has the run's last version, or at its deadline.

use crate::stats::Hdr;
use crate::watch::SeqCheck;
use chrono::{DateTime, Utc};
use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

/// Bound on opening a stream (until the answer's headers).
const OPEN_TIMEOUT: Duration = Duration::from_secs(10);

/// Wait before reopening after a failed open.
const BACKOFF: Duration = Duration::from_millis(100);

/// The most streams one subscriber opens.
const MAX_OPENS: u64 = 1000;

/// The event name of ephemeral frames (no version, not counted).
const DELTA: &str = "message.delta";

/// What the subscriber reads of each envelope.
#[derive(Deserialize)]
struct Envelope {
    version: i64,
    recorded_at: DateTime<Utc>,
    #[serde(default)]
    meta: Meta,
}

#[derive(Deserialize, Default)]
struct Meta {
    replica: Option<String>,
}

/// Where and how subscribers connect; cheap to clone.
#[derive(Clone)]
pub struct Setup {
    pub http: reqwest::Client,
    pub key: String,
    /// A stream silent this long is reopened (several SSE keep-alive intervals).
    pub idle: Duration,
    pub deadline: Instant,
    /// Events recorded before this instant get no latency sample; unset, none does.
    pub measure_from: Arc<OnceLock<DateTime<Utc>>>,
    /// Told once per subscriber when its first stream is open.
    pub opened: mpsc::UnboundedSender<()>,
}

/// One subscriber's place.
#[derive(Debug, Clone)]
pub struct Seat {
    pub run: uuid::Uuid,
    /// Index of the replica it reads from.
    pub replica: usize,
    pub base: String,
    /// That replica's id, as events carry it in `meta.replica`.
    pub replica_id: String,
}

/// What one subscriber saw.
#[derive(Debug, Clone)]
pub struct Got {
    pub seat: Seat,
    pub check: SeqCheck,
    /// Latency of events written by another replica / by its own.
    pub cross: Hdr,
    pub same: Hdr,
    /// Streams opened after the first.
    pub reopens: u64,
    /// Why streams ended or could not be opened, by kind.
    pub cuts: BTreeMap<String, u64>,
    pub malformed: u64,
    /// Bytes of event data received (to size the raw reference's payload).
    pub data_bytes: u64,
    /// Whether it reached the run's last version before its deadline.
    pub finished: bool,
}

/// Starts a subscriber on `seat`; it ends once it has the version `last` is set to.
pub fn spawn(
    setup: Setup,
    seat: Seat,
    last: watch::Receiver<Option<i64>>,
) -> tokio::task::JoinHandle<Got> {
    tokio::spawn(follow(setup, seat, last))
}

async fn follow(s: Setup, seat: Seat, mut last: watch::Receiver<Option<i64>>) -> Got {
    let mut g = Got {
        seat,
        check: SeqCheck::default(),
        cross: Hdr::new(),
        same: Hdr::new(),
        reopens: 0,
        cuts: BTreeMap::new(),
        malformed: 0,
        data_bytes: 0,
        finished: false,
    };
    let done = |g: &Got, last: &watch::Receiver<Option<i64>>| {
        last.borrow().is_some_and(|n| g.check.last >= n)
    };
    let mut told = false;
    for attempt in 0..MAX_OPENS {
        if done(&g, &last) {
            g.finished = true;
            break;
        }
        if Instant::now() >= s.deadline {
            break;
        }
        if attempt > 0 {
            g.reopens += 1;
        }
        let mut req = s
            .http
            .get(format!("{}/v1/runs/{}/events", g.seat.base, g.seat.run))
            .bearer_auth(&s.key)
            .header("accept", "text/event-stream");
        if g.check.last > 0 {
            req = req.header("last-event-id", g.check.last.to_string());
        }
        let res = match tokio::time::timeout(OPEN_TIMEOUT, req.send()).await {
            Err(_) => {
                cut(&mut g, "open_timeout");
                continue;
            }
            Ok(Err(_)) => {
                cut(&mut g, "open_transport");
                tokio::time::sleep(BACKOFF).await;
                continue;
            }
            Ok(Ok(res)) => res,
        };
        if res.status().as_u16() != 200 {
            cut(&mut g, &format!("open_http_{}", res.status().as_u16()));
            tokio::time::sleep(BACKOFF).await;
            continue;
        }
        if !told {
            told = true;
            // The scenario may have stopped listening; nothing to tell then.
            let _ = s.opened.send(());
        }
        let mut stream = res.bytes_stream().eventsource();
        loop {
            if done(&g, &last) {
                break;
            }
            let wait = s
                .idle
                .min(s.deadline.saturating_duration_since(Instant::now()));
            let next = tokio::select! {
                next = tokio::time::timeout(wait, stream.next()) => next,
                changed = last.changed() => {
                    if changed.is_err() {
                        return g;
                    }
                    continue;
                }
            };
            let ev = match next {
                Err(_) => {
                    cut(&mut g, "idle");
                    break;
                }
                Ok(None) => {
                    cut(&mut g, "closed");
                    break;
                }
                Ok(Some(Err(_))) => {
                    cut(&mut g, "broken");
                    break;
                }
                Ok(Some(Ok(ev))) => ev,
            };
            let received = Utc::now();
            if ev.id.is_empty() || ev.data.is_empty() || ev.event == DELTA {
                continue;
            }
            g.data_bytes += ev.data.len() as u64;
            let env = serde_json::from_str::<Envelope>(&ev.data)
                .ok()
                .filter(|e| ev.id.parse::<i64>().is_ok_and(|id| id == e.version));
            let Some(env) = env else {
                g.malformed += 1;
                continue;
            };
            g.check.push(env.version);
            if s.measure_from.get().is_some_and(|t| env.recorded_at >= *t) {
                let latency = (received - env.recorded_at).to_std().unwrap_or_default();
                if env.meta.replica.as_deref() == Some(g.seat.replica_id.as_str()) {
                    g.same.record(latency);
                } else {
                    g.cross.record(latency);
                }
            }
        }
    }
    if done(&g, &last) {
        g.finished = true;
    }
    g
}

fn cut(g: &mut Got, why: &str) {
    *g.cuts.entry(why.to_string()).or_default() += 1;
}
