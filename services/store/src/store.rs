//! [`Store`]: the one store type, generic over its [`Backend`]. [`crate::PgStore`] and
//! [`crate::SqliteStore`] are its two instances; each backend's module adds how to open
//! it, and `crate::adapter` implements every port once, for any backend.

use crate::backend::Backend;
use crate::pools::Pools;
use std::fmt;

/// A store on backend `B`. Cheap to clone: the pools are shared.
pub struct Store<B: Backend> {
    /// Request work, lease renewal and adoption (`control`, so request load never delays
    /// them), and checkpoint writes (so a burst of them never delays requests); SQLite
    /// has one pool for all of it (and, for a file, one connection for its writes). Reachable only through `read` and `write`, which set
    /// the scope.
    pub(crate) pools: Pools<B>,
    /// What only this backend knows: on Postgres, the role its connections act as.
    pub(crate) info: B::Info,
}

// By hand: a derive would ask `B: Clone`; the pools are handles to shared state.
impl<B: Backend> Clone for Store<B> {
    fn clone(&self) -> Self {
        Store {
            pools: self.pools.clone(),
            info: self.info.clone(),
        }
    }
}

impl<B: Backend> fmt::Debug for Store<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("pools", &self.pools)
            .field("info", &self.info)
            .finish()
    }
}

impl<B: Backend> Store<B> {
    /// The pools' state, for metrics.
    pub fn pool_stats(&self) -> Vec<crate::PoolStats> {
        self.pools.stats()
    }

    /// Closes the pools, waiting for connections in use to be returned.
    pub async fn close(&self) {
        self.pools.close().await;
    }
}
