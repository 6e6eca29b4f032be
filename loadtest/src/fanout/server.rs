//! What `fanout` reads from the replicas themselves: their resident memory (`VmRSS` in
//! `/proc/<pid>/status`, for replicas the harness spawned) and their Prometheus text at
//! `/metrics` (counters and gauges summed over labels, histograms as cumulative buckets),
//! with the difference between two scrapes and a quantile estimated from bucket counts.
//! Reads only; never changes a replica.

use anyhow::Context;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// Bound on one scrape of `/metrics`.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);

/// The resident memory of process `pid` in bytes; `None` without `/proc` or once it ended.
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// One scrape: series summed over their labels but `le`.
#[derive(Debug, Clone, Default)]
pub struct Scrape {
    /// Counters and gauges (and histograms' `_sum` and `_count`) by name.
    pub values: BTreeMap<String, f64>,
    /// Histograms by name: (upper bound in seconds, cumulative count), by bound.
    pub buckets: BTreeMap<String, Vec<(f64, f64)>>,
}

impl Scrape {
    /// Parses the Prometheus text format; lines it does not understand are skipped.
    pub fn parse(text: &str) -> Self {
        let mut s = Scrape::default();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(value) = value.trim().parse::<f64>() else {
                continue;
            };
            let (name, labels) = series.split_once('{').unwrap_or((series, ""));
            match name.strip_suffix("_bucket").zip(le(labels)) {
                Some((hist, le)) => {
                    let b = s.buckets.entry(hist.to_string()).or_default();
                    match b.iter_mut().find(|(bound, _)| *bound == le) {
                        Some((_, n)) => *n += value,
                        None => b.push((le, value)),
                    }
                }
                None => *s.values.entry(name.to_string()).or_default() += value,
            }
        }
        for b in s.buckets.values_mut() {
            b.sort_by(|x, y| x.0.total_cmp(&y.0));
        }
        s
    }

    /// A counter or gauge; 0 when absent.
    pub fn value(&self, name: &str) -> f64 {
        self.values.get(name).copied().unwrap_or(0.0)
    }

    /// `self - before` for every series (what happened between the two scrapes).
    pub fn minus(&self, before: &Scrape) -> Scrape {
        let values = self
            .values
            .iter()
            .map(|(k, v)| (k.clone(), v - before.value(k)))
            .collect();
        let buckets = self
            .buckets
            .iter()
            .map(|(k, b)| {
                let old = before.buckets.get(k);
                let d = b
                    .iter()
                    .map(|(le, n)| {
                        let was = old
                            .and_then(|o| o.iter().find(|(l, _)| l == le))
                            .map_or(0.0, |(_, n)| *n);
                        (*le, n - was)
                    })
                    .collect();
                (k.clone(), d)
            })
            .collect();
        Scrape { values, buckets }
    }

    /// The series of every scrape added up (several replicas as one).
    pub fn sum<'a>(all: impl IntoIterator<Item = &'a Scrape>) -> Scrape {
        let mut s = Scrape::default();
        for x in all {
            for (k, v) in &x.values {
                *s.values.entry(k.clone()).or_default() += v;
            }
            for (k, b) in &x.buckets {
                let into = s.buckets.entry(k.clone()).or_default();
                for (le, n) in b {
                    match into.iter_mut().find(|(l, _)| l == le) {
                        Some((_, m)) => *m += n,
                        None => into.push((*le, *n)),
                    }
                }
                into.sort_by(|x, y| x.0.total_cmp(&y.0));
            }
        }
        s
    }

    /// The histogram `name` (a `_seconds` one) summarised; `None` when absent or empty.
    pub fn histogram(&self, name: &str) -> Option<Buckets> {
        let b = self.buckets.get(name)?;
        let total = b.iter().map(|(_, n)| *n).fold(0.0, f64::max);
        if total < 1.0 {
            return None;
        }
        let q = |q: f64| quantile(b, total, q) * 1e3;
        let share = b
            .iter()
            .filter(|(le, _)| le.is_finite())
            .map(|(le, n)| (format!("{}", le * 1e3), n / total))
            .collect();
        Some(Buckets {
            count: total as u64,
            p50_ms: q(0.5),
            p90_ms: q(0.9),
            p99_ms: q(0.99),
            share_at_or_below_ms: share,
        })
    }
}

/// A server histogram between two scrapes: quantiles interpolated linearly inside the
/// bucket they fall in (as Prometheus' `histogram_quantile`), so only as fine as the
/// buckets (0.5, 1, 2.5, 5, 10, 25 ms ...).
#[derive(Debug, Clone, Serialize)]
pub struct Buckets {
    pub count: u64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    /// Share of the observations at or below each bucket bound (ms).
    pub share_at_or_below_ms: Vec<(String, f64)>,
}

impl Buckets {
    /// `p50 ≈ .. ms, p90 ≈ .., p99 ≈ .. (n samples; x% ≤ 5 ms, y% ≤ 10 ms)`.
    pub fn md(&self) -> String {
        let at = |ms: &str| {
            self.share_at_or_below_ms
                .iter()
                .find(|(b, _)| b == ms)
                .map_or("?".to_string(), |(_, s)| format!("{:.1}%", s * 100.0))
        };
        format!(
            "p50 ≈ {:.2} ms, p90 ≈ {:.2} ms, p99 ≈ {:.2} ms ({} samples; {} ≤ 2.5 ms, {} ≤ 5 ms, \
             {} ≤ 10 ms)",
            self.p50_ms,
            self.p90_ms,
            self.p99_ms,
            self.count,
            at("2.5"),
            at("5"),
            at("10")
        )
    }
}

/// The `le` label's bound, `+Inf` included.
fn le(labels: &str) -> Option<f64> {
    let v = labels.split("le=\"").nth(1)?.split('"').next()?;
    if v == "+Inf" {
        Some(f64::INFINITY)
    } else {
        v.parse().ok()
    }
}

/// The `q` quantile of cumulative buckets, interpolated inside its bucket; a quantile in
/// the `+Inf` bucket is reported at the highest finite bound.
fn quantile(b: &[(f64, f64)], total: f64, q: f64) -> f64 {
    let rank = q * total;
    let mut prev = (0.0, 0.0);
    for &(le, n) in b {
        if n >= rank {
            if !le.is_finite() {
                return prev.0;
            }
            let inside = n - prev.1;
            let frac = if inside > 0.0 {
                (rank - prev.1) / inside
            } else {
                1.0
            };
            return prev.0 + (le - prev.0) * frac;
        }
        prev = (le, n);
    }
    prev.0
}

/// What happened on all replicas between two scrapes of each (`after[i] - before[i]`).
pub fn diff(after: &[Scrape], before: &[Scrape]) -> Scrape {
    let each: Vec<Scrape> = after.iter().zip(before).map(|(a, b)| a.minus(b)).collect();
    Scrape::sum(&each)
}

/// Scrapes `<base>/metrics`.
pub async fn scrape(http: &reqwest::Client, base: &str) -> anyhow::Result<Scrape> {
    let url = format!("{base}/metrics");
    let res = http
        .get(&url)
        .timeout(SCRAPE_TIMEOUT)
        .send()
        .await
        .with_context(|| format!("scraping {url}"))?;
    anyhow::ensure!(res.status().is_success(), "{url} answered {}", res.status());
    let text = res.text().await.with_context(|| format!("reading {url}"))?;
    Ok(Scrape::parse(&text))
}

/// Scrapes every replica, in order.
pub async fn scrape_all(http: &reqwest::Client, bases: &[String]) -> anyhow::Result<Vec<Scrape>> {
    let mut all = Vec::with_capacity(bases.len());
    for b in bases {
        all.push(scrape(http, b).await?);
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# TYPE baton_sse_closed_slow_total counter\n\
        baton_sse_closed_slow_total 3\n\
        baton_sse_subscribers 10\n\
        baton_bus_lag_seconds_bucket{le=\"0.001\"} 50\n\
        baton_bus_lag_seconds_bucket{le=\"0.01\"} 90\n\
        baton_bus_lag_seconds_bucket{le=\"+Inf\"} 100\n\
        baton_bus_lag_seconds_count 100\n\
        baton_x_seconds_bucket{op=\"a\",le=\"1\"} 1\n\
        baton_x_seconds_bucket{op=\"b\",le=\"1\"} 2\n";

    #[test]
    fn parses_counters_and_sums_buckets_over_labels() {
        let s = Scrape::parse(TEXT);
        assert_eq!(s.value("baton_sse_closed_slow_total"), 3.0);
        assert_eq!(s.value("baton_bus_lag_seconds_count"), 100.0);
        assert_eq!(s.buckets["baton_x_seconds"], vec![(1.0, 3.0)]);
        let lag = &s.buckets["baton_bus_lag_seconds"];
        assert_eq!(lag.len(), 3);
        assert!(lag[2].0.is_infinite());
    }

    #[test]
    fn quantiles_interpolate_inside_the_bucket_and_differences_subtract() {
        let s = Scrape::parse(TEXT);
        let h = s.histogram("baton_bus_lag_seconds").expect("histogram");
        assert_eq!(h.count, 100);
        assert!((h.p50_ms - 1.0).abs() < 1e-9, "{h:?}");
        // The 90th observation is the top of the 1-10 ms bucket.
        assert!((h.p90_ms - 10.0).abs() < 1e-9, "{h:?}");
        // Beyond the last finite bound: reported at it.
        assert!((h.p99_ms - 10.0).abs() < 1e-9, "{h:?}");
        let d = s.minus(&s);
        assert_eq!(d.value("baton_sse_closed_slow_total"), 0.0);
        assert!(d.histogram("baton_bus_lag_seconds").is_none());
        let two = Scrape::sum([&s, &s]);
        assert_eq!(two.value("baton_sse_subscribers"), 20.0);
    }
}
