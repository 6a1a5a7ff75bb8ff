//! The in-memory index of the log store: key hash to where the key's latest change lies in
//! the log, in 12 bytes per key.
//!
//! After QMDB (about 12 bytes per entry: part of the key's hash and a file offset) and
//! GriffinDB (partial keys in memory, values on disk): a slot keeps 32 bits of the key's hash
//! and a 64-bit [`Loc`], never the key. A lookup finds the slots whose hash bits match and the
//! caller reads the full key at each location to confirm it, so a hash collision costs a read,
//! never a wrong answer. The hash is seeded per store at random ([`KeyHash`]), so nobody can
//! choose keys that collide in it: a contract picks its storage keys, and keys that shared
//! their hash bits would make every lookup of them read each one back from disk.
//!
//! The table is split into [`SHARDS`] open-addressing shards with linear probing and
//! backward-shift deletion. A shard grows alone, so growing never needs the memory of two
//! whole tables at once, and only the 32 stored hash bits are needed to rehash (the top bits
//! of the hash pick the shard, the stored bits the slot).

use std::hash::BuildHasher;

use crate::KeyedHasher;

/// Shards of the index. 256: growing one shard moves 1/256 of the entries, and an empty
/// store's shards cost 256 × 16 slots × 12 bytes = 48 KiB.
pub const SHARDS: usize = 256;

/// Slots per shard before the first growth.
const MIN_SLOTS: usize = 16;

/// A shard grows past 7/8 full: linear probing stays short (about 4.5 probes for a miss at
/// that load) and the index stays near 12 / 0.875 × 0.75 ≈ 10–14 bytes per key.
const MAX_LOAD_NUM: usize = 7;
const MAX_LOAD_DEN: usize = 8;

/// Where a key's latest change lies: segment number (24 bits) and byte offset (40 bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Loc(u64);

impl Loc {
    /// The largest segment number a location can hold (16 M segments of the log's lifetime).
    pub const MAX_SEQ: u64 = (1 << 24) - 1;
    /// The largest offset a location can hold (1 TiB into a segment).
    pub const MAX_OFFSET: u64 = (1 << 40) - 1;

    /// The location `offset` bytes into segment `seq`.
    pub fn new(seq: u64, offset: u64) -> Self {
        assert!(
            seq <= Self::MAX_SEQ && offset <= Self::MAX_OFFSET,
            "location out of range"
        );
        Self(seq << 40 | offset)
    }
    /// Its segment number.
    pub fn seq(self) -> u64 {
        self.0 >> 40
    }
    /// Its offset in the segment.
    pub fn offset(self) -> u64 {
        self.0 & Self::MAX_OFFSET
    }
}

/// The 64-bit hash of a key that the index and the value cache share: foldhash under a seed
/// drawn at random for each store (`crate::KeyedHasher`). Nothing hashed with it is written
/// to disk, so the seed need not outlive the store; the run's bloom filter, which is on disk,
/// has a fixed hash of its own (`run::bloom_hash`).
#[derive(Clone, Default)]
pub struct KeyHash(KeyedHasher);

impl KeyHash {
    /// The hash of `key`.
    pub fn of(&self, key: &[u8]) -> u64 {
        self.0.hash_one(key)
    }
}

/// One slot: 32 hash bits and a location, packed in 12 bytes (`tag == 0 && loc == 0` is
/// empty; a real tag of 0 is stored as 1, which only costs an extra key comparison).
#[derive(Clone, Copy, Default)]
#[repr(C, packed)]
struct Slot {
    tag: u32,
    loc: u64,
}

impl Slot {
    fn is_empty(&self) -> bool {
        let (tag, loc) = (self.tag, self.loc);
        tag == 0 && loc == 0
    }
}

#[derive(Default)]
struct Shard {
    slots: Vec<Slot>,
    len: usize,
}

impl Shard {
    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    fn home(&self, tag: u32) -> usize {
        tag as usize & self.mask()
    }

    fn grow(&mut self) {
        let size = (self.slots.len() * 2).max(MIN_SLOTS);
        let old = std::mem::replace(&mut self.slots, vec![Slot::default(); size]);
        for slot in old.into_iter().filter(|s| !s.is_empty()) {
            let mut i = self.home(slot.tag);
            while !self.slots[i].is_empty() {
                i = (i + 1) & self.mask();
            }
            self.slots[i] = slot;
        }
    }

    /// Removes the slot at `i`, shifting later slots of the probe run back into the gap.
    fn remove_at(&mut self, mut i: usize) {
        let mask = self.mask();
        let mut j = i;
        loop {
            j = (j + 1) & mask;
            if self.slots[j].is_empty() {
                break;
            }
            let home = self.home(self.slots[j].tag);
            // Move j back to i unless its home lies cyclically in (i, j].
            let stays = if i <= j {
                i < home && home <= j
            } else {
                i < home || home <= j
            };
            if !stays {
                self.slots[i] = self.slots[j];
                i = j;
            }
        }
        self.slots[i] = Slot::default();
        self.len -= 1;
    }
}

/// The index: key hash → [`Loc`] of the key's latest change.
pub struct Index {
    shards: Vec<Shard>,
    len: usize,
}

impl Default for Index {
    fn default() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
            len: 0,
        }
    }
}

fn split(hash: u64) -> (usize, u32) {
    let shard = (hash >> 56) as usize % SHARDS;
    let tag = (hash as u32).max(1);
    (shard, tag)
}

impl Index {
    /// Keys indexed.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no key is indexed.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes the index holds.
    pub fn heap_bytes(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.slots.capacity() * std::mem::size_of::<Slot>())
            .sum()
    }

    /// The locations whose hash bits match `hash`; `confirm(loc)` says whether the key at
    /// `loc` is the one looked up, and the first confirmed location is returned.
    pub fn find<E>(
        &self,
        hash: u64,
        mut confirm: impl FnMut(Loc) -> Result<bool, E>,
    ) -> Result<Option<Loc>, E> {
        let (s, tag) = split(hash);
        let shard = &self.shards[s];
        if shard.slots.is_empty() {
            return Ok(None);
        }
        let mut i = shard.home(tag);
        loop {
            let slot = shard.slots[i];
            if slot.is_empty() {
                return Ok(None);
            }
            if slot.tag == tag && confirm(Loc(slot.loc))? {
                return Ok(Some(Loc(slot.loc)));
            }
            i = (i + 1) & shard.mask();
        }
    }

    /// Points the key with `hash` at `loc`. `same(old)` says whether the key at an existing
    /// location with matching hash bits is this key (then its slot is updated). Returns the
    /// key's previous location, `None` if it was not indexed.
    pub fn insert<E>(
        &mut self,
        hash: u64,
        loc: Loc,
        mut same: impl FnMut(Loc) -> Result<bool, E>,
    ) -> Result<Option<Loc>, E> {
        let (s, tag) = split(hash);
        let shard = &mut self.shards[s];
        if (shard.len + 1) * MAX_LOAD_DEN > shard.slots.len() * MAX_LOAD_NUM {
            shard.grow();
        }
        let mut i = shard.home(tag);
        loop {
            let slot = shard.slots[i];
            if slot.is_empty() {
                shard.slots[i] = Slot { tag, loc: loc.0 };
                shard.len += 1;
                self.len += 1;
                return Ok(None);
            }
            if slot.tag == tag && same(Loc(slot.loc))? {
                shard.slots[i].loc = loc.0;
                return Ok(Some(Loc(slot.loc)));
            }
            i = (i + 1) & shard.mask();
        }
    }

    /// Removes the key with `hash` whose location `is(loc)` confirms; whether one was found.
    pub fn remove<E>(
        &mut self,
        hash: u64,
        mut is: impl FnMut(Loc) -> Result<bool, E>,
    ) -> Result<bool, E> {
        let (s, tag) = split(hash);
        let shard = &mut self.shards[s];
        if shard.slots.is_empty() {
            return Ok(false);
        }
        let mut i = shard.home(tag);
        loop {
            let slot = shard.slots[i];
            if slot.is_empty() {
                return Ok(false);
            }
            if slot.tag == tag && is(Loc(slot.loc))? {
                shard.remove_at(i);
                self.len -= 1;
                return Ok(true);
            }
            i = (i + 1) & shard.mask();
        }
    }

    /// Drops every entry whose location `drop(loc)` selects, in shard `s`, shrinking the
    /// shard when it empties out. Shards can be swept one at a time, between commits.
    pub fn retain_shard(&mut self, s: usize, mut drop: impl FnMut(Loc) -> bool) {
        let shard = &mut self.shards[s];
        if shard.len == 0 {
            return;
        }
        let kept: Vec<Slot> = shard
            .slots
            .iter()
            .copied()
            .filter(|slot| !slot.is_empty() && !drop(Loc(slot.loc)))
            .collect();
        self.len -= shard.len - kept.len();
        let mut size = MIN_SLOTS;
        while kept.len() * MAX_LOAD_DEN > size * MAX_LOAD_NUM / 2 {
            size *= 2;
        }
        shard.slots = vec![Slot::default(); size];
        shard.len = 0;
        for slot in kept {
            let mut i = shard.home(slot.tag);
            while !shard.slots[i].is_empty() {
                i = (i + 1) & shard.mask();
            }
            shard.slots[i] = slot;
            shard.len += 1;
        }
    }

    /// Every location, in no particular order.
    pub fn locations(&self) -> impl Iterator<Item = Loc> + '_ {
        self.shards.iter().flat_map(|s| {
            s.slots
                .iter()
                .filter(|slot| !slot.is_empty())
                .map(|slot| Loc(slot.loc))
        })
    }

    /// Drops everything.
    pub fn clear(&mut self) {
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A model: keys are u64s, "the log" maps a location to its key.
    #[test]
    fn the_index_agrees_with_a_hash_map_through_inserts_updates_removes_and_sweeps() {
        let mut index = Index::default();
        let mut model: HashMap<u64, Loc> = HashMap::new();
        let mut log: HashMap<Loc, u64> = HashMap::new();
        let mut rng = 0x1234_5678u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        // Few distinct hashes, so collisions and long probe runs happen.
        let hasher = KeyHash::default();
        let hash_of = |k: u64| hasher.of(&(k % 7919).to_le_bytes()) ^ (k / 7919);
        for step in 0..200_000u64 {
            let key = next() % 20_000;
            let h = hash_of(key);
            match next() % 10 {
                0..=5 => {
                    let loc = Loc::new(step % 1000, step);
                    log.insert(loc, key);
                    let previous = index
                        .insert(h, loc, |l| Ok::<_, ()>(log[&l] == key))
                        .unwrap();
                    assert_eq!(previous, model.insert(key, loc));
                }
                6..=7 => {
                    let found = index.remove(h, |l| Ok::<_, ()>(log[&l] == key)).unwrap();
                    assert_eq!(found, model.remove(&key).is_some());
                }
                _ => {
                    let got = index.find(h, |l| Ok::<_, ()>(log[&l] == key)).unwrap();
                    assert_eq!(got, model.get(&key).copied());
                }
            }
            if step % 50_000 == 49_999 {
                let cut = step / 2;
                for s in 0..SHARDS {
                    index.retain_shard(s, |l| l.offset() < cut);
                }
                model.retain(|_, l| l.offset() >= cut);
            }
        }
        assert_eq!(index.len(), model.len());
        for (key, loc) in &model {
            let got = index
                .find(hash_of(*key), |l| Ok::<_, ()>(log[&l] == *key))
                .unwrap();
            assert_eq!(got, Some(*loc));
        }
    }

    /// Where a key lands in an empty index: its shard and its home slot there.
    fn place(hash: u64) -> (usize, u32) {
        let (shard, tag) = split(hash);
        (shard, tag & (MIN_SLOTS as u32 - 1))
    }

    /// Issue 20: keys chosen to collide in one store's index do not collide in another's,
    /// so colliding keys cannot be computed ahead of time (under an unseeded hash they would
    /// collide in every store and every process).
    #[test]
    fn issue_20_keys_that_collide_in_one_store_are_spread_in_another() {
        let (attacker, victim) = (KeyHash::default(), KeyHash::default());
        assert_ne!(attacker.of(b"same key"), victim.of(b"same key"));
        // 32 keys that land on one slot of one shard of the attacker's index (12 bits: about
        // 4,096 tries a key).
        let target = place(attacker.of(b"key-0"));
        let colliding: Vec<Vec<u8>> = (0u64..)
            .map(|i| format!("key-{i}").into_bytes())
            .filter(|k| place(attacker.of(k)) == target)
            .take(32)
            .collect();
        // In another store they spread over the 4,096 places: 32 random draws give about 32
        // distinct ones; an unseeded hash would give 1.
        let places: std::collections::BTreeSet<_> =
            colliding.iter().map(|k| place(victim.of(k))).collect();
        assert!(places.len() >= 24, "{} places", places.len());
    }

    #[test]
    fn a_location_round_trips() {
        let loc = Loc::new(Loc::MAX_SEQ, Loc::MAX_OFFSET);
        assert_eq!((loc.seq(), loc.offset()), (Loc::MAX_SEQ, Loc::MAX_OFFSET));
        let loc = Loc::new(3, 12);
        assert_eq!((loc.seq(), loc.offset()), (3, 12));
    }
}
