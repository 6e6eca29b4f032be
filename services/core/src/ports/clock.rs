//! Time, behind a port so tests control it.

use chrono::{DateTime, Utc};

/// Time, behind a port so tests control it.
pub trait Clock: Send + Sync {
    fn now(&self) -> DateTime<Utc>;
}

/// The wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    /// Now, at microsecond precision: what both databases store without rounding.
    fn now(&self) -> DateTime<Utc> {
        use chrono::SubsecRound;
        Utc::now().trunc_subsecs(6)
    }
}
