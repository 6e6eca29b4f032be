//! Retention: how long a tenant's ended runs are kept, and what the retention job has
//! deleted of them.

use chrono::{DateTime, Utc};

/// The longest retention a policy may name, in days (100 years).
pub const MAX_RETENTION_DAYS: u32 = 36_500;

/// A tenant's retention policy and the job's progress on it, as the store keeps them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetentionPolicy {
    /// Days an ended run (`completed`, `failed`, `cancelled`) is kept after its last
    /// change, for agents that set no `limits.retention_days` of their own; `null`: kept
    /// until deleted.
    pub run_days: Option<u32>,
    /// Runs the retention job has deleted in the tenant.
    pub deleted_runs: u64,
    /// When it last deleted one; `null` when it never did.
    pub last_deleted_at: Option<DateTime<Utc>>,
    /// When an admin last set the policy; `None` when none ever did (the row only counts
    /// the job's deletions).
    pub updated_at: Option<DateTime<Utc>>,
}

/// One run past its retention, as the job finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpiredRun {
    pub tenant: baton_events::TenantId,
    pub run: baton_events::RunId,
    /// The run's version when it was found: the delete is refused if it moved.
    pub version: i64,
}
