//! The raw reference of `fanout`: the bus hop alone. One NATS connection publishes
//! messages of an envelope's size on an open-loop timetable (message `i` at
//! `start + i / rate`, with `publish` and no explicit flush, as Baton's publisher does)
//! and a second connection, subscribed to the subject, takes each one; the latency runs
//! from the intended publish to the receipt. Its subject is outside Baton's, so the
//! replicas never see it. Bounded by its timetable and a drain timeout.

use crate::stats::{Hdr, Percentiles};
use anyhow::Context;
use futures::StreamExt;
use serde::Serialize;
use std::time::{Duration, Instant};

/// Bound on connecting and on confirming the subscription.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the subscriber waits for the last messages after the timetable.
const DRAIN: Duration = Duration::from_secs(2);

/// What the probe measured.
#[derive(Debug, Clone, Serialize)]
pub struct Probe {
    pub rate_per_sec: f64,
    pub payload_bytes: usize,
    pub sent: u64,
    pub received: u64,
    pub latency: Percentiles,
}

/// Publishes `rate` messages/s of `payload` bytes for `secs` on `nats_url` and measures
/// each one's publish -> receive latency.
pub async fn probe(nats_url: &str, rate: f64, secs: f64, payload: usize) -> anyhow::Result<Probe> {
    anyhow::ensure!(
        rate > 0.0 && secs > 0.0,
        "the raw probe needs a rate and a length"
    );
    let connect = || async {
        let c = tokio::time::timeout(CONNECT_TIMEOUT, async_nats::connect(nats_url))
            .await
            .context("connecting to NATS timed out")?
            .with_context(|| format!("cannot connect to NATS at {nats_url}"))?;
        anyhow::Ok(c)
    };
    let (publisher, subscriber) = (connect().await?, connect().await?);
    let subject = format!("loadtest.raw.{}", uuid::Uuid::new_v4().simple());
    let mut sub = subscriber
        .subscribe(subject.clone())
        .await
        .context("subscribing for the raw probe")?;
    // The subscription takes effect once the server has read it: confirm with a flush,
    // which waits for the server's answer to a PING sent after it.
    tokio::time::timeout(CONNECT_TIMEOUT, subscriber.flush())
        .await
        .context("confirming the raw probe's subscription timed out")?
        .context("confirming the raw probe's subscription")?;
    let n = (rate * secs).floor() as u64;
    let every = Duration::from_secs_f64(1.0 / rate);
    let start = Instant::now();
    let reader = tokio::spawn(async move {
        let mut h = Hdr::new();
        let mut got = 0u64;
        let until = start + every.mul_f64(n as f64) + DRAIN;
        while got < n {
            let wait = until.saturating_duration_since(Instant::now());
            let Ok(Some(msg)) = tokio::time::timeout(wait, sub.next()).await else {
                break;
            };
            let now = Instant::now();
            let Some(seq) = msg
                .payload
                .get(..8)
                .and_then(|b| <[u8; 8]>::try_from(b).ok())
                .map(u64::from_le_bytes)
            else {
                continue;
            };
            h.record(now.saturating_duration_since(start + every.mul_f64(seq as f64)));
            got += 1;
        }
        (h, got)
    });
    let mut body = vec![b'x'; payload.max(8)];
    let mut sent = 0;
    for seq in 0..n {
        tokio::time::sleep_until((start + every.mul_f64(seq as f64)).into()).await;
        body[..8].copy_from_slice(&seq.to_le_bytes());
        if publisher
            .publish(subject.clone(), body.clone().into())
            .await
            .is_ok()
        {
            sent += 1;
        }
    }
    let (h, received) = reader.await.context("the raw probe's reader")?;
    Ok(Probe {
        rate_per_sec: rate,
        payload_bytes: payload,
        sent,
        received,
        latency: h.percentiles(),
    })
}
