//! Run leases: the fenced ownership of a run by the replica that drives it.

use super::Fence;
use crate::error::StoreError;
use async_trait::async_trait;
use baton_events::{RunId, TenantId};
use chrono::{DateTime, Utc};

/// A run whose lease a replica just took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedRun {
    pub tenant: TenantId,
    pub run: RunId,
    pub epoch: i64,
    /// `new` (no owner before), `adopted` (the owner's lease expired) or `handoff`
    /// (the owner released it while draining).
    pub reason: baton_events::LeaseReason,
}

/// A lease a replica still holds, as its renewal found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldLease {
    pub tenant: TenantId,
    pub run: RunId,
    pub epoch: i64,
}

/// Run leases: only the holder of a run's lease drives it. Expiry is
/// `now + ttl`; an expired lease may be taken by anyone, which bumps the epoch and so
/// fences the previous holder's appends.
#[async_trait]
pub trait LeaseStore: Send + Sync {
    /// Takes the lease of runs that need driving (a turn in progress or a cancel
    /// pending) whose lease is free or expired, oldest first, at most `limit`; concurrent
    /// claimers skip each other's rows. With `only`, considers that one run alone.
    async fn claim_runs(
        &self,
        owner: &str,
        ttl: std::time::Duration,
        now: DateTime<Utc>,
        limit: u32,
        only: Option<(TenantId, RunId)>,
    ) -> Result<Vec<ClaimedRun>, StoreError>;

    /// Extends every lease `owner` holds, in ONE statement, and returns the leases it
    /// still holds; a run missing from the answer was lost (taken after expiry).
    async fn renew_leases(
        &self,
        owner: &str,
        ttl: std::time::Duration,
        now: DateTime<Utc>,
    ) -> Result<Vec<HeldLease>, StoreError>;

    /// Gives a lease up if it is still `fence`'s; returns whether it was.
    async fn release_lease(
        &self,
        tenant: TenantId,
        run: RunId,
        fence: &Fence,
    ) -> Result<bool, StoreError>;

    /// Ends every lease at `now`, whoever holds it, so the next claim adopts the runs at
    /// once; returns how many it ended. Only for a process that knows every other holder
    /// is gone: the embedded tier's, which holds its data directory's lock.
    async fn expire_leases(&self, now: DateTime<Utc>) -> Result<u64, StoreError>;
}
