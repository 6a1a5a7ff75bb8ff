//! The order of the log store's unmerged keys: what lets [`crate::StateStore::seek`] walk
//! the keys changed since the last merge in key order, beside the sorted run.
//!
//! The index ([`super::index`]) is a hash table of 12-byte slots that holds no key, so it
//! cannot say which unmerged key follows another; the run is sorted but holds only what was
//! merged. NEAR dropped iteration rather than give its hash-keyed flat storage an order
//! (nearcore's `storage_iter_*` host functions are deprecated). Here the order is kept beside
//! the index, and its cost is bounded by what the index already holds:
//!
//! - **What it holds.** Every key changed since the run, and possibly a few more, in
//!   *generations*: the generation open when a merge starts is sealed at the head, and
//!   dropped once a run at or past that head is installed; a key changed again in a later
//!   generation enters that one too. So the keys held are a superset of the unmerged keys,
//!   which is all a seek needs: a key it finds here is read through the index (which says
//!   whether it was deleted), and a run key that is not here was not changed since the run,
//!   so the run's value is current.
//! - **How a generation is kept.** As a small LSM tree in memory: each block's new keys (the
//!   block's changes are sorted) become an immutable [`Tier`], keys front-coded in chunks of
//!   about [`CHUNK_BYTES`] as the run's blocks and LevelDB's share prefixes; a tier merges
//!   into the one before it once it holds [`1/FANOUT`](FANOUT) as many keys, so a key is
//!   rewritten about log₄(keys / block) times, in sequential passes. A merge runs in steps
//!   of [`MERGE_STEP_KEYS`] and more, one step per commit, so no commit waits for a large
//!   one (as the index sweep does).
//! - **What a commit pays.** The index already says whether a change's key is new to it, or
//!   last changed before the open generation: only such keys enter the order. A transfer
//!   between accounts changed since the last merge pays one comparison per key; a key new
//!   to the generation is copied once into its block's tier and then merged a few times.
//! - **What it costs in memory.** Contract keys share their 9-byte namespace and, sorted, most
//!   of what follows: each key keeps only what it does not share with the one before it,
//!   behind two one-byte lengths, and each chunk adds 28 bytes of index: 8–9.4 bytes a key
//!   for a token's balances, beside the index's 12 (19–20 while its shards grow). In
//!   `tally storebench --workload transfers --scale 0.1` (1M accounts, 738,137 keys changed
//!   since the last merge at the end; medians of 3, alternated with the store before the
//!   order), the order held 5.7 MiB and the process's resident memory at the end grew from
//!   107.8 to 118.6 MiB (15 bytes a key: merges hold their inputs and output at once, and the
//!   allocator keeps some of what they free); its peak, during the setup's 2M keys, from 163.7
//!   to 194.5 MiB.
//! - **What a seek costs.** Per tier (a handful: the tiers of a generation shrink by
//!   [`FANOUT`] each), a binary search over its chunks' 16-byte prefixes and a scan of one or
//!   two chunks, in memory.
//! - **Deleted keys (issue 23).** A key deleted since the run stays here (it hides the run's
//!   entry, and the index says it is gone) until a merge covers its generation. Each tier
//!   keeps which of its keys are live (`super::live::LiveBits`, a bit a key and a summary
//!   bit per 64), so a seek goes from the first key at its bound to the first live one in
//!   O(log₆₄ n) word reads, however many deleted keys lie between, and decodes that one from
//!   its chunk. A deletion marks the key dead in every tier that holds it (a binary search in
//!   each: deletions pay for it); a put revives the open generation's copy only when that
//!   generation holds a dead key of the same hash, so puts of live keys look in no tier. The
//!   bits and each chunk's first key's position (4 bytes a chunk of about 30 keys) add about
//!   a quarter of a byte a key.

mod merge;
#[cfg(test)]
mod tests;
mod tier;

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use super::index::Loc;
use crate::store::{Direction, KeyRange, comes_before};
use merge::Merge;
pub use merge::merge_tiers;
pub use tier::{CHUNK_BYTES, SLAB_BYTES, Tier, TierWriter};

/// A tier merges into the tier before it once it holds at least a quarter as many keys: each
/// key of a generation of n keys added in blocks of b is rewritten about log₄(n/b) times, and
/// once merges settle each tier holds under a quarter of the keys of the one before it, so
/// there are at most 1 + log₄ n of them (11 for a million keys; a seek looks in each).
pub const FANOUT: usize = 4;

/// Keys a commit merges at least, when merges are due: a merge cost 43–56 ns a key (one
/// decode and one encode; `merge_tiers_and_seeks_are_timed` below), so 32,768 keys take
/// under 2 ms, the budget a commit gives the index sweep (`SWEEP_BUDGET`). A larger merge
/// goes on at the next commits: it runs on the committing thread, in steps, as the index
/// sweep does. (On a worker thread, it left mimalloc holding 20 MiB more of resident memory
/// at 1M accounts: the worker's heap, idle between merges, kept what the commits freed.)
pub const MERGE_STEP_KEYS: usize = 32_768;

/// Keys a commit merges for each key its block added, so that merges keep up: a key is
/// rewritten about log₄(n/b) times, under 8 while a generation holds fewer than 65,536
/// blocks' worth.
pub const MERGE_KEYS_PER_KEY: usize = 8;

/// Staged keys' buffers are kept between blocks up to this size (a block of 10,000 changes
/// of 40-byte keys), and freed above it: a genesis of millions of keys must not pin them.
const STAGED_KEEP_BYTES: usize = 1 << 20;

/// Keys back to back: the current block's keys that enter the order, and whether each is
/// live.
#[derive(Default)]
pub struct Staged {
    bytes: Vec<u8>,
    ends: Vec<u32>,
    live: Vec<bool>,
}

impl Staged {
    /// Adds `key`, live or deleted, which must sort after every key added since the last
    /// clear.
    pub fn push(&mut self, key: &[u8], live: bool) {
        debug_assert!(self.is_empty() || self.key(self.len() - 1) < key);
        self.live.push(live);
        self.bytes.extend_from_slice(key);
        let end = u32::try_from(self.bytes.len()).expect("a block's keys fit in 4 GiB");
        self.ends.push(end);
    }

    /// Key `i`.
    pub fn key(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.bytes[start..self.ends[i] as usize]
    }

    /// Keys held.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether it holds no key.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Drops every key, keeping the buffers up to `STAGED_KEEP_BYTES`.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
        self.live.clear();
        if self.heap_bytes() > STAGED_KEEP_BYTES {
            *self = Self::default();
        }
    }

    fn heap_bytes(&self) -> usize {
        self.bytes.capacity()
            + self.ends.capacity() * std::mem::size_of::<u32>()
            + self.live.capacity()
    }
}

/// Hashes a key's hash (already the store's seeded hash) as itself.
#[derive(Default)]
struct SameHash(u64);

impl Hasher for SameHash {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// Notes, for a merge under way, that `key` became `live` or dead in `tier`, if the merge
/// reads that tier.
fn note_merge_change(merging: &mut Option<Merge>, tier: &Arc<Tier>, key: &[u8], live: bool) {
    if let Some(merge) = merging
        && (Arc::ptr_eq(&merge.older, tier) || Arc::ptr_eq(&merge.newer, tier))
    {
        merge.changed.push((key.to_vec(), live));
    }
}

/// One generation: its tiers, oldest (largest) first.
#[derive(Default)]
struct Generation {
    tiers: Vec<Arc<Tier>>,
}

impl Generation {
    fn len(&self) -> usize {
        self.tiers.iter().map(|t| t.len()).sum()
    }

    fn heap_bytes(&self) -> usize {
        self.tiers.iter().map(|t| t.heap_bytes()).sum::<usize>()
            + self.tiers.capacity() * std::mem::size_of::<Arc<Tier>>()
    }

    /// The position of the adjacent tiers `older`, `newer`, if it holds them.
    fn position(&self, older: &Arc<Tier>, newer: &Arc<Tier>) -> Option<usize> {
        self.tiers
            .windows(2)
            .position(|w| Arc::ptr_eq(&w[0], older) && Arc::ptr_eq(&w[1], newer))
    }
}

/// The order over every key changed since the run, in generations (see the module docs).
pub struct Order {
    /// Generations sealed when a merge started, oldest first, each with the height of the
    /// last block it covers: dropped once a run at that height or above is installed.
    sealed: VecDeque<(u64, Generation)>,
    /// The generation commits add to.
    open: Generation,
    /// Changes at or after this location in the log belong to the open generation.
    open_from: Loc,
    /// The current block's keys that enter the open generation.
    staged: Staged,
    /// Keys a commit merges at least (a test lowers it).
    merge_step_keys: usize,
    /// The merge under way, if any: one at a time.
    merging: Option<Merge>,
    /// How many keys with each hash the open generation holds dead: a put of a key the open
    /// generation already holds looks for its copy (to make it live again) only when its hash
    /// is here, so puts of live keys, the common case, pay one lookup in an empty or small
    /// map. A hash shared by two keys costs the other a useless look, never a wrong answer.
    open_dead: HashMap<u64, u32, BuildHasherDefault<SameHash>>,
}

impl Default for Order {
    fn default() -> Self {
        Self::with_merge_step(MERGE_STEP_KEYS)
    }
}

impl Order {
    /// An empty order whose commits merge at least `merge_step_keys` keys each.
    pub fn with_merge_step(merge_step_keys: usize) -> Self {
        Self {
            sealed: VecDeque::new(),
            open: Generation::default(),
            // Every change belongs to the first generation.
            open_from: Loc::new(0, 0),
            staged: Staged::default(),
            merge_step_keys,
            merging: None,
            open_dead: HashMap::default(),
        }
    }

    /// Notes a change of `key` (whose hash is `hash`) that leaves it `live` or deleted, and
    /// whose previous change (per the index) was at `previous`: the key enters the open
    /// generation unless it is there already, and every copy of it the order holds is kept
    /// as live as the key is, so that seeks skip deleted keys without reading them (issue
    /// 23). Keys are noted in increasing order between [`Order::flush`]es.
    ///
    /// A deletion marks the key dead in every tier that holds it: a live copy left in an
    /// older generation would be found by seeks. A put marks it live only in the open
    /// generation: a dead copy left in an older one hides nothing, since the open one holds
    /// the key live. So a put of a live key, the common case, looks in no tier.
    pub fn note(&mut self, key: &[u8], hash: u64, previous: Option<Loc>, live: bool) {
        let new_to_open = previous.is_none_or(|p| p < self.open_from);
        if !live {
            self.kill(key, hash, !new_to_open);
        } else if !new_to_open && self.open_dead.contains_key(&hash) {
            self.revive(key, hash);
        }
        if new_to_open {
            self.staged.push(key, live);
            if !live {
                *self.open_dead.entry(hash).or_default() += 1;
            }
        }
    }

    /// Marks `key` dead in every tier that holds it: in the open generation if it is there
    /// (`in_open`: its last change is in it), and in every sealed one. A generation holds a
    /// key once, so the search of one stops at the first tier holding it.
    fn kill(&mut self, key: &[u8], hash: u64, in_open: bool) {
        let open: &[Arc<Tier>] = if in_open { &self.open.tiers } else { &[] };
        let sealed = self.sealed.iter().map(|(_, g)| (&g.tiers[..], false));
        for (tiers, is_open) in std::iter::once((open, true)).chain(sealed) {
            // Newest first: the smallest tiers, and the one the last change entered.
            for tier in tiers.iter().rev() {
                let Some(at) = tier.locate(key) else { continue };
                if tier.set_live(at, false) {
                    if is_open {
                        *self.open_dead.entry(hash).or_default() += 1;
                    }
                    note_merge_change(&mut self.merging, tier, key, false);
                }
                break;
            }
        }
    }

    /// Marks `key` live in the open generation's tier that holds it dead, if one does.
    fn revive(&mut self, key: &[u8], hash: u64) {
        for tier in self.open.tiers.iter().rev() {
            let Some(at) = tier.locate(key) else { continue };
            if tier.set_live(at, true) {
                note_merge_change(&mut self.merging, tier, key, true);
                if let Some(n) = self.open_dead.get_mut(&hash) {
                    *n -= 1;
                    if *n == 0 {
                        self.open_dead.remove(&hash);
                    }
                }
            }
            // A generation holds a key once.
            return;
        }
    }

    /// Adds the keys noted since the last flush (one block's) to the open generation as a
    /// tier, and goes on merging tiers as [`FANOUT`] asks, for a budget of keys: at least
    /// [`MERGE_STEP_KEYS`], and [`MERGE_KEYS_PER_KEY`] per key the block added.
    pub fn flush(&mut self) {
        let added = self.staged.len();
        if added > 0 {
            // At most each key whole and its two lengths (keys are under 16 KiB: two LEB128
            // bytes each).
            let bytes = self.staged.bytes.len() + 4 * added;
            let mut tier = TierWriter::with_capacity(bytes, bytes / CHUNK_BYTES + 1);
            for i in 0..added {
                tier.push_with(self.staged.key(i), self.staged.live[i]);
            }
            self.open.tiers.push(Arc::new(tier.finish()));
            self.staged.clear();
        }
        let budget = self
            .merge_step_keys
            .max(added.saturating_mul(MERGE_KEYS_PER_KEY));
        self.compact(budget);
    }

    /// Merges adjacent tiers of the open generation, newest first, until each holds under
    /// 1/[`FANOUT`] of the keys of the one before it or `budget` keys are merged; a merge
    /// the budget leaves unfinished goes on at the next commit.
    fn compact(&mut self, mut budget: usize) {
        loop {
            if let Some(merge) = &mut self.merging {
                let Some(merged) = merge.step(&mut budget) else {
                    return;
                };
                let merge = self.merging.take().expect("stepped");
                self.install(&merge, merged);
            }
            let tiers = &self.open.tiers;
            let Some(j) = (0..tiers.len().saturating_sub(1))
                .rev()
                .find(|&j| tiers[j + 1].len() * FANOUT >= tiers[j].len())
            else {
                return;
            };
            self.merging = Some(Merge::new(tiers[j].clone(), tiers[j + 1].clone()));
        }
    }

    /// Puts `merged` in place of the tiers `merge` merged, in whichever generation holds
    /// them (the open one may have been sealed meanwhile).
    fn install(&mut self, merge: &Merge, merged: Tier) {
        let generations =
            std::iter::once(&mut self.open).chain(self.sealed.iter_mut().map(|(_, g)| g));
        for generation in generations {
            if let Some(i) = generation.position(&merge.older, &merge.newer) {
                generation.tiers.splice(i..i + 2, [Arc::new(merged)]);
                return;
            }
        }
    }

    /// Seals the open generation at block `through` (a merge is starting): changes from
    /// `next` on, the log's end, go into a new one.
    pub fn seal(&mut self, through: u64, next: Loc) {
        self.flush();
        if !self.open.tiers.is_empty() {
            let open = std::mem::take(&mut self.open);
            self.sealed.push_back((through, open));
        }
        self.open_from = next;
        self.open_dead.clear();
    }

    /// A run at `height` is installed: generations it covers whole go, and a merge of their
    /// tiers with them.
    pub fn merged(&mut self, height: u64) {
        self.sealed.retain(|(through, _)| *through > height);
        if let Some(merge) = &self.merging {
            let generations = std::iter::once(&self.open).chain(self.sealed.iter().map(|(_, g)| g));
            let mut holders =
                generations.filter(|g| g.position(&merge.older, &merge.newer).is_some());
            if holders.next().is_none() {
                self.merging = None;
            }
        }
    }

    /// Every key some tier holds dead, into `f` (a key once per tier holding it), in no
    /// particular order: what may hide a run's entry.
    pub fn for_each_dead(&self, mut f: impl FnMut(&[u8])) {
        let generations = std::iter::once(&self.open).chain(self.sealed.iter().map(|(_, g)| g));
        for tier in generations.flat_map(|g| &g.tiers) {
            tier.for_each_dead(&mut f);
        }
    }

    /// The first live key of `range` walking `dir` in any tier of any generation, into
    /// `out`: each tier's first live key, the nearest of them.
    pub fn seek(&self, range: KeyRange<'_>, dir: Direction, out: &mut Vec<u8>) -> bool {
        let mut found = false;
        let mut other = Vec::new();
        let generations = std::iter::once(&self.open).chain(self.sealed.iter().map(|(_, g)| g));
        for tier in generations.flat_map(|g| &g.tiers) {
            if !found {
                found = tier.seek(range, dir, out);
            } else if tier.seek(range, dir, &mut other) && comes_before(&other, out, dir) {
                std::mem::swap(out, &mut other);
            }
        }
        found
    }

    /// Keys held, once per generation holding them.
    pub fn len(&self) -> usize {
        self.open.len() + self.sealed.iter().map(|(_, g)| g.len()).sum::<usize>()
    }

    /// Whether it holds no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Generations held (the open one included).
    pub fn generations(&self) -> usize {
        1 + self.sealed.len()
    }

    /// Tiers held, in every generation: what a seek looks in.
    pub fn tiers(&self) -> usize {
        self.open.tiers.len()
            + self
                .sealed
                .iter()
                .map(|(_, g)| g.tiers.len())
                .sum::<usize>()
    }

    /// Bytes held on the heap: tiers, a merge's output so far, the staged keys' buffers and
    /// the open generation's counts of dead keys by hash.
    pub fn heap_bytes(&self) -> usize {
        self.open.heap_bytes()
            + self
                .sealed
                .iter()
                .map(|(_, g)| g.heap_bytes())
                .sum::<usize>()
            + self.staged.heap_bytes()
            + self.merging.as_ref().map_or(0, |m| m.out.heap_bytes())
            + self.open_dead.capacity() * 2 * std::mem::size_of::<u64>()
    }

    /// Finishes every merge the tiers' shape asks for (for tests and benchmarks).
    pub fn settle(&mut self) {
        self.compact(usize::MAX);
    }
}
