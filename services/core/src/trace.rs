//! W3C trace context carried with the work it belongs to: the HTTP layer scopes each
//! request with the caller's `traceparent`, the use cases record it in the metadata of the
//! events they append, the engine carries a turn's on to every event of that turn (so one
//! turn reads as one trace whichever replica drives it), and the bus copies it into NATS
//! headers.
//!
//! When traces are exported (the server installed an OpenTelemetry layer), the context
//! recorded is that of the current `tracing` span, so what a replica does for a request
//! or a turn becomes a child of the span that asked for it: [`adopt`] makes a span the
//! child of a context read from a header or an event, [`current`] is the context to pass
//! on. Without an exporter no span has a context, and the caller's `traceparent` is
//! passed on unchanged.

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use std::future::Future;
use tracing_opentelemetry::OpenTelemetrySpanExt;

tokio::task_local! {
    static TRACEPARENT: Option<String>;
}

/// Runs `f` with `traceparent` as the current trace context.
pub async fn scope<F: Future>(traceparent: Option<String>, f: F) -> F::Output {
    TRACEPARENT.scope(traceparent, f).await
}

/// The trace context of the work in progress, if any: the current span's when traces are
/// exported, else the one the work was scoped with.
pub fn current() -> Option<String> {
    of_span(&tracing::Span::current()).or_else(|| TRACEPARENT.try_with(Clone::clone).ok().flatten())
}

/// Makes `span` a child of `traceparent` (a context from another process: a request
/// header, an event's metadata). Call it before the span is first entered. A no-op
/// without a context, without an exporter or for a disabled span.
pub fn adopt(span: &tracing::Span, traceparent: Option<&str>) {
    let Some(remote) = traceparent.and_then(span_context) else {
        return;
    };
    let parent = opentelemetry::Context::new().with_remote_span_context(remote);
    // An error means there is nothing to link: no exporter, or a span the filter disabled.
    let _ = span.set_parent(parent);
}

/// The `traceparent` of `span`, when traces are exported and the span is enabled.
pub fn of_span(span: &tracing::Span) -> Option<String> {
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    sc.is_valid().then(|| {
        format!(
            "00-{:032x}-{:016x}-{:02x}",
            sc.trace_id(),
            sc.span_id(),
            sc.trace_flags().to_u8()
        )
    })
}

/// The remote span context a well-formed `traceparent` names.
fn span_context(traceparent: &str) -> Option<SpanContext> {
    let tp = parse(traceparent)?;
    let mut parts = tp.split('-').skip(1);
    let trace = TraceId::from_hex(parts.next()?).ok()?;
    let span = SpanId::from_hex(parts.next()?).ok()?;
    let flags = u8::from_str_radix(parts.next()?, 16).ok()?;
    Some(SpanContext::new(
        trace,
        span,
        TraceFlags::new(flags),
        true,
        TraceState::default(),
    ))
}

/// A `traceparent` header value if it is well formed (`00-<32 hex>-<16 hex>-<2 hex>`,
/// ids not all zero), lower-cased; anything else is ignored, as the W3C spec asks.
pub fn parse(value: &str) -> Option<String> {
    let v = value.trim().to_ascii_lowercase();
    let parts: Vec<&str> = v.split('-').collect();
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    let zero = |s: &str| s.bytes().all(|b| b == b'0');
    match parts.as_slice() {
        [version, trace, span, flags]
            if hex(version, 2)
                && *version != "ff"
                && hex(trace, 32)
                && !zero(trace)
                && hex(span, 16)
                && !zero(span)
                && hex(flags, 2) =>
        {
            Some(v)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn only_well_formed_trace_contexts_are_kept() {
        assert_eq!(parse(TP).as_deref(), Some(TP));
        assert_eq!(parse(&TP.to_uppercase()).as_deref(), Some(TP));
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473x-00f067aa0ba902b7-01",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }

    #[tokio::test]
    async fn the_context_is_current_inside_its_scope_only() {
        assert_eq!(current(), None);
        let inside = scope(Some(TP.into()), async { current() }).await;
        assert_eq!(inside.as_deref(), Some(TP));
        assert_eq!(current(), None);
    }

    #[test]
    fn a_traceparent_names_its_span_context() {
        let sc = span_context(TP).expect("well formed");
        assert_eq!(
            format!("{:032x}", sc.trace_id()),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(format!("{:016x}", sc.span_id()), "00f067aa0ba902b7");
        assert!(sc.is_sampled() && sc.is_remote());
        assert!(span_context("00-zz").is_none());
    }

    #[tokio::test]
    async fn without_an_exporter_the_callers_context_passes_on_unchanged() {
        let span = tracing::info_span!("work");
        adopt(&span, Some(TP));
        assert_eq!(of_span(&span), None);
        let inside = scope(Some(TP.into()), async {
            let _g = span.enter();
            current()
        })
        .await;
        assert_eq!(inside.as_deref(), Some(TP));
    }
}
