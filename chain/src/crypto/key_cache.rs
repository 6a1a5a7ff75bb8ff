//! A bounded cache of decompressed public keys, shared by every verifying thread.
//!
//! Decompressing a key is a square root in the field, about as costly as half a batched
//! signature check, and an account signs with the same key every time. The cache only ever
//! holds what decompression returned for the exact 32 key bytes, so a hit and a miss give the
//! same point and cannot change any verification result; it only saves time.

use std::hash::{BuildHasher, RandomState};
use std::sync::{Mutex, PoisonError};

use curve25519_dalek::edwards::{CompressedEdwardsY, EdwardsPoint};

/// Keys a shared cache holds at most. The benchmark signs with 4,096 keys
/// (`workload::KEY_POOL`) and a block of 5,000 transfers from a Zipf-distributed 10M accounts
/// touches a few thousand; 65,536 covers the senders of a dozen such blocks. An entry is about
/// 200 bytes, so a full cache is about 13 MiB (`Keys` holds two: dalek's points, and the rows
/// the three lane backends share; only the one in use fills up). A miss costs one
/// decompression (5-7 µs with dalek, about 1 µs eight at a time with AVX-512), so a flood of
/// fresh keys can slow its own signatures, never break anyone's.
pub const KEY_CACHE_ENTRIES: usize = 1 << 16;

/// Entries per set. With 4 ways, two hot keys that hash to the same set do not evict each
/// other, which a direct-mapped table (1 way) would let happen to ~6% of a 4,096-key workload.
const WAYS: usize = 4;

struct Entry<P> {
    key: [u8; 32],
    point: P,
}

/// Decompressed keys by their 32 encoded bytes: set-associative, least recently used out.
/// `P` is the form a verifier wants the point in: curve25519-dalek's [`EdwardsPoint`] by
/// default, or the lane verifiers' (AVX-512F, AVX2) table row.
///
/// Sets are found by a hash with a per-process random seed, so a signer cannot choose keys
/// that all land in the set of someone else's key to evict it.
pub struct KeyCache<P = EdwardsPoint> {
    /// Each set is most recently used first. A `Vec` (empty until used) keeps an idle cache
    /// at a few hundred KiB rather than its full size.
    sets: Box<[Mutex<Vec<Entry<P>>>]>,
    hasher: RandomState,
}

impl<P: Copy> KeyCache<P> {
    /// A cache of at most `entries` keys (rounded up to whole sets); 0 caches nothing.
    pub fn new(entries: usize) -> Self {
        let sets = entries.div_ceil(WAYS);
        Self {
            sets: (0..sets).map(|_| Mutex::new(Vec::new())).collect(),
            hasher: RandomState::new(),
        }
    }

    /// The cached point of `key`, if any.
    pub fn get(&self, key: &[u8; 32]) -> Option<P> {
        let set = self.set(key)?;
        lookup(&mut set.lock().unwrap_or_else(PoisonError::into_inner), key)
    }

    /// Caches `point` as the point of `key`, which it must be: the cache cannot tell.
    pub fn insert(&self, key: &[u8; 32], point: P) {
        let Some(set) = self.set(key) else { return };
        let mut set = set.lock().unwrap_or_else(PoisonError::into_inner);
        if lookup(&mut set, key).is_none() {
            if set.len() == WAYS {
                set.pop();
            }
            set.insert(0, Entry { key: *key, point });
        }
    }

    fn set(&self, key: &[u8; 32]) -> Option<&Mutex<Vec<Entry<P>>>> {
        if self.sets.is_empty() {
            return None;
        }
        Some(&self.sets[(self.hasher.hash_one(key) % self.sets.len() as u64) as usize])
    }

    /// How many keys the cache holds now.
    pub fn len(&self) -> usize {
        self.sets
            .iter()
            .map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).len())
            .sum()
    }

    /// Whether the cache holds no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl KeyCache<EdwardsPoint> {
    /// The point `key` encodes, as [`CompressedEdwardsY::decompress`] gives it (ZIP-215
    /// accepts non-canonical encodings, and so does that function), or `None` if it encodes
    /// none. Only points are cached: bytes that are not a point cost their caller a
    /// decompression each time and take no room from real keys.
    pub fn decompress(&self, key: &[u8; 32]) -> Option<EdwardsPoint> {
        if let Some(point) = self.get(key) {
            return Some(point);
        }
        // Decompress outside the lock: it is the slow part, and another thread may want the set.
        let point = CompressedEdwardsY(*key).decompress()?;
        self.insert(key, point);
        Some(point)
    }
}

/// The cached point for `key`, moved to the front of its set.
fn lookup<P: Copy>(set: &mut [Entry<P>], key: &[u8; 32]) -> Option<P> {
    let i = set.iter().position(|e| e.key == *key)?;
    set[..=i].rotate_right(1);
    Some(set[0].point)
}

#[cfg(test)]
mod tests {
    use super::*;
    use curve25519_dalek::constants::ED25519_BASEPOINT_POINT;
    use curve25519_dalek::scalar::Scalar;

    fn key(i: u64) -> [u8; 32] {
        (ED25519_BASEPOINT_POINT * Scalar::from(i + 1))
            .compress()
            .to_bytes()
    }

    #[test]
    fn cached_points_are_the_decompressed_points() {
        let cache: KeyCache = KeyCache::new(64);
        for round in 0..2 {
            for i in 0..40 {
                let k = key(i);
                assert_eq!(
                    cache.decompress(&k),
                    CompressedEdwardsY(k).decompress(),
                    "key {i}, round {round}"
                );
            }
        }
    }

    #[test]
    fn the_cache_never_holds_more_than_its_bound() {
        let cache: KeyCache = KeyCache::new(16);
        for i in 0..1000 {
            cache.decompress(&key(i)).unwrap();
        }
        assert!(cache.len() <= 16, "{} entries", cache.len());
    }

    #[test]
    fn bytes_that_are_not_a_point_are_not_cached() {
        let cache: KeyCache = KeyCache::new(16);
        // y = 2 is not the y-coordinate of a curve point.
        let mut not_a_point = [0u8; 32];
        not_a_point[0] = 2;
        assert!(CompressedEdwardsY(not_a_point).decompress().is_none());
        assert_eq!(cache.decompress(&not_a_point), None);
        assert!(cache.is_empty());
    }

    #[test]
    fn a_hot_key_survives_a_stream_of_cold_ones_in_its_set() {
        let cache: KeyCache = KeyCache::new(WAYS);
        let hot = key(0);
        cache.decompress(&hot).unwrap();
        for i in 1..100 {
            cache.decompress(&key(i)).unwrap();
            // Used between the cold keys, the hot key stays most recently used.
            cache.decompress(&hot).unwrap();
            let set = cache.sets[0].lock().unwrap();
            assert_eq!(set[0].key, hot, "after cold key {i}");
        }
    }
}
