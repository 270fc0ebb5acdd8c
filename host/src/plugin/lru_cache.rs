//! [`BoundedLru`]: the host's in-memory caches of compiled and linked
//! plugin code, bounded by entries and by bytes.
//!
//! Rules: at its bound the cache evicts least recently used entries first
//! and never grows beyond either bound; an entry larger than the byte bound
//! on its own is not kept at all. Evicting only costs speed: whoever holds
//! a value (a plugin in service holds its code) keeps it; the next load of
//! an evicted component maps its artifact from disk, or compiles it again.

use lru::LruCache;
use std::num::NonZeroUsize;

/// An LRU map from cache keys to values with a size each (see the module
/// doc).
pub(crate) struct BoundedLru<V> {
    map: LruCache<String, (V, usize)>,
    bytes: usize,
    max_bytes: usize,
}

impl<V: Clone> BoundedLru<V> {
    /// A cache of at most `max_entries` entries and `max_bytes` bytes.
    pub(crate) fn new(max_entries: NonZeroUsize, max_bytes: usize) -> Self {
        BoundedLru {
            map: LruCache::new(max_entries),
            bytes: 0,
            max_bytes,
        }
    }

    /// The value for `key`, now the most recently used.
    pub(crate) fn get(&mut self, key: &str) -> Option<V> {
        self.map.get(key).map(|(v, _)| v.clone())
    }

    /// Whether `key` is cached (its recency unchanged).
    pub(crate) fn contains(&self, key: &str) -> bool {
        self.map.contains(key)
    }

    /// Keep `value` of `size` bytes under `key`, evicting what the bounds
    /// require (least recently used first).
    pub(crate) fn insert(&mut self, key: String, value: V, size: usize) {
        self.remove(&key);
        if size > self.max_bytes {
            return;
        }
        while self.bytes.saturating_add(size) > self.max_bytes {
            match self.map.pop_lru() {
                Some((_, (_, s))) => self.bytes = self.bytes.saturating_sub(s),
                None => break,
            }
        }
        if let Some((_, (_, s))) = self.map.push(key, (value, size)) {
            self.bytes = self.bytes.saturating_sub(s);
        }
        self.bytes = self.bytes.saturating_add(size);
    }

    /// Forget `key`.
    pub(crate) fn remove(&mut self, key: &str) {
        if let Some((_, s)) = self.map.pop(key) {
            self.bytes = self.bytes.saturating_sub(s);
        }
    }

    /// Forget everything.
    pub(crate) fn clear(&mut self) {
        self.map.clear();
        self.bytes = 0;
    }

    /// Entries kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// Bytes kept (the sum of the entries' sizes).
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(entries: usize, bytes: usize) -> BoundedLru<u32> {
        BoundedLru::new(
            NonZeroUsize::new(entries).unwrap_or(NonZeroUsize::MIN),
            bytes,
        )
    }

    #[test]
    fn at_its_entry_bound_it_evicts_the_least_recently_used() {
        let mut c = cache(3, 1000);
        for (i, k) in ["a", "b", "c"].into_iter().enumerate() {
            c.insert(k.into(), i as u32, 10);
        }
        assert_eq!(c.get("a"), Some(0)); // now the most recent
        for i in 0..100u32 {
            c.insert(format!("k{i}"), i, 10);
            assert!(c.len() <= 3 && c.bytes() <= 30, "{} {}", c.len(), c.bytes());
        }
        assert_eq!(c.len(), 3);
        assert_eq!(c.bytes(), 30);
        assert!(!c.contains("a") && !c.contains("b"));
        assert_eq!(c.get("k99"), Some(99));
    }

    #[test]
    fn at_its_byte_bound_it_evicts_until_the_new_entry_fits() {
        let mut c = cache(100, 100);
        c.insert("a".into(), 1, 40);
        c.insert("b".into(), 2, 40);
        assert_eq!(c.get("a"), Some(1));
        c.insert("c".into(), 3, 40);
        // `b` was the least recently used.
        assert!(c.contains("a") && !c.contains("b") && c.contains("c"));
        assert_eq!(c.bytes(), 80);
        // One entry larger than the bound is not kept, and costs nothing.
        c.insert("huge".into(), 4, 101);
        assert!(!c.contains("huge"));
        assert_eq!((c.len(), c.bytes()), (2, 80));
        // Replacing an entry counts its new size only.
        c.insert("a".into(), 5, 10);
        assert_eq!((c.len(), c.bytes()), (2, 50));
        c.remove("c");
        assert_eq!((c.len(), c.bytes()), (1, 10));
        c.clear();
        assert_eq!((c.len(), c.bytes()), (0, 0));
    }
}
