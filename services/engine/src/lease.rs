//! A run lease as this replica holds it (the fence its appends carry) and the count of
//! lease claims by why they were taken. Claiming, renewing and releasing go through the
//! `LeaseStore` port; this module owns no I/O.

use baton_core::TenantId;
use baton_core::ports::{ClaimedRun, Fence};
use baton_events::LeaseReason;

/// A run lease this replica holds.
#[derive(Debug, Clone)]
pub(crate) struct Lease {
    pub(crate) tenant: TenantId,
    pub(crate) fence: Fence,
    /// `lease.acquired` is in the stream (it goes with the first fenced append).
    pub(crate) announced: bool,
    pub(crate) reason: LeaseReason,
}

impl Lease {
    /// The lease `replica` just claimed, not yet announced; counts the claim.
    pub(crate) fn claimed(replica: &str, claim: &ClaimedRun) -> Self {
        count_claim(claim.reason);
        Self {
            tenant: claim.tenant,
            fence: Fence {
                owner: replica.to_owned(),
                epoch: claim.epoch,
            },
            announced: false,
            reason: claim.reason,
        }
    }
}

/// Counts a lease claim by why it was taken.
fn count_claim(reason: LeaseReason) {
    let reason = match reason {
        LeaseReason::New => "new",
        LeaseReason::Adopted => "adopted",
        LeaseReason::Handoff => "handoff",
    };
    metrics::counter!("baton_lease_claims_total", "reason" => reason).increment(1);
}
