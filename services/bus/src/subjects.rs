//! Every NATS subject Baton uses is built here; no subject strings elsewhere. Each starts
//! with the installation's prefix (`baton` unless configured), so installations sharing one
//! NATS never receive each other's events or control messages, and an account limited to
//! `<prefix>.>` is all an installation needs.

use baton_events::{RunId, TenantId};
use std::sync::Arc;
use thiserror::Error;

/// The prefix of an installation that names none.
pub const DEFAULT_PREFIX: &str = "baton";

/// Longest prefix, in bytes.
pub const MAX_PREFIX_LEN: usize = 64;

/// A prefix NATS cannot take as the start of a subject.
#[derive(Debug, Error, PartialEq, Eq)]
#[error(
    "the subject prefix must be 1 to {MAX_PREFIX_LEN} characters: one or more tokens of \
     letters, digits, `-` and `_`, separated by single dots"
)]
pub struct InvalidPrefix;

/// The subjects of one installation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subjects {
    prefix: Arc<str>,
}

impl Default for Subjects {
    fn default() -> Self {
        Self {
            prefix: DEFAULT_PREFIX.into(),
        }
    }
}

impl Subjects {
    /// The subjects under `prefix` (`acme-prod`, `baton.eu1`): tokens of letters, digits,
    /// `-` and `_` separated by single dots; no wildcards or spaces.
    pub fn new(prefix: &str) -> Result<Self, InvalidPrefix> {
        let token_ok = |t: &str| {
            !t.is_empty()
                && t.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        };
        if prefix.len() > MAX_PREFIX_LEN || !prefix.split('.').all(token_ok) {
            return Err(InvalidPrefix);
        }
        Ok(Self {
            prefix: prefix.into(),
        })
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Durable events of one run: `<prefix>.ev.<tenant>.<run>`.
    pub fn event(&self, tenant: TenantId, run: RunId) -> String {
        format!("{}.ev.{tenant}.{run}", self.prefix)
    }

    /// Every durable event of every run of the installation.
    pub fn all_events(&self) -> String {
        format!("{}.ev.>", self.prefix)
    }

    /// Ephemeral events (token deltas, progress) of one run: `<prefix>.delta.<tenant>.<run>`.
    pub fn delta(&self, tenant: TenantId, run: RunId) -> String {
        format!("{}.delta.{tenant}.{run}", self.prefix)
    }

    /// Control messages between replicas (wake a run's driver, adopt now): one subject,
    /// JSON tagged by `kind`.
    pub fn control(&self) -> String {
        format!("{}.ctl.cluster", self.prefix)
    }

    /// A subject of its own for one round trip to the server: `<prefix>.probe.<random>`,
    /// which no other subscription matches.
    pub fn probe(&self) -> String {
        format!("{}.probe.{}", self.prefix, uuid::Uuid::new_v4().simple())
    }

    /// Everything the installation publishes or subscribes to: what its NATS account must
    /// allow, for both publishing and subscribing.
    pub fn all(&self) -> String {
        format!("{}.>", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_subjects_fall_under_the_wildcard_and_the_installation() {
        let s = Subjects::default();
        let event = s.event(TenantId::new(), RunId::new());
        assert!(event.starts_with(s.all_events().trim_end_matches('>')));
        assert!(event.starts_with(s.all().trim_end_matches('>')));
        assert_eq!(
            event.split('.').count(),
            4,
            "uuids contain no dots: {event}"
        );
        for subject in [s.control(), s.delta(TenantId::new(), RunId::new())] {
            assert!(subject.starts_with("baton."), "{subject}");
        }
    }

    #[test]
    fn another_prefix_shares_no_subject_with_the_default() {
        let (a, b) = (
            Subjects::default(),
            Subjects::new("acme.eu-1").expect("valid"),
        );
        let (t, r) = (TenantId::new(), RunId::new());
        assert_eq!(b.event(t, r), format!("acme.eu-1.ev.{t}.{r}"));
        assert_ne!(a.control(), b.control());
        assert!(!b.event(t, r).starts_with(a.all().trim_end_matches('>')));
        assert!(!a.event(t, r).starts_with(b.all().trim_end_matches('>')));
    }

    #[test]
    fn prefixes_nats_would_misread_are_refused() {
        let long = "a".repeat(MAX_PREFIX_LEN + 1);
        for bad in [
            "",
            ".",
            "a.",
            ".a",
            "a..b",
            "a b",
            "a.*",
            "a.>",
            "ä",
            long.as_str(),
        ] {
            assert_eq!(Subjects::new(bad), Err(InvalidPrefix), "{bad:?}");
        }
        for good in ["baton", "acme-prod", "a_b.c-d.e1"] {
            assert!(Subjects::new(good).is_ok(), "{good:?}");
        }
    }
}
