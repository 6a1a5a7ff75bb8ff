//! A bounded cache of recently read and written values, so that hot keys (a Zipf workload's
//! few busy accounts) are served from memory while the rest stay on disk.
//!
//! Two-way set associative, indexed by the key's hash: each set keeps its two most recently
//! used entries. No linked lists, no per-access allocation; a miss evicts the set's older
//! entry. An entry also keeps where the key's change lies in the log, so the index can
//! confirm an update of a cached key without reading the key back from disk.

use super::index::Loc;

/// A cached value: the key, its value (`None`: deleted), and its log location when the
/// value came from the log (`None`: from the sorted run).
struct Entry {
    hash: u64,
    key: Box<[u8]>,
    value: Option<Box<[u8]>>,
    loc: Option<Loc>,
}

impl Entry {
    fn bytes(&self) -> usize {
        self.key.len() + self.value.as_ref().map_or(0, |v| v.len()) + ENTRY_OVERHEAD
    }
}

/// Bytes an entry costs beyond its key and value: the struct and two allocations' headers.
const ENTRY_OVERHEAD: usize = std::mem::size_of::<Entry>() + 32;

/// Values larger than this are never cached: one contract's code must not evict every
/// account.
const MAX_CACHED_VALUE: usize = 4096;

/// The cache.
pub struct ValueCache {
    sets: Vec<[Option<Entry>; 2]>,
    bytes: usize,
    /// Hits and misses, for the read-amplification counters.
    pub hits: u64,
    /// Lookups that found nothing.
    pub misses: u64,
    /// Bytes of the keys and values point reads through this shard returned, for
    /// [`crate::StoreStats::user_bytes_read`]: counted here, under the lock a read takes for
    /// its lookup anyway, rather than in an atomic every read would add to.
    pub user_bytes: u64,
}

impl ValueCache {
    /// A cache of about `budget` bytes for entries of typical size (64 bytes each).
    pub fn new(budget: usize) -> Self {
        let sets = (budget / (2 * (ENTRY_OVERHEAD + 64)))
            .max(1)
            .next_power_of_two();
        Self {
            sets: (0..sets).map(|_| [None, None]).collect(),
            bytes: 0,
            hits: 0,
            misses: 0,
            user_bytes: 0,
        }
    }

    fn set(&self, hash: u64) -> usize {
        (hash as usize) & (self.sets.len() - 1)
    }

    /// The way of `set` that holds `key`, if one does.
    fn way(set: &[Option<Entry>; 2], hash: u64, key: &[u8]) -> Option<usize> {
        set.iter()
            .position(|e| e.as_ref().is_some_and(|e| e.hash == hash && *e.key == *key))
    }

    /// The cached value of `key`: `Some(None)` if cached as deleted.
    pub fn get(&mut self, hash: u64, key: &[u8]) -> Option<Option<&[u8]>> {
        let s = self.set(hash);
        let set = &mut self.sets[s];
        match Self::way(set, hash, key) {
            Some(w) => {
                self.hits += 1;
                // Most recent first.
                if w == 1 {
                    set.swap(0, 1);
                }
                Some(set[0].as_ref().expect("found").value.as_deref())
            }
            None => {
                self.misses += 1;
                None
            }
        }
    }

    /// Whether `key`, cached, lies at `loc` in the log.
    pub fn confirms(&self, hash: u64, loc: Loc, key: &[u8]) -> bool {
        self.sets[self.set(hash)].iter().any(|e| {
            e.as_ref()
                .is_some_and(|e| e.hash == hash && e.loc == Some(loc) && *e.key == *key)
        })
    }

    /// Caches `key`'s value (replacing an older entry of the key).
    pub fn put(&mut self, hash: u64, key: &[u8], value: Option<&[u8]>, loc: Option<Loc>) {
        if value.is_some_and(|v| v.len() > MAX_CACHED_VALUE) {
            self.forget(hash, key);
            return;
        }
        let s = self.set(hash);
        let set = &mut self.sets[s];
        let way = Self::way(set, hash, key).unwrap_or(1);
        match &mut set[way] {
            // The entry it replaces gives its buffers where the lengths match: a miss on a
            // balance mostly evicts another balance, with a key and a value as long. With a
            // cache of 16 entries, where nearly every read misses, simplecoin transfers made
            // 8.7 allocations each; 4.3 with this and the miss path's own buffers
            // (`read.rs`), the rest an entry replaced by a key of another length.
            Some(old) => {
                self.bytes -= old.bytes();
                if old.key.len() == key.len() {
                    old.key.copy_from_slice(key);
                } else {
                    old.key = key.into();
                }
                match (&mut old.value, value) {
                    (Some(cached), Some(value)) if cached.len() == value.len() => {
                        cached.copy_from_slice(value);
                    }
                    (cached, value) => *cached = value.map(Into::into),
                }
                old.hash = hash;
                old.loc = loc;
                self.bytes += old.bytes();
            }
            empty => {
                let entry = Entry {
                    hash,
                    key: key.into(),
                    value: value.map(Into::into),
                    loc,
                };
                self.bytes += entry.bytes();
                *empty = Some(entry);
            }
        }
        if way == 1 {
            set.swap(0, 1);
        }
    }

    /// Updates `key` if cached (a write of a key nobody read stays out of the cache), in
    /// place: a block's writes update most of its keys (a balance rewritten with another of
    /// the same length), and replacing the entry cost two allocations and two frees each,
    /// 810 instructions a transfer in a block's commit (callgrind, 10,000 accounts).
    pub fn update(&mut self, hash: u64, key: &[u8], value: Option<&[u8]>, loc: Loc) {
        let s = self.set(hash);
        let set = &mut self.sets[s];
        let Some(way) = Self::way(set, hash, key) else {
            return;
        };
        let entry = set[way].as_mut().expect("found");
        self.bytes -= entry.bytes();
        if value.is_some_and(|v| v.len() > MAX_CACHED_VALUE) {
            set[way] = None;
            return;
        }
        match (&mut entry.value, value) {
            (Some(cached), Some(value)) if cached.len() == value.len() => {
                cached.copy_from_slice(value);
            }
            (cached, value) => *cached = value.map(Into::into),
        }
        entry.loc = Some(loc);
        self.bytes += entry.bytes();
        // Most recent first, as `put` leaves it.
        if way == 1 {
            set.swap(0, 1);
        }
    }

    /// Drops `key`.
    pub fn forget(&mut self, hash: u64, key: &[u8]) {
        let s = self.set(hash);
        for e in &mut self.sets[s] {
            if e.as_ref().is_some_and(|e| e.hash == hash && *e.key == *key) {
                self.bytes -= e.take().expect("some").bytes();
            }
        }
    }

    /// Forgets the log locations of every entry: after a merge, the log that they point
    /// into may be deleted, but the values stay right.
    pub fn forget_locations(&mut self) {
        for set in &mut self.sets {
            for e in set.iter_mut().flatten() {
                e.loc = None;
            }
        }
    }

    /// Bytes held, entries and table.
    pub fn heap_bytes(&self) -> usize {
        self.bytes + self.sets.len() * std::mem::size_of::<[Option<Entry>; 2]>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_returns_what_was_put_and_keeps_the_two_most_recent_per_set() {
        let mut cache = ValueCache::new(1);
        assert_eq!(cache.sets.len(), 1);
        cache.put(1, b"a", Some(b"1"), None);
        cache.put(2, b"b", None, Some(Loc::new(1, 2)));
        assert_eq!(cache.get(1, b"a"), Some(Some(&b"1"[..])));
        assert_eq!(cache.get(2, b"b"), Some(None));
        assert!(cache.confirms(2, Loc::new(1, 2), b"b"));
        assert!(!cache.confirms(2, Loc::new(1, 3), b"b"));
        cache.put(3, b"c", Some(b"3"), None); // evicts "a", the least recent
        assert_eq!(cache.get(1, b"a"), None);
        assert_eq!(cache.get(3, b"c"), Some(Some(&b"3"[..])));
        cache.update(3, b"c", Some(b"33"), Loc::new(0, 9));
        assert_eq!(cache.get(3, b"c"), Some(Some(&b"33"[..])));
        cache.update(4, b"d", Some(b"4"), Loc::new(0, 9));
        assert_eq!(
            cache.get(4, b"d"),
            None,
            "writes of uncached keys are not cached"
        );
        cache.forget_locations();
        assert!(!cache.confirms(3, Loc::new(0, 9), b"c"));
    }

    /// An update in place leaves the cache as replacing the entry did: the value (same length,
    /// another, deleted, revived), its location, the bytes counted, the most recent way, and
    /// a value too large to cache forgotten.
    #[test]
    fn an_update_in_place_is_a_put_of_the_new_value() {
        let values: [Option<&[u8]>; 6] = [
            Some(b"12345678"),
            Some(b"87654321"),
            Some(b"1"),
            None,
            Some(b""),
            Some(&[9; MAX_CACHED_VALUE]),
        ];
        for (i, value) in values.into_iter().enumerate() {
            let (mut updated, mut put) = (ValueCache::new(1), ValueCache::new(1));
            for cache in [&mut updated, &mut put] {
                cache.put(1, b"a", Some(b"abcdefgh"), None);
                cache.put(2, b"b", Some(b"b"), None); // "a" is the older way now
            }
            let loc = Loc::new(3, i as u64);
            updated.update(1, b"a", value, loc);
            put.put(1, b"a", value, Some(loc));
            assert_eq!(updated.bytes, put.bytes, "value {i}");
            assert!(updated.confirms(1, loc, b"a"), "value {i}");
            // Both left "a" the most recent: a new key evicts "b".
            for cache in [&mut updated, &mut put] {
                cache.put(3, b"c", None, None);
                assert_eq!(cache.get(2, b"b"), None, "value {i}");
                assert_eq!(cache.get(1, b"a"), Some(value), "value {i}");
            }
        }
        let mut cache = ValueCache::new(1);
        cache.put(1, b"a", Some(b"1"), None);
        let bytes = cache.bytes;
        cache.update(1, b"a", Some(&[0; MAX_CACHED_VALUE + 1]), Loc::new(0, 1));
        assert_eq!(cache.get(1, b"a"), None, "too large to cache: forgotten");
        assert!(bytes > 0);
        assert_eq!(cache.bytes, 0);
    }

    /// A put that evicts reuses the evicted entry's buffers and leaves the cache as a put
    /// into an empty way does: the new key and value (as long as the old, longer, shorter,
    /// deleted, revived), its location, the bytes counted, and the evicted key gone.
    #[test]
    fn an_evicting_put_is_a_put_into_an_empty_way() {
        let olds: [(&[u8], Option<&[u8]>); 3] = [
            (b"old", Some(b"12345678")),
            (b"o", None),
            (b"older", Some(b"")),
        ];
        let news: [(&[u8], Option<&[u8]>); 4] = [
            (b"new", Some(b"87654321")),
            (b"new", Some(b"1")),
            (b"newest", None),
            (b"n", Some(b"123456789")),
        ];
        for (old_key, old_value) in olds {
            for (new_key, new_value) in news {
                let mut evicting = ValueCache::new(1);
                evicting.put(1, old_key, old_value, None);
                evicting.put(2, b"b", Some(b"b"), None); // the old key is the older way
                evicting.put(3, new_key, new_value, Some(Loc::new(1, 2)));
                let mut fresh = ValueCache::new(1);
                fresh.put(2, b"b", Some(b"b"), None);
                fresh.put(3, new_key, new_value, Some(Loc::new(1, 2)));
                let case = format!("{old_key:?} -> {new_key:?}");
                assert_eq!(evicting.bytes, fresh.bytes, "{case}");
                assert!(evicting.confirms(3, Loc::new(1, 2), new_key), "{case}");
                assert_eq!(evicting.get(1, old_key), None, "{case}");
                assert_eq!(evicting.get(3, new_key), Some(new_value), "{case}");
                assert_eq!(evicting.get(2, b"b"), Some(Some(&b"b"[..])), "{case}");
            }
        }
    }
}
