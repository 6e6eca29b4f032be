//! Request rate limits per API key and per tenant (`http.key_rate_limit`,
//! `http.tenant_rate_limit`): token buckets refilled at the configured rate, holding
//! twice as much for bursts. Each replica counts the requests it serves, so a cluster of N
//! replicas behind a balancer allows up to N times the configured rate; the limits are a
//! guard against runaway clients, not a billing meter. Checked once a caller is
//! authenticated, so a request that fails authentication costs nobody's budget.

use baton_core::{Principal, TenantId};
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

/// The limiters of one replica; cheap to clone.
#[derive(Clone, Default)]
pub struct RateLimits {
    keys: Option<Arc<DefaultKeyedRateLimiter<String>>>,
    tenants: Option<Arc<DefaultKeyedRateLimiter<TenantId>>>,
}

/// Which budget a request exceeded, and when to try again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exceeded {
    pub what: &'static str,
    pub wait: Duration,
}

impl RateLimits {
    /// Limits of `per_key` and `per_tenant` requests per second (0: none).
    pub fn new(per_key: u32, per_tenant: u32) -> Self {
        Self {
            keys: quota(per_key).map(|q| Arc::new(RateLimiter::keyed(q))),
            tenants: quota(per_tenant).map(|q| Arc::new(RateLimiter::keyed(q))),
        }
    }

    /// Counts one request of `caller` against its key's and its tenant's budgets.
    pub fn check(&self, caller: &Principal) -> Result<(), Exceeded> {
        let now = DefaultClock::default().now();
        if let Some(keys) = &self.keys
            && let Err(not_until) = keys.check_key(&caller.actor)
        {
            return Err(Exceeded {
                what: "this API key",
                wait: not_until.wait_time_from(now),
            });
        }
        if let Some(tenants) = &self.tenants
            && let Err(not_until) = tenants.check_key(&caller.tenant)
        {
            return Err(Exceeded {
                what: "this tenant",
                wait: not_until.wait_time_from(now),
            });
        }
        Ok(())
    }
}

fn quota(per_second: u32) -> Option<Quota> {
    let rate = NonZeroU32::new(per_second)?;
    let burst = NonZeroU32::new(per_second.saturating_mul(2))?;
    Some(Quota::per_second(rate).allow_burst(burst))
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_core::Role;

    fn caller(tenant: TenantId, key: &str) -> Principal {
        Principal {
            tenant,
            role: Role::Member,
            actor: format!("key:{key}"),
        }
    }

    #[test]
    fn a_key_gets_a_burst_of_twice_its_rate_then_waits() {
        let limits = RateLimits::new(5, 0);
        let a = caller(TenantId::new(), "a");
        for i in 0..10 {
            assert!(limits.check(&a).is_ok(), "request {i} is within the burst");
        }
        let exceeded = limits.check(&a).expect_err("the burst is spent");
        assert_eq!(exceeded.what, "this API key");
        assert!(exceeded.wait > Duration::ZERO && exceeded.wait <= Duration::from_millis(200));
        // Another key has its own budget.
        assert!(limits.check(&caller(a.tenant, "b")).is_ok());
    }

    #[test]
    fn a_tenants_keys_share_the_tenant_budget() {
        let limits = RateLimits::new(0, 2);
        let tenant = TenantId::new();
        for key in ["a", "b", "c", "d"] {
            assert!(limits.check(&caller(tenant, key)).is_ok());
        }
        let exceeded = limits
            .check(&caller(tenant, "e"))
            .expect_err("four requests spend a burst of four");
        assert_eq!(exceeded.what, "this tenant");
        assert!(limits.check(&caller(TenantId::new(), "a")).is_ok());
    }

    #[test]
    fn zero_means_no_limit() {
        let limits = RateLimits::new(0, 0);
        let a = caller(TenantId::new(), "a");
        assert!((0..10_000).all(|_| limits.check(&a).is_ok()));
    }
}
