//! Every NATS subject Baton uses is built here; no subject strings elsewhere.

use baton_events::{RunId, TenantId};

/// Durable events of one run: `baton.ev.<tenant>.<run>`.
pub fn event(tenant: TenantId, run: RunId) -> String {
    format!("baton.ev.{tenant}.{run}")
}

/// Every durable event of every run.
pub const ALL_EVENTS: &str = "baton.ev.>";

/// Control messages between replicas (wake a run's driver, adopt now): one subject,
/// JSON tagged by `kind`.
pub const CONTROL: &str = "baton.ctl.cluster";

/// Ephemeral events (token deltas, progress) of one run: `baton.delta.<tenant>.<run>`.
pub fn delta(tenant: TenantId, run: RunId) -> String {
    format!("baton.delta.{tenant}.{run}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_subjects_fall_under_the_wildcard() {
        let s = event(TenantId::new(), RunId::new());
        assert!(s.starts_with(ALL_EVENTS.trim_end_matches('>')));
        assert_eq!(s.split('.').count(), 4, "uuids contain no dots: {s}");
    }
}
