//! A replica's cache of workspace contents, so that a command's private copy is made
//! without reading from the database what this replica read or wrote before. Keyed by
//! tenant and SHA-256 (a content is immutable under its name, so an entry is never stale),
//! bounded by bytes, least recently used first out. The database stays the only source of
//! truth: a miss reads the run's contents in one query (`WorkspaceStore::run_contents`).

use baton_core::TenantId;
use hashlink::LinkedHashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// A content, shared by the copies being made of it.
pub type Content = Arc<Vec<u8>>;

/// The cache; cheap to share (`Arc`).
#[derive(Debug)]
pub struct ContentCache {
    capacity: u64,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Oldest use first.
    entries: LinkedHashMap<(TenantId, String), Content>,
    bytes: u64,
}

impl ContentCache {
    /// A cache of at most `capacity` bytes of contents (0: none kept).
    pub fn new(capacity: u64) -> Self {
        Self {
            capacity,
            inner: Mutex::default(),
        }
    }

    /// The content `sha256` of `tenant`, if kept; it becomes the most recently used.
    pub fn get(&self, tenant: TenantId, sha256: &str) -> Option<Content> {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (tenant, sha256.to_string());
        let found = inner.entries.remove(&key)?;
        inner.entries.insert(key, found.clone());
        Some(found)
    }

    /// Keeps `content` as `sha256` of `tenant`, dropping the least recently used entries
    /// past the capacity; a content larger than the whole cache is not kept.
    pub fn put(&self, tenant: TenantId, sha256: String, content: Content) {
        let size = content.len() as u64;
        if size > self.capacity {
            return;
        }
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(old) = inner.entries.insert((tenant, sha256), content) {
            inner.bytes -= old.len() as u64;
        }
        inner.bytes += size;
        while inner.bytes > self.capacity {
            match inner.entries.pop_front() {
                Some((_, evicted)) => inner.bytes -= evicted.len() as u64,
                None => break,
            }
        }
    }

    /// The bytes kept.
    pub fn bytes(&self) -> u64 {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn content(n: usize) -> Content {
        Arc::new(vec![7; n])
    }

    #[test]
    fn the_least_recently_used_go_first_and_the_bytes_stay_bounded() {
        let cache = ContentCache::new(10);
        let t = TenantId::new();
        cache.put(t, "a".into(), content(4));
        cache.put(t, "b".into(), content(4));
        assert!(cache.get(t, "a").is_some(), "a is now the most recent");
        cache.put(t, "c".into(), content(4));
        assert!(cache.get(t, "b").is_none(), "b was the least recently used");
        assert!(cache.get(t, "a").is_some() && cache.get(t, "c").is_some());
        assert_eq!(cache.bytes(), 8);
        cache.put(t, "huge".into(), content(11));
        assert!(
            cache.get(t, "huge").is_none(),
            "larger than the cache: not kept"
        );
        assert_eq!(cache.bytes(), 8);
        cache.put(t, "a".into(), content(4));
        assert_eq!(cache.bytes(), 8, "a content kept again is counted once");
    }

    #[test]
    fn a_content_is_kept_for_its_tenant_only() {
        let cache = ContentCache::new(100);
        let (a, b) = (TenantId::new(), TenantId::new());
        cache.put(a, "same".into(), content(3));
        assert!(cache.get(b, "same").is_none());
        let none = ContentCache::new(0);
        none.put(a, "x".into(), content(1));
        assert!(none.get(a, "x").is_none());
    }
}
