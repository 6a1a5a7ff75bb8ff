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

use std::collections::VecDeque;
use std::ops::Bound;
use std::sync::Arc;

use super::index::Loc;
use crate::store::{Direction, KeyRange, comes_before, sort_prefix};

/// The bytes of front-coded keys a chunk aims at. A seek decodes up to two chunks per tier
/// from their first key, so smaller chunks seek faster; each chunk also keeps its first key
/// whole and 28 bytes of index, so larger ones are smaller. At 256 bytes a chunk holds about
/// 30 of a token's balance keys (8 bytes each once front-coded): a seek in a tier of 400,000
/// of them took 0.67 µs and the tier 9.3 bytes a key, against 1.2 µs at 512 bytes a chunk
/// (`merge_tiers_and_seeks_are_timed` below, `--ignored --nocapture`, on a loaded 2-core
/// Zen 4).
pub const CHUNK_BYTES: usize = 256;

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

/// Appends `n` as LEB128.
fn put_len(out: &mut Vec<u8>, mut n: usize) {
    while n >= 0x80 {
        out.push(n as u8 | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// The length [`put_len`] wrote at `at`, moving `at` past it.
fn get_len(data: &[u8], at: &mut usize) -> usize {
    let (mut n, mut shift) = (0usize, 0);
    loop {
        let byte = data[*at];
        *at += 1;
        n |= usize::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return n;
        }
        shift += 7;
    }
}

/// How many leading bytes `a` and `b` share.
fn shared_len(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// `a ++ b` compared with `key`, without joining them.
fn cmp_joined(a: &[u8], b: &[u8], key: &[u8]) -> std::cmp::Ordering {
    let n = a.len().min(key.len());
    a[..n].cmp(&key[..n]).then_with(|| {
        if a.len() > key.len() {
            std::cmp::Ordering::Greater
        } else {
            b.cmp(&key[a.len()..])
        }
    })
}

/// Whether `a ++ b` satisfies the upper bound `hi`.
fn joined_below(a: &[u8], b: &[u8], hi: Bound<&[u8]>) -> bool {
    match hi {
        Bound::Included(hi) => cmp_joined(a, b, hi).is_le(),
        Bound::Excluded(hi) => cmp_joined(a, b, hi).is_lt(),
        Bound::Unbounded => true,
    }
}

/// Front-coded keys: each the length it shares with the key before it (0 for a chunk's
/// first) and the rest.
struct Entries<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Iterator for Entries<'a> {
    type Item = (usize, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        if self.at >= self.data.len() {
            return None;
        }
        let shared = get_len(self.data, &mut self.at);
        let n = get_len(self.data, &mut self.at);
        let suffix = &self.data[self.at..self.at + n];
        self.at += n;
        Some((shared, suffix))
    }
}

fn entries(data: &[u8]) -> Entries<'_> {
    Entries { data, at: 0 }
}

/// Keys back to back: the current block's keys that enter the order.
#[derive(Default)]
pub struct Staged {
    bytes: Vec<u8>,
    ends: Vec<u32>,
}

impl Staged {
    /// Adds `key`, which must sort after every key added since the last clear.
    pub fn push(&mut self, key: &[u8]) {
        debug_assert!(self.is_empty() || self.key(self.len() - 1) < key);
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

    /// Drops every key, keeping the buffers up to [`STAGED_KEEP_BYTES`].
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
        if self.heap_bytes() > STAGED_KEEP_BYTES {
            *self = Self::default();
        }
    }

    fn heap_bytes(&self) -> usize {
        self.bytes.capacity() + self.ends.capacity() * std::mem::size_of::<u32>()
    }
}

/// An immutable sorted set of keys, front-coded in chunks of about [`CHUNK_BYTES`]: one
/// block's new keys, or the merge of several blocks'.
pub struct Tier {
    /// The chunks, in slabs of at most [`SLAB_BYTES`]. Each entry is two LEB128 lengths
    /// (shared with the key before it, 0 for a chunk's first, then the rest's) and the rest's
    /// bytes.
    slabs: Box<[Box<[u8]>]>,
    /// Where each chunk lies: its slab, start and end there.
    chunks: Box<[ChunkAt]>,
    /// Each chunk's first key's 16-byte prefix (`store::sort_prefix`): a search compares
    /// these, and whole keys only on a tie.
    prefixes: Box<[u128]>,
    len: usize,
}

/// A chunk's place in its tier's slabs.
#[derive(Clone, Copy)]
struct ChunkAt {
    slab: u32,
    start: u32,
    end: u32,
}

/// Tiers keep their keys in slabs of one size rather than in one buffer each: a merge's
/// output grows a slab at a time, never copied to grow, and merges free and allocate slabs of
/// the one size the next merge reuses, instead of buffers of every size up to a whole
/// generation (tens of MiB at a million keys). 32 KiB: a medium size for mimalloc, the
/// binary's allocator (16 to a 512 KiB page), and about 128 chunks.
pub const SLAB_BYTES: usize = 32 << 10;

/// Builds a [`Tier`] from keys in increasing order.
pub struct TierWriter {
    slabs: Vec<Box<[u8]>>,
    /// The slab being filled.
    slab: Vec<u8>,
    /// Bytes the tier is expected to need (`usize::MAX`: unknown), so a small tier does not
    /// take a whole slab.
    expected: usize,
    chunks: Vec<ChunkAt>,
    prefixes: Vec<u128>,
    previous: Vec<u8>,
    len: usize,
}

impl Default for TierWriter {
    fn default() -> Self {
        Self::with_capacity(usize::MAX, 0)
    }
}

impl TierWriter {
    /// A writer for about `bytes` of encoded keys in `chunks` chunks.
    pub fn with_capacity(bytes: usize, chunks: usize) -> Self {
        Self {
            slabs: Vec::new(),
            slab: Vec::new(),
            expected: bytes,
            chunks: Vec::with_capacity(chunks),
            prefixes: Vec::with_capacity(chunks),
            previous: Vec::new(),
            len: 0,
        }
    }

    /// Starts a chunk with `key`, in a new slab if this one cannot take a whole chunk.
    fn start_chunk(&mut self, key: &[u8]) {
        if self.slab.capacity() == 0 || self.slab.len() + CHUNK_BYTES > self.slab.capacity() {
            if !self.slab.is_empty() {
                let full = std::mem::take(&mut self.slab).into_boxed_slice();
                self.expected = self.expected.saturating_sub(full.len());
                self.slabs.push(full);
            }
            self.slab = Vec::with_capacity(self.expected.clamp(CHUNK_BYTES, SLAB_BYTES));
        }
        let slab = u32::try_from(self.slabs.len()).expect("under 4 G slabs");
        let start = self.slab.len() as u32;
        self.chunks.push(ChunkAt {
            slab,
            start,
            end: start,
        });
        self.prefixes.push(sort_prefix(key));
    }

    /// Adds `key`, which must sort after every key added before.
    pub fn push(&mut self, key: &[u8]) {
        debug_assert!(self.len == 0 || self.previous.as_slice() < key);
        let open = self.chunks.last().copied();
        let shared = if open.is_none_or(|c| (c.end - c.start) as usize >= CHUNK_BYTES) {
            self.start_chunk(key);
            0
        } else {
            shared_len(&self.previous, key)
        };
        put_len(&mut self.slab, shared);
        put_len(&mut self.slab, key.len() - shared);
        self.slab.extend_from_slice(&key[shared..]);
        // A chunk ends at most one key past CHUNK_BYTES, which a slab leaves room for unless
        // the key is longer than that: then the slab grows past SLAB_BYTES. Contract keys are
        // bounded by the host API (265 bytes with their namespace), so only the chain's own
        // records could, and none does.
        self.chunks.last_mut().expect("started").end =
            u32::try_from(self.slab.len()).expect("a slab under 4 GiB");
        self.previous.truncate(shared);
        self.previous.extend_from_slice(&key[shared..]);
        self.len += 1;
    }

    /// Bytes it holds on the heap so far.
    pub fn heap_bytes(&self) -> usize {
        self.slabs.iter().map(|s| s.len()).sum::<usize>()
            + self.slab.capacity()
            + self.chunks.capacity() * std::mem::size_of::<ChunkAt>()
            + self.prefixes.capacity() * std::mem::size_of::<u128>()
    }

    /// The tier.
    pub fn finish(mut self) -> Tier {
        if !self.slab.is_empty() {
            self.slabs.push(self.slab.into_boxed_slice());
        }
        Tier {
            slabs: self.slabs.into_boxed_slice(),
            chunks: self.chunks.into_boxed_slice(),
            prefixes: self.prefixes.into_boxed_slice(),
            len: self.len,
        }
    }
}

impl Tier {
    /// Keys held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no key.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes it holds on the heap.
    pub fn heap_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.slabs.iter().map(|s| s.len()).sum::<usize>()
            + self.slabs.len() * std::mem::size_of::<Box<[u8]>>()
            + self.chunks.len() * std::mem::size_of::<ChunkAt>()
            + self.prefixes.len() * std::mem::size_of::<u128>()
    }

    fn chunk(&self, i: usize) -> &[u8] {
        let c = self.chunks[i];
        &self.slabs[c.slab as usize][c.start as usize..c.end as usize]
    }

    /// Every entry, chunk after chunk.
    fn all_entries(&self) -> impl Iterator<Item = (usize, &[u8])> {
        (0..self.chunks.len()).flat_map(|i| entries(self.chunk(i)))
    }

    fn first_key(&self, i: usize) -> &[u8] {
        entries(self.chunk(i))
            .next()
            .expect("chunks are not empty")
            .1
    }

    /// How many chunks start at or before `key` (`inclusive`) or before it.
    fn chunks_starting_before(&self, key: &[u8], inclusive: bool) -> usize {
        let prefix = sort_prefix(key);
        let (mut lo, mut hi) = (0, self.prefixes.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            let before = match self.prefixes[mid].cmp(&prefix) {
                std::cmp::Ordering::Less => true,
                std::cmp::Ordering::Greater => false,
                std::cmp::Ordering::Equal if inclusive => self.first_key(mid) <= key,
                std::cmp::Ordering::Equal => self.first_key(mid) < key,
            };
            if before {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// The first key of `range` walking `dir`, into `out`; whether there is one.
    pub fn seek(&self, range: KeyRange<'_>, dir: Direction, out: &mut Vec<u8>) -> bool {
        match dir {
            Direction::Forward => self.seek_forward(range, out),
            Direction::Backward => self.seek_backward(range, out),
        }
    }

    fn seek_forward(&self, range: KeyRange<'_>, out: &mut Vec<u8>) -> bool {
        // The chunk that may hold `lo`; the next one, if it comes to that, starts past it.
        let first = match range.lo {
            Bound::Unbounded => 0,
            Bound::Included(lo) | Bound::Excluded(lo) => {
                self.chunks_starting_before(lo, true).saturating_sub(1)
            }
        };
        for i in first..(first + 2).min(self.chunks.len()) {
            for (shared, suffix) in entries(self.chunk(i)) {
                out.truncate(shared);
                out.extend_from_slice(suffix);
                if range.above_lo(out) {
                    return range.below_hi(out);
                }
            }
        }
        false
    }

    fn seek_backward(&self, range: KeyRange<'_>, out: &mut Vec<u8>) -> bool {
        // The last chunk that starts below `hi`: the key sought is in it.
        let below = match range.hi {
            Bound::Unbounded => self.chunks.len(),
            Bound::Included(hi) => self.chunks_starting_before(hi, true),
            Bound::Excluded(hi) => self.chunks_starting_before(hi, false),
        };
        let Some(i) = below.checked_sub(1) else {
            return false;
        };
        out.clear();
        for (shared, suffix) in entries(self.chunk(i)) {
            if !joined_below(&out[..shared], suffix, range.hi) {
                break;
            }
            out.truncate(shared);
            out.extend_from_slice(suffix);
        }
        range.above_lo(out)
    }

    /// Every key, in order, into `f`, or until `f` says stop.
    fn for_each(&self, mut f: impl FnMut(&[u8]) -> bool) {
        let mut key = Vec::new();
        for (shared, suffix) in self.all_entries() {
            key.truncate(shared);
            key.extend_from_slice(suffix);
            if !f(&key) {
                return;
            }
        }
    }

    /// Every key, in order (for tests and audits).
    pub fn keys(&self) -> Vec<Vec<u8>> {
        let mut all = Vec::with_capacity(self.len);
        self.for_each(|k| {
            all.push(k.to_vec());
            true
        });
        all
    }
}

/// A position in a tier, a key at a time, for a merge that may stop and go on at a later
/// commit: it holds no borrow of the tier.
struct TierCursor {
    chunk: usize,
    at: usize,
    key: Vec<u8>,
    valid: bool,
}

impl TierCursor {
    fn new(tier: &Tier) -> Self {
        let mut cursor = Self {
            chunk: 0,
            at: 0,
            key: Vec::new(),
            valid: true,
        };
        cursor.advance(tier);
        cursor
    }

    /// Moves to the next key of `tier`.
    fn advance(&mut self, tier: &Tier) {
        while self.chunk < tier.chunks.len() {
            let chunk = tier.chunk(self.chunk);
            if self.at < chunk.len() {
                let shared = get_len(chunk, &mut self.at);
                let n = get_len(chunk, &mut self.at);
                self.key.truncate(shared);
                self.key.extend_from_slice(&chunk[self.at..self.at + n]);
                self.at += n;
                return;
            }
            (self.chunk, self.at) = (self.chunk + 1, 0);
        }
        self.valid = false;
    }
}

/// A merge of two adjacent tiers, done a budget of keys at a time.
struct Merge {
    older: Arc<Tier>,
    newer: Arc<Tier>,
    a: TierCursor,
    b: TierCursor,
    out: TierWriter,
}

impl Merge {
    fn new(older: Arc<Tier>, newer: Arc<Tier>) -> Self {
        // A key's new neighbour below it is at least as close as its old one, so it shares
        // at least as much with it: the merge is no larger than its inputs but for chunks'
        // first keys, which are whole.
        let bytes = older.heap_bytes() + newer.heap_bytes();
        let chunks = older.chunks.len() + newer.chunks.len();
        Self {
            a: TierCursor::new(&older),
            b: TierCursor::new(&newer),
            out: TierWriter::with_capacity(bytes, chunks),
            older,
            newer,
        }
    }

    /// Merges up to `budget` keys (taking them off it); the merged tier once done.
    fn step(&mut self, budget: &mut usize) -> Option<Tier> {
        let (a, b) = (&mut self.a, &mut self.b);
        while a.valid || b.valid {
            if *budget == 0 {
                return None;
            }
            *budget -= 1;
            let take_a = !b.valid || (a.valid && a.key <= b.key);
            let take_b = !a.valid || (b.valid && b.key <= a.key);
            self.out.push(if take_a { &a.key } else { &b.key });
            if take_a {
                a.advance(&self.older);
            }
            if take_b {
                b.advance(&self.newer);
            }
        }
        Some(std::mem::take(&mut self.out).finish())
    }
}

/// The keys of `older` and `newer` as one tier, each key once.
pub fn merge_tiers(older: &Arc<Tier>, newer: &Arc<Tier>) -> Tier {
    let mut merge = Merge::new(older.clone(), newer.clone());
    let mut budget = usize::MAX;
    merge.step(&mut budget).expect("an unbounded budget")
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
        }
    }

    /// Notes a change of `key` whose previous change (per the index) was at `previous`:
    /// the key enters the open generation unless it is there already. Keys are noted in
    /// increasing order between [`Order::flush`]es.
    pub fn note(&mut self, key: &[u8], previous: Option<Loc>) {
        if previous.is_none_or(|p| p < self.open_from) {
            self.staged.push(key);
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
                tier.push(self.staged.key(i));
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

    /// The first key of `range` walking `dir` in any tier of any generation, into `out`.
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

    /// Bytes held on the heap: tiers, a merge's output so far, and the staged keys' buffers.
    pub fn heap_bytes(&self) -> usize {
        self.open.heap_bytes()
            + self
                .sealed
                .iter()
                .map(|(_, g)| g.heap_bytes())
                .sum::<usize>()
            + self.staged.heap_bytes()
            + self.merging.as_ref().map_or(0, |m| m.out.heap_bytes())
    }

    /// Finishes every merge the tiers' shape asks for (for tests and benchmarks).
    pub fn settle(&mut self) {
        self.compact(usize::MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn rng(seed: u64) -> impl FnMut() -> u64 {
        let mut s = seed;
        move || {
            s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }
    }

    /// Keys over a tiny alphabet with shared prefixes, prefixes of each other, the empty key,
    /// and now and then one longer than a chunk; some share 20 bytes, so that chunks tie on
    /// the 16-byte prefix a search compares first.
    fn key(next: &mut impl FnMut() -> u64) -> Vec<u8> {
        let len = match next() % 20 {
            0 => 0,
            1 => CHUNK_BYTES + 1 + (next() % 300) as usize,
            _ => 1 + (next() % 6) as usize,
        };
        let mut k = if next().is_multiple_of(3) {
            vec![7; 20]
        } else {
            Vec::new()
        };
        k.extend((0..len).map(|_| [0u8, 1, 2, 0xff][next() as usize % 4]));
        k
    }

    fn bound<'a>(next: &mut impl FnMut() -> u64, key: &'a [u8]) -> Bound<&'a [u8]> {
        match next() % 3 {
            0 => Bound::Unbounded,
            1 => Bound::Included(key),
            _ => Bound::Excluded(key),
        }
    }

    fn model_seek(
        model: &BTreeSet<Vec<u8>>,
        range: KeyRange<'_>,
        dir: Direction,
    ) -> Option<Vec<u8>> {
        // BTreeSet::range panics on crossed bounds; a seek answers None.
        let mut all = model.iter().filter(|k| range.contains(k));
        match dir {
            Direction::Forward => all.next().cloned(),
            Direction::Backward => all.next_back().cloned(),
        }
    }

    fn check_seeks(
        next: &mut impl FnMut() -> u64,
        model: &BTreeSet<Vec<u8>>,
        seek: impl Fn(KeyRange<'_>, Direction, &mut Vec<u8>) -> bool,
    ) {
        for _ in 0..30 {
            let (a, b) = (key(next), key(next));
            let range = KeyRange::new(bound(next, &a), bound(next, &b));
            for dir in [Direction::Forward, Direction::Backward] {
                let mut out = Vec::new();
                let got = seek(range, dir, &mut out).then_some(out);
                assert_eq!(got, model_seek(model, range, dir), "{range:?} {dir:?}");
            }
        }
    }

    #[test]
    fn a_tier_seeks_as_a_btree_set_does() {
        for seed in 0..20 {
            let mut next = rng(seed);
            let model: BTreeSet<Vec<u8>> = (0..next() % 3000).map(|_| key(&mut next)).collect();
            let mut writer = TierWriter::default();
            model.iter().for_each(|k| writer.push(k));
            let tier = writer.finish();
            assert_eq!(tier.keys(), model.iter().cloned().collect::<Vec<_>>());
            check_seeks(&mut next, &model, |r, d, out| tier.seek(r, d, out));
        }
    }

    /// Blocks of random keys through an order whose commits merge only 16 keys and 8 per key
    /// added, so that merges span commits: every seek agrees with the model whether a merge
    /// is under way or installed, and the tiers stay few.
    #[test]
    fn an_order_seeks_as_a_btree_set_does_through_merges_that_span_commits() {
        for seed in 0..8 {
            let mut next = rng(seed);
            let mut order = Order::with_merge_step(16);
            let mut model = BTreeSet::new();
            for block in 0..300 {
                let batch: BTreeSet<Vec<u8>> =
                    (0..1 + next() % 40).map(|_| key(&mut next)).collect();
                for k in &batch {
                    let previous = model.contains(k).then(|| Loc::new(1, 0));
                    order.note(k, previous);
                    model.insert(k.clone());
                }
                order.flush();
                if block % 50 == 49 {
                    order.settle();
                }
                assert_eq!(order.len(), model.len(), "seed {seed}, block {block}");
                check_seeks(&mut next, &model, |r, d, out| order.seek(r, d, out));
            }
            order.settle();
            // Settled, each tier holds under a quarter of the keys of the one before it:
            // about 6,000 keys make at most 1 + log₄(6,000) ≈ 7 tiers.
            assert!(order.tiers() <= 7, "{} tiers", order.tiers());
        }
    }

    #[test]
    fn front_coding_keeps_a_token_s_balances_in_a_few_bytes_each() {
        // 100,000 balances of one token: [0x10, contract (8), owner (8)], owners random,
        // a block of 1,000 at a time.
        let mut next = rng(7);
        let mut order = Order::default();
        for _ in 0..100 {
            let batch: BTreeSet<Vec<u8>> = (0..1000)
                .map(|_| {
                    let mut k = vec![0x10, 1, 2, 3, 4, 5, 6, 7, 8];
                    k.extend_from_slice(&next().to_be_bytes());
                    k
                })
                .collect();
            batch.iter().for_each(|k| order.note(k, None));
            order.flush();
        }
        order.settle();
        let per_key = order.heap_bytes() as f64 / order.len() as f64;
        // Each key keeps about 7 of its 17 bytes and 2 of lengths.
        assert!(per_key < 11.0, "{per_key} bytes per key");
    }

    /// The figures [`MERGE_STEP_KEYS`] and [`CHUNK_BYTES`] rely on: a merge's cost per key
    /// and a seek's in one tier, over a token's balance keys. A timing, not a check: run it
    /// with `cargo test --release -p tally-chain --lib merge_tiers_and_seeks -- --ignored
    /// --nocapture`.
    #[test]
    #[ignore = "a timing, not a check"]
    fn merge_tiers_and_seeks_are_timed() {
        let mut next = rng(11);
        let mut tier = |n: usize| {
            let keys: BTreeSet<Vec<u8>> = (0..n)
                .map(|_| {
                    let mut k = vec![0x10, 1, 2, 3, 4, 5, 6, 7, 8];
                    k.extend_from_slice(&next().to_be_bytes());
                    k
                })
                .collect();
            let mut w = TierWriter::default();
            keys.iter().for_each(|k| w.push(k));
            w.finish()
        };
        let (older, newer) = (Arc::new(tier(400_000)), Arc::new(tier(100_000)));
        let start = std::time::Instant::now();
        for _ in 0..5 {
            std::hint::black_box(merge_tiers(&older, &newer));
        }
        let merge_ns = start.elapsed().as_nanos() as f64 / 5.0 / 500_000.0;
        let mut next = rng(12);
        let (mut key, mut out) = (vec![0x10, 1, 2, 3, 4, 5, 6, 7, 8], Vec::new());
        let start = std::time::Instant::now();
        for _ in 0..1_000_000 {
            key.truncate(9);
            key.extend_from_slice(&next().to_be_bytes());
            let range = KeyRange::new(Bound::Excluded(&key), Bound::Unbounded);
            std::hint::black_box(older.seek(range, Direction::Forward, &mut out));
        }
        let seek_ns = start.elapsed().as_nanos() as f64 / 1e6;
        eprintln!(
            "merge: {merge_ns:.1} ns a key; seek in a tier of 400,000 keys: {seek_ns:.0} ns; \
             {:.1} bytes a key",
            older.heap_bytes() as f64 / older.len() as f64
        );
    }

    #[test]
    fn generations_drop_when_a_run_covers_them_and_keys_changed_since_stay() {
        let mut order = Order::default();
        order.note(b"a", None);
        order.note(b"b", None);
        order.flush();
        order.seal(5, Loc::new(1, 100));
        // "b" changes again after the seal (its last change was before it): it enters the
        // new generation; "c" is new.
        order.note(b"b", Some(Loc::new(1, 40)));
        order.note(b"c", None);
        order.flush();
        // "c" changes again in the same generation: not added twice.
        order.note(b"c", Some(Loc::new(1, 120)));
        order.flush();
        assert_eq!(order.len(), 4);
        order.merged(4);
        assert_eq!(order.generations(), 2, "a run below the seal keeps it");
        order.merged(5);
        assert_eq!(order.generations(), 1);
        let mut out = Vec::new();
        assert!(order.seek(KeyRange::ALL, Direction::Forward, &mut out));
        assert_eq!(out, b"b");
        assert!(order.seek(KeyRange::ALL, Direction::Backward, &mut out));
        assert_eq!(out, b"c");
    }
}
