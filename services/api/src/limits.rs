//! Request rate limits per API key and per tenant (`http.key_rate_limit`,
//! `http.tenant_rate_limit`): token buckets refilled at the configured rate, holding
//! twice as much for bursts. Each replica counts the requests it serves, so a cluster of N
//! replicas behind a balancer allows up to N times the configured rate; the limits are a
//! guard against runaway clients, not a billing meter. Checked once a caller is
//! authenticated, so a request that fails authentication costs nobody's budget.

use baton_core::{Principal, TenantId};
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use std::hash::Hash;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

/// Keys a limiter tracks before it forgets those whose bucket is full again, so the
/// number of keys clients can make it hold stays bounded.
const TRACKED: usize = 100_000;

/// One keyed token bucket, or none (no limit); cheap to clone. Shared by the request
/// limits here and the login limits (`accounts`).
#[derive(Clone)]
pub struct Buckets<K: Hash + Eq + Clone> {
    limiter: Option<Arc<DefaultKeyedRateLimiter<K>>>,
}

impl<K: Hash + Eq + Clone> Default for Buckets<K> {
    fn default() -> Self {
        Self { limiter: None }
    }
}

impl<K: Hash + Eq + Clone> Buckets<K> {
    /// Buckets refilled by `quota`; `None` means no limit.
    pub fn new(quota: Option<Quota>) -> Self {
        Self {
            limiter: quota.map(|q| Arc::new(RateLimiter::keyed(q))),
        }
    }

    /// `n` per second with bursts of twice as many (0: no limit).
    pub fn per_second(n: u32) -> Self {
        let quota = NonZeroU32::new(n).and_then(|rate| {
            let burst = NonZeroU32::new(n.saturating_mul(2))?;
            Some(Quota::per_second(rate).allow_burst(burst))
        });
        Self::new(quota)
    }

    /// `n` per minute, a minute's worth in a burst (0: no limit).
    pub fn per_minute(n: u32) -> Self {
        Self::new(NonZeroU32::new(n).map(Quota::per_minute))
    }

    /// Counts one request of `key`; `what` names the budget in the refusal.
    pub fn check(&self, key: &K, what: &'static str) -> Result<(), Exceeded> {
        let Some(limiter) = &self.limiter else {
            return Ok(());
        };
        let now = DefaultClock::default().now();
        let checked = limiter.check_key(key);
        if limiter.len() > TRACKED {
            limiter.retain_recent();
        }
        checked.map_err(|not_until| Exceeded {
            what,
            wait: not_until.wait_time_from(now),
        })
    }
}

/// The limiters of one replica; cheap to clone.
#[derive(Clone, Default)]
pub struct RateLimits {
    keys: Buckets<String>,
    tenants: Buckets<TenantId>,
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
            keys: Buckets::per_second(per_key),
            tenants: Buckets::per_second(per_tenant),
        }
    }

    /// Counts one request of `caller` against its key's and its tenant's budgets.
    pub fn check(&self, caller: &Principal) -> Result<(), Exceeded> {
        self.keys.check(&caller.actor, "this API key")?;
        self.tenants.check(&caller.tenant, "this tenant")
    }
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
            source: None,
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
