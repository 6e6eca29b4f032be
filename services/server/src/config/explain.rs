//! `baton config explain`: every effective key with its value and the layer it came from.
//! Secrets arrive already redacted (see `urls`); this module never sees them in clear.

use std::fmt;

use super::Layer;
use super::schema::RawConfig;

/// Keys in the order `config explain` prints them (schema order). Keys the schema has but this
/// list lacks are printed after these, so none is ever hidden.
const KEY_ORDER: &[&str] = &[
    "tier",
    "data_dir",
    "replica_name",
    "http.listen",
    "http.body_limit_bytes",
    "http.sse_buffer",
    "http.sse_keepalive_secs",
    "http.sse_resync_ms",
    "http.shutdown_grace_secs",
    "http.header_limit_bytes",
    "http.allowed_hosts",
    "http.allowed_origins",
    "http.key_rate_limit",
    "http.tenant_rate_limit",
    "http.header_read_timeout_ms",
    "http.request_timeout_ms",
    "http.sse_streams_per_key",
    "http.sse_streams_per_tenant",
    "database.url",
    "database.app_pool",
    "database.control_pool",
    "database.checkpoint_pool",
    "database.max_connections",
    "database.statement_timeout_ms",
    "database.acquire_timeout_ms",
    "database.migrate_on_start",
    "bus.nats_url",
    "bus.subject_prefix",
    "bus.nats_user",
    "bus.nats_password",
    "bus.nats_token",
    "bus.nats_nkey_seed",
    "bus.nats_creds_file",
    "bus.nats_tls_required",
    "bus.nats_tls_ca_file",
    "bus.nats_tls_cert_file",
    "bus.nats_tls_key_file",
    "auth.required",
    "auth.argon2_memory_kib",
    "auth.argon2_iterations",
    "auth.argon2_parallelism",
    "auth.session_lifetime_secs",
    "auth.stream_ticket_lifetime_secs",
    "auth.login_account_rate_limit",
    "auth.login_address_rate_limit",
    "log.format",
    "log.filter",
    "cluster.lease_ttl_ms",
    "cluster.renew_interval_ms",
    "cluster.adopt_interval_ms",
    "cluster.adopt_batch",
    "crypto.keys",
    "crypto.keys_dir",
    "crypto.active_key",
    "egress.allow",
    "egress.deny",
    "egress.allow_loopback",
    "retention.interval_ms",
    "retention.batch",
    "retention.idempotency_window_hours",
    "retention.webhook_deliveries_days",
    "schedules.poll_interval_ms",
    "schedules.grace_ms",
    "schedules.min_interval_ms",
    "schedules.batch",
    "schedules.max_per_tenant",
    "webhooks.poll_interval_ms",
    "webhooks.batch",
    "webhooks.timeout_ms",
    "webhooks.retry_base_ms",
    "webhooks.retry_max_ms",
    "webhooks.retry_for_secs",
    "webhooks.disable_after_failures",
];

/// Shown for keys without a value.
pub const UNSET: &str = "(unset)";

/// One line of `config explain`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExplainRow {
    /// Dotted key, e.g. `http.listen`.
    pub key: String,
    /// The effective value, secrets redacted; `(unset)` for an unset optional key.
    pub value: String,
    /// The layer that set it.
    pub source: Layer,
}

/// The rows of `config explain` for `raw`, whose keys' layers `layer_of` reports.
pub(crate) fn rows(raw: &RawConfig, layer_of: impl Fn(&str) -> Layer) -> Vec<ExplainRow> {
    let mut values = Vec::new();
    match serde_json::to_value(raw) {
        Ok(value) => flatten("", &value, &mut values),
        // Unreachable: every field serializes. Still, say so rather than print nothing.
        Err(e) => values.push(("error".to_owned(), e.to_string())),
    }
    values.sort_by_key(|(key, _)| {
        KEY_ORDER
            .iter()
            .position(|k| k == key)
            .unwrap_or(KEY_ORDER.len())
    });
    values
        .into_iter()
        .map(|(key, value)| ExplainRow {
            source: layer_of(&key),
            key,
            value,
        })
        .collect()
}

fn flatten(prefix: &str, value: &serde_json::Value, out: &mut Vec<(String, String)>) {
    use serde_json::Value as J;
    let text = match value {
        J::Object(map) => {
            for (key, inner) in map {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                flatten(&path, inner, out);
            }
            return;
        }
        J::Null => UNSET.to_owned(),
        J::String(s) if s.is_empty() => "\"\"".to_owned(),
        J::String(s) => s.clone(),
        other => other.to_string(),
    };
    out.push((prefix.to_owned(), text));
}

/// The text `baton config explain` prints: a header and one aligned line per key.
pub(crate) fn render(rows: &[ExplainRow]) -> String {
    let header = ExplainRow {
        key: "KEY".to_owned(),
        value: "VALUE".to_owned(),
        source: Layer::Default,
    };
    let key_width = rows.iter().chain([&header]).map(|r| r.key.len()).max();
    let value_width = rows.iter().chain([&header]).map(|r| r.value.len()).max();
    let (key_width, value_width) = (key_width.unwrap_or(0), value_width.unwrap_or(0));
    let mut out = format!("{:key_width$}  {:value_width$}  SOURCE\n", "KEY", "VALUE");
    for row in rows {
        let line = format!(
            "{:key_width$}  {:value_width$}  {}",
            row.key, row.value, row.source
        );
        out.push_str(&line);
        out.push('\n');
    }
    out
}

impl fmt::Display for ExplainRow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} = {} ({})", self.key, self.value, self.source)
    }
}
