//! Latency samples and their summary: [`Summary`] takes nearest-rank percentiles over
//! every sample (for the fault scenarios, whose sample counts are small enough to keep
//! them all); [`Hdr`] records into an HDR histogram and [`Percentiles`] summarises it
//! (for the open-loop scenarios, which take tens of thousands of samples). Plus
//! timestamped progress lines.

use serde::Serialize;
use std::time::{Duration, Instant};

/// Percentiles of a set of latencies, in milliseconds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    pub count: usize,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub mean_ms: f64,
}

impl Summary {
    /// Summarises `samples` (milliseconds, any order); all zero when empty.
    pub fn of(samples: &[f64]) -> Self {
        if samples.is_empty() {
            return Summary::default();
        }
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let q = |q: f64| {
            let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
            sorted[rank - 1]
        };
        Summary {
            count: sorted.len(),
            p50_ms: q(0.50),
            p90_ms: q(0.90),
            p99_ms: q(0.99),
            max_ms: sorted[sorted.len() - 1],
            mean_ms: sorted.iter().sum::<f64>() / sorted.len() as f64,
        }
    }

    /// One Markdown table row: `| what | count | p50 | p90 | p99 | max |`.
    pub fn md_row(&self, what: &str) -> String {
        format!(
            "| {what} | {} | {:.1} | {:.1} | {:.1} | {:.1} |",
            self.count, self.p50_ms, self.p90_ms, self.p99_ms, self.max_ms
        )
    }
}

/// The Markdown header matching [`Summary::md_row`].
pub const MD_HEADER: &str =
    "| measure | samples | p50 ms | p90 ms | p99 ms | max ms |\n|---|---:|---:|---:|---:|---:|";

/// Latencies in an HDR histogram: microseconds, 3 significant digits (0.1% error), from
/// 1 µs up to [`Hdr::HIGHEST`]; longer values are recorded as the highest.
#[derive(Debug, Clone)]
pub struct Hdr(hdrhistogram::Histogram<u64>);

impl Hdr {
    /// The highest value tracked: 10 minutes, above any request timeout used here.
    pub const HIGHEST: Duration = Duration::from_secs(600);

    pub fn new() -> Self {
        let high = Self::HIGHEST.as_micros() as u64;
        // The bounds are constants that satisfy the crate's rules (low >= 1, high >= 2 *
        // low, 0..=5 digits), so this cannot fail.
        let h = hdrhistogram::Histogram::new_with_bounds(1, high, 3)
            .expect("constant histogram bounds are valid");
        Hdr(h)
    }

    pub fn record(&mut self, latency: Duration) {
        let us = u64::try_from(latency.as_micros())
            .unwrap_or(u64::MAX)
            .max(1);
        self.0.saturating_record(us);
    }

    /// Adds every sample of `other`.
    pub fn add(&mut self, other: &Hdr) {
        // Both were built by `Hdr::new` with the same bounds, which is all `add` needs.
        self.0
            .add(&other.0)
            .expect("histograms with the same bounds add up");
    }

    /// The summary; all zero when nothing was recorded.
    pub fn percentiles(&self) -> Percentiles {
        if self.0.is_empty() {
            return Percentiles::default();
        }
        let ms = |us: u64| us as f64 / 1e3;
        let q = |q: f64| ms(self.0.value_at_quantile(q));
        Percentiles {
            count: self.0.len(),
            p50_ms: q(0.50),
            p90_ms: q(0.90),
            p99_ms: q(0.99),
            p999_ms: q(0.999),
            max_ms: ms(self.0.max()),
            mean_ms: self.0.mean() / 1e3,
        }
    }
}

impl Default for Hdr {
    fn default() -> Self {
        Self::new()
    }
}

/// Percentiles of an [`Hdr`], in milliseconds (each within 0.1% of the exact value).
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize, PartialEq)]
pub struct Percentiles {
    pub count: u64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    pub mean_ms: f64,
}

/// Prints timestamped progress lines to stderr.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    start: Instant,
}

impl Progress {
    pub fn new() -> Self {
        Progress {
            start: Instant::now(),
        }
    }

    pub fn say(&self, msg: impl AsRef<str>) {
        eprintln!(
            "[{:>7.1}s] {}",
            self.start.elapsed().as_secs_f64(),
            msg.as_ref()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let s: Vec<f64> = (1..=100).map(f64::from).collect();
        let sum = Summary::of(&s);
        assert_eq!((sum.p50_ms, sum.p99_ms, sum.max_ms), (50.0, 99.0, 100.0));
        assert_eq!(Summary::of(&[]).count, 0);
    }

    #[test]
    fn hdr_percentiles_are_ordered_and_close() {
        let mut h = Hdr::new();
        for ms in 1..=1000u64 {
            h.record(Duration::from_millis(ms));
        }
        let p = h.percentiles();
        assert_eq!(p.count, 1000);
        assert!((p.p50_ms - 500.0).abs() <= 1.0, "{p:?}");
        assert!((p.p99_ms - 990.0).abs() <= 1.0, "{p:?}");
        assert!(p.p50_ms <= p.p90_ms && p.p90_ms <= p.p99_ms && p.p99_ms <= p.p999_ms);
        assert!(p.p999_ms <= p.max_ms);
        assert_eq!(Hdr::new().percentiles(), Percentiles::default());
    }
}
