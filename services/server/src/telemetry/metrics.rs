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
            process().describe();
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
        "baton_turns_started_total",
        "baton_turns_completed_total",
        "baton_retention_rounds_total",
        "baton_retention_runs_deleted_total",
        "baton_retention_idempotency_pruned_total",
        "baton_retention_deliveries_pruned_total",
        "baton_webhook_deliveries_failed_total",
    ] {
        metrics::counter!(name).increment(0);
    }
    metrics::gauge!("baton_receipts_uncertain").set(0.0);
    for reason in ["new", "adopted", "handoff"] {
        metrics::counter!("baton_lease_claims_total", "reason" => reason).increment(0);
    }
    for trigger in ["timetable", "now"] {
        metrics::counter!("baton_schedule_fires_total", "trigger" => trigger).increment(0);
    }
    for reason in ["missed", "overlap"] {
        metrics::counter!("baton_schedule_skipped_total", "reason" => reason).increment(0);
    }
    for result in ["delivered", "failed"] {
        metrics::counter!("baton_webhook_attempts_total", "result" => result).increment(0);
    }
    // Which build each replica runs, to follow a rollout.
    metrics::gauge!("baton_build_info", "version" => env!("CARGO_PKG_VERSION")).set(1.0);
}

/// The process's figures (`process_cpu_seconds_total`, `process_resident_memory_bytes`,
/// `process_open_fds`, `process_start_time_seconds`, ...), under Prometheus's standard
/// names.
fn process() -> &'static metrics_process::Collector {
    static COLLECTOR: OnceLock<metrics_process::Collector> = OnceLock::new();
    COLLECTOR.get_or_init(metrics_process::Collector::default)
}

/// Reads the process's figures into their metrics (at each scrape).
pub fn record_process() {
    process().collect();
}

/// How often a replica reads the installation's counts at most: scrapes in between (two
/// Prometheus servers, a dashboard) reuse the last reading.
const COUNTS_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// How long reading the counts may take before a scrape goes on without them.
const COUNTS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// The installation's counts, read from the database at a scrape: runs not yet final by
/// status (`baton_runs_active`) and tool calls held uncertain (`baton_receipts_uncertain`).
/// Every replica reports the same installation-wide figures: aggregate them with `max`,
/// not `sum`.
#[derive(Default)]
pub struct Counts {
    last: tokio::sync::Mutex<Option<std::time::Instant>>,
}

impl Counts {
    /// Reads the counts into their gauges unless they were read less than
    /// [`COUNTS_EVERY`] ago. A failed or slow read leaves the last values and is logged.
    pub async fn record(&self, stats: &dyn baton_core::ports::StatsStore) {
        let mut last = self.last.lock().await;
        if last.is_some_and(|at| at.elapsed() < COUNTS_EVERY) {
            return;
        }
        let read = async {
            let runs = stats.active_runs_by_status().await?;
            let uncertain = stats.uncertain_receipts().await?;
            Ok::<_, baton_core::StoreError>((runs, uncertain))
        };
        match tokio::time::timeout(COUNTS_TIMEOUT, read).await {
            Ok(Ok((runs, uncertain))) => {
                for status in baton_core::model::RunStatus::ALL
                    .into_iter()
                    .filter(|s| !s.is_terminal())
                {
                    let n = runs.iter().find(|(s, _)| *s == status).map_or(0, |r| r.1);
                    metrics::gauge!("baton_runs_active", "status" => status.as_str()).set(n as f64);
                }
                metrics::gauge!("baton_receipts_uncertain").set(uncertain as f64);
                *last = Some(std::time::Instant::now());
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "could not read the counts for /metrics"),
            Err(_) => tracing::warn!(
                timeout = ?COUNTS_TIMEOUT,
                "reading the counts for /metrics took too long"
            ),
        }
    }
}

fn describe() {
    describe_gauge!(
        "baton_runs_active",
        "Runs not yet in a final status, by status, over the whole installation (the same on every replica: aggregate with max)."
    );
    describe_gauge!(
        "baton_receipts_uncertain",
        "Tool calls held uncertain for a member's decision, over the whole installation (aggregate with max)."
    );
    describe_counter!("baton_turns_started_total", "Turns started.");
    describe_counter!("baton_turns_completed_total", "Turns completed.");
    describe_counter!(
        "baton_turns_failed_total",
        "Turns failed, by reason (the error code)."
    );
    describe_counter!(
        "baton_tool_calls_total",
        "Tool calls made (intent recorded), by kind (http, client, delegate, mcp)."
    );
    describe_counter!(
        "baton_tool_call_outcomes_total",
        "Tool calls ended, by source (client: a client tool's output; baton: a result Baton recorded) and outcome (ok, error, cancelled, uncertain)."
    );
    describe_counter!(
        "baton_model_calls_total",
        "Model calls by provider, model (the first 50 names, then other) and outcome."
    );
    describe_counter!(
        "baton_model_tokens_total",
        "Tokens the model servers reported, by provider, model and direction (input, output)."
    );
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
    describe_counter!(
        "baton_retention_rounds_total",
        "Rounds of the retention job this replica ran."
    );
    describe_counter!(
        "baton_retention_runs_deleted_total",
        "Ended runs the retention job deleted on this replica, past their retention."
    );
    describe_counter!(
        "baton_retention_idempotency_pruned_total",
        "Idempotency records the retention job pruned on this replica, past their window."
    );
    describe_counter!(
        "baton_schedule_fires_total",
        "Runs started by schedules on this replica, by trigger (timetable, now)."
    );
    describe_counter!(
        "baton_schedule_skipped_total",
        "Schedule fire times skipped on this replica, by reason (missed, overlap)."
    );
    describe_counter!(
        "baton_schedule_pauses_total",
        "Schedules that paused themselves on this replica, by reason (agent_archived, \
         agent_missing, owner_lost_access, fire_refused, timetable_unreadable)."
    );
    describe_histogram!(
        "baton_schedule_fire_lateness_seconds",
        Unit::Seconds,
        "From a schedule's fire time to its run's creation, for fires on time."
    );
    describe_counter!(
        "baton_webhook_attempts_total",
        "Webhook delivery attempts on this replica, by result (delivered, failed)."
    );
    describe_counter!(
        "baton_webhook_deliveries_failed_total",
        "Webhook deliveries given up on this replica after their retry period."
    );
    describe_histogram!(
        "baton_webhook_delivery_latency_seconds",
        Unit::Seconds,
        "From a webhook event to its delivered attempt."
    );
    describe_counter!(
        "baton_retention_deliveries_pruned_total",
        "Finished webhook deliveries the retention job pruned on this replica, past their window."
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
    describe_counter!(
        "baton_db_statements_total",
        "SQL statements the store sent, by backend."
    );
    describe_counter!(
        "baton_db_transactions_total",
        "Reads and writes the store began, by backend and access (a SQLite read is a plain \
         connection): with the statements, the store's round trips."
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
        "Tool calls the engine made, by kind (http, mcp), effect (read, mutation) and outcome."
    );
    describe_counter!(
        "baton_tool_call_errors_total",
        "Tool calls that failed, by kind, effect and error code."
    );
    describe_counter!(
        "baton_mcp_progress_notifications_total",
        "Progress notifications MCP servers sent during tool calls."
    );
    describe_histogram!(
        "baton_checkpoint_size_bytes",
        Unit::Bytes,
        "Size of each run checkpoint saved, before encryption."
    );
}
