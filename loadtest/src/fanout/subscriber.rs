//! One `fanout` subscriber: an SSE client of one run on one replica that records, for
//! every event recorded after the measured window opened, the delivery latency (its
//! receive time, taken as the frame leaves the SSE parser and before its JSON is read,
//! minus the envelope's `recorded_at`; same machine, same clock), split by whether the
//! event was written by the subscriber's own replica, following the stream with
//! [`crate::watch::follow_stream`], whose [`crate::watch::SeqCheck`] counts gaps and
//! repeats. A stream that ends or stays silent past the idle bound is reopened on the
//! same replica with `Last-Event-ID` (a replica closes a subscriber that falls behind);
//! the subscriber ends once it has the run's last version, or at its deadline.

use crate::stats::Hdr;
use crate::watch::{Stream, Watched, follow_stream};
use chrono::{DateTime, Utc};
use eventsource_stream::Event;
use serde::Deserialize;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

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
    /// Its versions, its streams' resumptions and cuts, malformed frames, whether it
    /// reached the run's last version before its deadline.
    pub watched: Watched,
    /// Latency of events written by another replica / by its own.
    pub cross: Hdr,
    pub same: Hdr,
    /// Bytes of event data received (to size the raw reference's payload).
    pub data_bytes: u64,
}

/// Starts a subscriber on `seat`; it ends once it has the version `last` is set to.
pub fn spawn(
    setup: Setup,
    seat: Seat,
    last: watch::Receiver<Option<i64>>,
) -> tokio::task::JoinHandle<Got> {
    tokio::spawn(follow(setup, seat, last))
}

async fn follow(s: Setup, seat: Seat, last: watch::Receiver<Option<i64>>) -> Got {
    let (mut cross, mut same, mut data_bytes) = (Hdr::new(), Hdr::new(), 0);
    let stream = Stream {
        http: &s.http,
        key: &s.key,
        idle: s.idle,
        deadline: s.deadline,
    };
    let mut told = false;
    let opened = || {
        if !told {
            told = true;
            // The scenario may have stopped listening; nothing to tell then.
            let _ = s.opened.send(());
        }
    };
    let read = |ev: &Event, received: DateTime<Utc>| {
        data_bytes += ev.data.len() as u64;
        let env = serde_json::from_str::<Envelope>(&ev.data)
            .ok()
            .filter(|e| ev.id.parse::<i64>().is_ok_and(|id| id == e.version))?;
        if s.measure_from.get().is_some_and(|t| env.recorded_at >= *t) {
            let latency = (received - env.recorded_at).to_std().unwrap_or_default();
            if env.meta.replica.as_deref() == Some(seat.replica_id.as_str()) {
                same.record(latency);
            } else {
                cross.record(latency);
            }
        }
        Some(env.version)
    };
    let base = seat.base.clone();
    let watched = follow_stream(
        &stream,
        seat.run,
        |_| Some(base.clone()),
        last,
        opened,
        read,
    )
    .await;
    Got {
        seat,
        watched,
        cross,
        same,
        data_bytes,
    }
}
