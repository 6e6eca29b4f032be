//! Latency samples and their summary (nearest-rank percentiles over every sample: the
//! sample counts here are small enough to keep them all), plus timestamped progress lines.

use serde::Serialize;
use std::time::Instant;

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
}
