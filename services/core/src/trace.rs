//! W3C trace context carried with the work it belongs to: the HTTP layer scopes each
//! request with the caller's `traceparent`, the use cases record it in the metadata of the
//! events they append, the engine carries a turn's on to every event of that turn (so one
//! turn reads as one trace whichever replica drives it), and the bus copies it into NATS
//! headers.

use std::future::Future;

tokio::task_local! {
    static TRACEPARENT: Option<String>;
}

/// Runs `f` with `traceparent` as the current trace context.
pub async fn scope<F: Future>(traceparent: Option<String>, f: F) -> F::Output {
    TRACEPARENT.scope(traceparent, f).await
}

/// The trace context of the work in progress, if any.
pub fn current() -> Option<String> {
    TRACEPARENT.try_with(Clone::clone).ok().flatten()
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
}
