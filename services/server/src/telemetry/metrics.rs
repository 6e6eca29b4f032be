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

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// The process's recorder, installed on first use. `None` when another recorder was
/// installed first (then `/metrics` says so instead of serving numbers).
pub fn handle() -> Option<&'static PrometheusHandle> {
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), BUCKETS)
                .ok()?
                .install_recorder()
                .ok()?;
            describe();
            Some(recorder)
        })
        .as_ref()
}

fn describe() {
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
}
