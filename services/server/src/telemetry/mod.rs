//! Logging set-up (an env filter and pretty or JSON lines on stderr; spans carry the
//! request id, tenant and run as fields, set where the work is), trace export over OTLP,
//! and, in [`metrics`], the Prometheus recorder.
//!
//! Traces are exported when `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set: spans go over OTLP/gRPC in batches
//! (the standard `OTEL_BSP_*` variables tune them), tagged with the service name
//! (`OTEL_SERVICE_NAME`, default `baton`) and `service.instance.id` = this replica's name,
//! `/`, and a random id of this process. The spans exported are those at `info` and above from Baton's
//! crates, whatever the log filter says: HTTP requests, use cases, store calls, turn
//! steps, model and tool calls. `baton_core::trace` links them across replicas.

pub mod metrics;

use crate::config::{LogConfig, LogFormat};
use anyhow::Context as _;
use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// The variables that turn trace export on, most specific first.
const ENDPOINT_VARS: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
];

/// Installs the global subscriber for a one-shot command: logs only.
/// `RUST_LOG`, when set, overrides `log.filter`.
pub fn init(log: &LogConfig) {
    // A second init (tests) keeps the first subscriber.
    let _ = tracing_subscriber::registry()
        .with(fmt_layer(log))
        .try_init();
}

/// Installs the global subscriber for `serve`: logs, and trace export when an OTLP
/// endpoint is configured. Must run inside the Tokio runtime (the exporter's channel
/// lives on it). Call [`Traces::shutdown`] before exiting so the last spans are sent.
pub fn init_serving(log: &LogConfig, replica: &str) -> anyhow::Result<Traces> {
    let endpoint = ENDPOINT_VARS
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|e| !e.trim().is_empty()));
    let Some(endpoint) = endpoint else {
        init(log);
        return Ok(Traces { provider: None });
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .build()
        .with_context(|| format!("setting up trace export to {endpoint}"))?;
    let service = std::env::var("OTEL_SERVICE_NAME").unwrap_or_else(|_| "baton".into());
    let resource = Resource::builder()
        .with_service_name(service)
        .with_attributes([
            // Unique per process, as the convention asks: two replicas may share a name
            // (the default, or a pod name reused), never a boot.
            KeyValue::new(
                "service.instance.id",
                format!("{replica}/{}", uuid::Uuid::new_v4().simple()),
            ),
            KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
        ])
        .build();
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build();
    let spans = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("baton"))
        // Baton's own spans only (every baton_* crate): not the exporter's or the drivers'.
        .with_filter(EnvFilter::new("off,baton=info"));
    let _ = tracing_subscriber::registry()
        .with(fmt_layer(log))
        .with(spans)
        .try_init();
    tracing::info!(%endpoint, "exporting traces over OTLP");
    Ok(Traces {
        provider: Some(provider),
    })
}

/// Log lines on stderr, filtered by `RUST_LOG` or `log.filter`.
fn fmt_layer<S>(log: &LogConfig) -> Box<dyn Layer<S> + Send + Sync>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    let filter = std::env::var("RUST_LOG")
        .ok()
        .and_then(|f| EnvFilter::try_new(f).ok())
        .unwrap_or_else(|| EnvFilter::new(&log.filter));
    // Colours only on a terminal: escapes in a redirected file are noise.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    match log.format {
        LogFormat::Json => layer.json().with_filter(filter).boxed(),
        LogFormat::Pretty => layer.with_filter(filter).boxed(),
    }
}

/// The trace exporter, when there is one.
#[must_use = "call shutdown to send the last spans"]
pub struct Traces {
    provider: Option<SdkTracerProvider>,
}

impl Traces {
    /// Sends the spans still queued and stops the exporter.
    pub async fn shutdown(self) {
        let Some(provider) = self.provider else {
            return;
        };
        // The provider blocks until its export thread is done, and that thread needs
        // the runtime to drive the gRPC channel: wait for it off the runtime's workers.
        let done = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        if let Ok(Err(e)) = done {
            eprintln!("trace export did not shut down cleanly: {e}");
        }
    }
}
