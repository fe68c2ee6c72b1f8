//! A small bounded cache of review answers with one time-to-live for every entry. Pure: the
//! caller passes `now`. It holds no locks and no secrets of its own (keys are digests or user
//! names, never tokens); `kubernetes.rs` wraps it in a mutex.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

/// Entries kept at most per cache. Bounds memory when many distinct tokens (a scan with
/// random tokens, say) are reviewed within one TTL; 10,000 entries are a few MB.
pub const MAX_ENTRIES: usize = 10_000;

/// Answers by key, each good until its expiry.
#[derive(Debug)]
pub struct TtlCache<K, V> {
    ttl: Duration,
    max: usize,
    entries: HashMap<K, (V, Instant)>,
}

impl<K: Eq + Hash + Clone, V: Clone> TtlCache<K, V> {
    /// A cache keeping answers for `ttl` (zero: keep nothing) and at most `max` of them.
    pub fn new(ttl: Duration, max: usize) -> Self {
        Self {
            ttl,
            max,
            entries: HashMap::new(),
        }
    }

    /// The answer for `key` if it has not expired at `now`.
    pub fn get(&mut self, key: &K, now: Instant) -> Option<V> {
        match self.entries.get(key) {
            Some((v, expires)) if *expires > now => Some(v.clone()),
            Some(_) => {
                self.entries.remove(key);
                None
            }
            None => None,
        }
    }

    /// Stores `value` for `key` until `now + ttl`. When full, drops expired entries first, then
    /// the oldest (with one TTL for all, the one expiring first).
    pub fn insert(&mut self, key: K, value: V, now: Instant) {
        if self.ttl.is_zero() || self.max == 0 {
            return;
        }
        if !self.entries.contains_key(&key) && self.entries.len() >= self.max {
            self.entries.retain(|_, (_, expires)| *expires > now);
            while self.entries.len() >= self.max {
                let Some(oldest) = self
                    .entries
                    .iter()
                    .min_by_key(|(_, (_, expires))| *expires)
                    .map(|(k, _)| k.clone())
                else {
                    break;
                };
                self.entries.remove(&oldest);
            }
        }
        self.entries.insert(key, (value, now + self.ttl));
    }

    /// How many entries are held (expired ones included until touched or evicted).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_expire_after_the_ttl() {
        let t0 = Instant::now();
        let mut c = TtlCache::new(Duration::from_secs(10), 100);
        c.insert("a", 1, t0);
        assert_eq!(c.get(&"a", t0 + Duration::from_secs(9)), Some(1));
        assert_eq!(c.get(&"a", t0 + Duration::from_secs(10)), None);
        assert_eq!(c.len(), 0);
    }

    #[test]
    fn zero_ttl_keeps_nothing() {
        let t0 = Instant::now();
        let mut c = TtlCache::new(Duration::ZERO, 100);
        c.insert("a", 1, t0);
        assert_eq!(c.get(&"a", t0), None);
    }

    #[test]
    fn bounded_evicting_expired_then_oldest() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut c = TtlCache::new(s(10), 3);
        c.insert("a", 1, t0);
        c.insert("b", 2, t0 + s(1));
        c.insert("c", 3, t0 + s(2));
        // Full: "d" evicts the oldest, "a".
        c.insert("d", 4, t0 + s(3));
        assert_eq!(c.len(), 3);
        assert_eq!(c.get(&"a", t0 + s(3)), None);
        assert_eq!(c.get(&"b", t0 + s(3)), Some(2));
        // Replacing a present key evicts nothing.
        c.insert("d", 5, t0 + s(4));
        assert_eq!(c.len(), 3);
        assert_eq!(c.get(&"c", t0 + s(4)), Some(3));
        // At t0+12 "b" and "c" have expired: both go, "d" stays.
        c.insert("e", 6, t0 + s(12));
        assert_eq!(c.len(), 2);
        assert_eq!(c.get(&"d", t0 + s(12)), Some(5));
        assert_eq!(c.get(&"e", t0 + s(12)), Some(6));
    }
}
