//! Reading PromQL as text: which series an expression queries.

use std::collections::BTreeSet;

/// The metric names `expr` queries (`baton_*` and `process_*`), without the histogram
/// suffixes `_bucket`, `_count` and `_sum`.
pub fn series_in(expr: &str) -> BTreeSet<String> {
    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("baton_") || w.starts_with("process_"))
        .map(|w| {
            ["_bucket", "_count", "_sum"]
                .iter()
                .find_map(|s| w.strip_suffix(s))
                .unwrap_or(w)
                .to_owned()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_suffixes_are_dropped_and_functions_ignored() {
        let got = series_in(
            "histogram_quantile(0.99, sum by (le) (rate(baton_bus_lag_seconds_bucket[5m]))) \
             / rate(process_cpu_seconds_total{job=~\"$job\"}[5m])",
        );
        let want: BTreeSet<String> = ["baton_bus_lag_seconds", "process_cpu_seconds_total"]
            .map(String::from)
            .into();
        assert_eq!(got, want);
    }
}
