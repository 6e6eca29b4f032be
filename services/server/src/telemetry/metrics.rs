//! Prometheus metrics: one process-wide recorder (the `metrics` facade's calls anywhere in
//! Baton land here), their descriptions, and the text served at `/metrics`. Names follow
//! Prometheus conventions: base units (`_seconds`), `_total` for counters.

use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::sync::OnceLock;

/// Latency buckets from 0.5 ms to 10 s, for every `_seconds` histogram.
const BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Size buckets from 1 KiB to 16 MiB, for every `_bytes` histogram.
const SIZE_BUCKETS: &[f64] = &[
    1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0, 16777216.0,
];

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// The process's recorder, installed on first use. `None` when another recorder was
/// installed first (then `/metrics` says so instead of serving numbers).
pub fn handle() -> Option<&'static PrometheusHandle> {
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), BUCKETS)
                .ok()?
                .set_buckets_for_metric(Matcher::Suffix("_bytes".into()), SIZE_BUCKETS)
                .ok()?
                .install_recorder()
                .ok()?;
            describe();
            start_at_zero();
            Some(recorder)
        })
        .as_ref()
}

/// Counters of rare events, present from the start: a scrape shows `0` rather than
/// nothing, and `rate()` sees the first increment.
fn start_at_zero() {
    for name in [
        "baton_append_conflicts_total",
        "baton_appends_fenced_total",
        "baton_append_errors_total",
        "baton_leases_lost_total",
        "baton_lease_handoffs_total",
        "baton_runs_parked_total",
        "baton_sse_closed_slow_total",
        "baton_sse_deltas_dropped_total",
        "baton_bus_publish_failures_total",
        "baton_bus_publish_dropped_total",
        "baton_bus_deltas_dropped_total",
        "baton_checkpoints_skipped_total",
    ] {
        metrics::counter!(name).increment(0);
    }
    for reason in ["new", "adopted", "handoff"] {
        metrics::counter!("baton_lease_claims_total", "reason" => reason).increment(0);
    }
    // Which build each replica runs, to follow a rollout.
    metrics::gauge!("baton_build_info", "version" => env!("CARGO_PKG_VERSION")).set(1.0);
}

fn describe() {
    describe_gauge!(
        "baton_build_info",
        "Always 1; its version label is this replica's build."
    );
    describe_histogram!(
        "baton_http_request_duration_seconds",
        Unit::Seconds,
        "HTTP request duration by method, matched route and status."
    );
    describe_histogram!(
        "baton_event_append_duration_seconds",
        Unit::Seconds,
        "Time to append events (one transaction with their projections)."
    );
    describe_counter!("baton_events_appended_total", "Durable events appended.");
    describe_counter!(
        "baton_append_conflicts_total",
        "Appends refused because the stream moved (the writer re-reads and decides again)."
    );
    describe_counter!(
        "baton_appends_fenced_total",
        "Engine appends refused because the lease had passed to another replica."
    );
    describe_counter!(
        "baton_append_errors_total",
        "Appends that failed otherwise."
    );
    describe_gauge!(
        "baton_leases_held",
        "Run leases this replica held at its last renewal."
    );
    describe_counter!(
        "baton_lease_claims_total",
        "Run leases claimed, by reason (new, adopted, handoff)."
    );
    describe_counter!(
        "baton_leases_lost_total",
        "Leases found taken over at renewal (their drivers were stopped)."
    );
    describe_counter!(
        "baton_lease_handoffs_total",
        "Runs handed off to another replica while draining."
    );
    describe_counter!(
        "baton_runs_parked_total",
        "Runs this replica could not drive (data it cannot read) and left alone."
    );
    describe_gauge!("baton_sse_subscribers", "Open SSE event streams.");
    describe_counter!(
        "baton_sse_closed_slow_total",
        "SSE streams closed because the client fell behind its buffer."
    );
    describe_counter!(
        "baton_bus_publish_failures_total",
        "Bus publishes the NATS client refused."
    );
    describe_counter!(
        "baton_bus_publish_dropped_total",
        "Bus messages dropped because the publish queue was full (NATS slow or down)."
    );
    describe_counter!(
        "baton_bus_deltas_dropped_total",
        "Token deltas not published because the publish queue was half full."
    );
    describe_counter!(
        "baton_sse_deltas_dropped_total",
        "Token deltas an SSE client missed because its delta buffer was full."
    );
    describe_counter!(
        "baton_checkpoints_saved_total",
        "Run checkpoints sealed and saved (after turns and before hand-offs)."
    );
    describe_counter!(
        "baton_checkpoints_restored_total",
        "Drivers that started a run from a checkpoint."
    );
    describe_counter!(
        "baton_checkpoints_skipped_total",
        "Checkpoints skipped because they did not open or verify."
    );
    describe_counter!(
        "baton_tool_calls_recovered_total",
        "Interrupted tool calls found by a driver, by how they were handled (rerun, uncertain)."
    );
    describe_gauge!(
        "baton_db_pool_connections",
        "Database connections by pool (app, control, checkpoint) and state (idle, in_use)."
    );
    describe_gauge!(
        "baton_db_pool_max_connections",
        "Configured size of each database pool."
    );
    describe_histogram!(
        "baton_db_pool_wait_seconds",
        Unit::Seconds,
        "Time store operations waited for a pooled connection, by pool."
    );
    describe_histogram!(
        "baton_bus_lag_seconds",
        Unit::Seconds,
        "From an event's append to its dispatch to this replica's subscribers (clock skew included)."
    );
    describe_histogram!(
        "baton_model_call_duration_seconds",
        Unit::Seconds,
        "Model calls by provider and outcome (ok, error)."
    );
    describe_counter!(
        "baton_model_call_errors_total",
        "Model calls that failed, by provider and error code."
    );
    describe_histogram!(
        "baton_tool_call_duration_seconds",
        Unit::Seconds,
        "Tool calls the engine made, by effect (read, mutation) and outcome."
    );
    describe_counter!(
        "baton_tool_call_errors_total",
        "Tool calls that failed, by effect and error code."
    );
    describe_histogram!(
        "baton_checkpoint_size_bytes",
        Unit::Bytes,
        "Size of each run checkpoint saved, before encryption."
    );
}
