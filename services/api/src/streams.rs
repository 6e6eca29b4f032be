//! Open event streams per caller and per tenant (`http.sse_streams_per_key`,
//! `http.sse_streams_per_tenant`): a stream holds a [`StreamPermit`] for as long as it is
//! open, and one more than a limit is refused with `429` and `Retry-After`. Like the rate
//! limits, each replica counts its own streams.

use crate::limits::Exceeded;
use baton_core::{Principal, TenantId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// When a refused client may try again: a stream of its own may have ended by then.
const RETRY_AFTER: Duration = Duration::from_secs(5);

#[derive(Default)]
struct Open {
    callers: HashMap<String, u32>,
    tenants: HashMap<TenantId, u32>,
}

/// The open streams of one replica; cheap to clone.
#[derive(Clone, Default)]
pub struct StreamLimits {
    per_caller: u32,
    per_tenant: u32,
    open: Arc<Mutex<Open>>,
}

/// One open stream, counted until dropped.
pub struct StreamPermit {
    open: Arc<Mutex<Open>>,
    caller: String,
    tenant: TenantId,
}

impl StreamLimits {
    /// At most `per_caller` streams per API key, session or local owner and `per_tenant`
    /// per tenant (0: no limit).
    pub fn new(per_caller: u32, per_tenant: u32) -> Self {
        Self {
            per_caller,
            per_tenant,
            open: Arc::default(),
        }
    }

    /// Counts a new stream of `caller`, or refuses it when either limit is reached.
    pub fn open(&self, caller: &Principal) -> Result<StreamPermit, Exceeded> {
        let mut open = lock(&self.open);
        let mine = open.callers.get(&caller.actor).copied().unwrap_or(0);
        let tenants = open.tenants.get(&caller.tenant).copied().unwrap_or(0);
        let refuse = |what| Exceeded {
            what,
            wait: RETRY_AFTER,
        };
        if self.per_caller != 0 && mine >= self.per_caller {
            return Err(refuse("open event streams of these credentials"));
        }
        if self.per_tenant != 0 && tenants >= self.per_tenant {
            return Err(refuse("open event streams of this tenant"));
        }
        *open.callers.entry(caller.actor.clone()).or_default() += 1;
        *open.tenants.entry(caller.tenant).or_default() += 1;
        Ok(StreamPermit {
            open: self.open.clone(),
            caller: caller.actor.clone(),
            tenant: caller.tenant,
        })
    }
}

impl Drop for StreamPermit {
    fn drop(&mut self) {
        let mut open = lock(&self.open);
        release(&mut open.callers, &self.caller);
        release(&mut open.tenants, &self.tenant);
    }
}

/// One fewer for `key`, forgetting it at zero so the maps hold only open streams.
fn release<K: std::hash::Hash + Eq>(counts: &mut HashMap<K, u32>, key: &K) {
    if let Some(n) = counts.get_mut(key) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            counts.remove(key);
        }
    }
}

fn lock(open: &Mutex<Open>) -> MutexGuard<'_, Open> {
    // The counts stay whole whatever panicked while holding the lock.
    open.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_core::Role;

    fn caller(tenant: TenantId, key: &str) -> Principal {
        Principal {
            tenant,
            role: Role::Viewer,
            actor: format!("key:{key}"),
            source: None,
        }
    }

    #[test]
    fn a_caller_holds_at_most_its_limit_and_a_closed_stream_frees_a_place() {
        let limits = StreamLimits::new(2, 0);
        let a = caller(TenantId::new(), "a");
        let first = limits.open(&a).expect("one");
        let _second = limits.open(&a).expect("two");
        let refused = limits.open(&a).err().expect("three is one too many");
        assert_eq!(refused.what, "open event streams of these credentials");
        assert_eq!(refused.wait, RETRY_AFTER);
        assert!(limits.open(&caller(a.tenant, "b")).is_ok(), "another key");
        drop(first);
        assert!(limits.open(&a).is_ok(), "a place is free again");
    }

    #[test]
    fn a_tenants_callers_share_its_limit_and_zero_means_none() {
        let limits = StreamLimits::new(0, 3);
        let tenant = TenantId::new();
        let held: Vec<_> = ["a", "b", "c"]
            .iter()
            .map(|k| limits.open(&caller(tenant, k)).expect("within"))
            .collect();
        let refused = limits.open(&caller(tenant, "d")).err().expect("full");
        assert_eq!(refused.what, "open event streams of this tenant");
        assert!(limits.open(&caller(TenantId::new(), "a")).is_ok());
        drop(held);
        assert!(
            !lock(&limits.open).tenants.contains_key(&tenant),
            "forgotten at zero"
        );
        let unlimited = StreamLimits::new(0, 0);
        let keep: Vec<_> = (0..1000)
            .map(|_| unlimited.open(&caller(tenant, "a")).expect("no limit"))
            .collect();
        assert_eq!(keep.len(), 1000);
    }
}
