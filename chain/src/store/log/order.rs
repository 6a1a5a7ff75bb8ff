//! The order of the log store's unmerged keys: what lets [`crate::StateStore::seek`] walk
//! the keys changed since the last merge in key order, beside the sorted run.
//!
//! The index ([`super::index`]) is a hash table of 12-byte slots that holds no key, so it
//! cannot say which unmerged key follows another; the run is sorted but holds only what was
//! merged. NEAR dropped iteration rather than give its hash-keyed flat storage an order
//! (nearcore's `storage_iter_*` host functions are deprecated). Here the order is kept beside
//! the index, and its cost is bounded by what the index already holds:
//!
//! - **What it holds.** Every key changed since the run, and possibly a few more: a
//!   [`KeySet`] per *generation* of the log. The generation open when a merge starts is
//!   sealed at the head, and dropped once a run at or past that head is installed; a key
//!   changed again in a later generation enters that one too. So the keys held are a
//!   superset of the unmerged keys, which is all a seek needs: a key it finds here is read
//!   through the index (which says whether it was deleted), and a run key that is not here
//!   was not changed since the run, so the run's value is current.
//! - **What a commit pays.** The index already says whether a change's key is new to it, or
//!   last changed before the open generation: only such keys enter the order, a block's worth
//!   at a time (each block's changes are sorted). A transfer that updates two balances
//!   changed since the last merge pays one comparison per key. A key new to the generation
//!   costs the rewrite of one chunk of about [`CHUNK_BYTES`].
//! - **What it costs in memory.** Keys are front-coded in sorted chunks of about
//!   [`CHUNK_BYTES`] (as LevelDB's data blocks and the run's own blocks share prefixes): each
//!   key after a chunk's first keeps only what it does not share with the key before it,
//!   behind two one-byte lengths. Contract keys share their 9-byte namespace and, sorted,
//!   most of what follows: `benches/benches/store_iter.rs` measures the bytes per key (see
//!   [`KeySet::heap_bytes`]) against the index's 12–14.
//! - **What a seek costs.** A binary search over the chunks' first keys (a `BTreeMap`) and a
//!   scan of one or two chunks, in memory, per generation (one, or three while a merge runs).

use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;

use super::index::Loc;
use crate::store::{Direction, KeyRange, comes_before};

/// The bytes of front-coded keys a chunk aims at. A seek scans up to two chunks and a new
/// key rewrites one, so smaller chunks are faster; each chunk also costs
/// [`CHUNK_OVERHEAD`] bytes and its first key whole, so larger ones are smaller. At 512
/// bytes a chunk holds about 60 keys of a token's balances (9 bytes each once front-coded):
/// the overhead is under 2 bytes a key, and a scan of one chunk about 0.3 µs.
pub const CHUNK_BYTES: usize = 512;

/// Bytes a chunk costs beyond its first key and body: its `BTreeMap` slot (two 16-byte boxed
/// slices, in nodes about two-thirds full: 48) and the two allocations' headers (16 each,
/// glibc's).
const CHUNK_OVERHEAD: usize = 48 + 2 * 16;

/// Appends `n` as LEB128.
fn put_len(out: &mut Vec<u8>, mut n: usize) {
    while n >= 0x80 {
        out.push(n as u8 | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// The bytes [`put_len`] takes for `n`.
fn len_bytes(n: usize) -> usize {
    (usize::BITS - (n | 1).leading_zeros()).div_ceil(7) as usize
}

/// The length [`put_len`] wrote at `at`, moving `at` past it.
fn get_len(body: &[u8], at: &mut usize) -> usize {
    let (mut n, mut shift) = (0usize, 0);
    loop {
        let byte = body[*at];
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

/// A chunk's keys after its first: each the length it shares with the key before it and
/// the rest.
struct Suffixes<'a> {
    body: &'a [u8],
    at: usize,
}

impl<'a> Iterator for Suffixes<'a> {
    type Item = (usize, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        if self.at >= self.body.len() {
            return None;
        }
        let shared = get_len(self.body, &mut self.at);
        let n = get_len(self.body, &mut self.at);
        let suffix = &self.body[self.at..self.at + n];
        self.at += n;
        Some((shared, suffix))
    }
}

fn suffixes(body: &[u8]) -> Suffixes<'_> {
    Suffixes { body, at: 0 }
}

/// Keys back to back: a block's new keys, and the scratch of a chunk's rewrite.
#[derive(Default)]
pub struct Staged {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Staged {
    /// Adds `key`, which must sort after every key added since the last clear.
    pub fn push(&mut self, key: &[u8]) {
        debug_assert!(self.ends.is_empty() || self.key(self.len() - 1) < key);
        self.bytes.extend_from_slice(key);
        self.ends.push(self.bytes.len());
    }

    /// Key `i`.
    pub fn key(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.bytes[start..self.ends[i]]
    }

    /// Keys held.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether it holds no key.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Drops every key, keeping the buffers.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
    }

    fn heap_bytes(&self) -> usize {
        self.bytes.capacity() + self.ends.capacity() * std::mem::size_of::<usize>()
    }
}

/// A sorted set of keys, front-coded in chunks of about [`CHUNK_BYTES`]. Keys are only
/// added; a set is dropped whole (see the module docs).
#[derive(Default)]
pub struct KeySet {
    /// Each chunk's first key → its other keys, each as LEB128 lengths (shared with the key
    /// before it, then the rest) and the rest's bytes.
    chunks: BTreeMap<Box<[u8]>, Box<[u8]>>,
    len: usize,
    /// Bytes of first keys and bodies.
    bytes: usize,
}

impl KeySet {
    /// Keys held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no key.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes held on the heap, counting each chunk's [`CHUNK_OVERHEAD`].
    pub fn heap_bytes(&self) -> usize {
        self.bytes + self.chunks.len() * CHUNK_OVERHEAD
    }

    /// Adds the keys of `batch` (strictly increasing), rewriting each chunk they fall in
    /// once; keys already held stay once. `scratch` is reused across calls.
    pub fn insert_sorted(&mut self, batch: &Staged, scratch: &mut Staged) {
        let mut i = 0;
        let mut old_first = Vec::new();
        while i < batch.len() {
            let key = batch.key(i);
            scratch.clear();
            let held_before;
            {
                // The chunk `key` falls in: the last one starting at or before it, or the
                // first if it sorts before them all.
                let below = (Bound::Unbounded, Bound::Included(key));
                let Some((first, body)) = self
                    .chunks
                    .range::<[u8], _>(below)
                    .next_back()
                    .or_else(|| self.chunks.iter().next())
                else {
                    // An empty set: the batch is the set.
                    for j in i..batch.len() {
                        scratch.push(batch.key(j));
                    }
                    self.put_chunks(scratch, 0);
                    return;
                };
                // The batch's keys that fall in it: those before the next chunk.
                let after = (Bound::Excluded(&**first), Bound::Unbounded);
                let next = self.chunks.range::<[u8], _>(after).next().map(|(k, _)| k);
                let mut end = i + 1;
                while end < batch.len() && next.is_none_or(|n| batch.key(end) < &**n) {
                    end += 1;
                }
                held_before = merge_into(first, body, batch, i..end, scratch);
                old_first.clear();
                old_first.extend_from_slice(first);
                i = end;
            }
            if scratch.len() > held_before {
                let body = self.chunks.remove(old_first.as_slice()).expect("found");
                self.bytes -= old_first.len() + body.len();
                self.put_chunks(scratch, held_before);
            }
        }
    }

    /// Adds `keys` (sorted, `held` of them already counted) as chunks of about equal size.
    fn put_chunks(&mut self, keys: &Staged, held: usize) {
        // What they take front-coded as one chunk, to split it evenly: a chunk split only
        // where it overflows would leave a sliver that pays a chunk's overhead for one key.
        let mut total = 0;
        for j in 1..keys.len() {
            let (prev, key) = (keys.key(j - 1), keys.key(j));
            let shared = shared_len(prev, key);
            total += len_bytes(shared) + len_bytes(key.len() - shared) + key.len() - shared;
        }
        let pieces = total.div_ceil(CHUNK_BYTES).max(1);
        let target = total.div_ceil(pieces);
        let mut j = 0;
        let mut body = Vec::new();
        while j < keys.len() {
            let first = keys.key(j);
            body.clear();
            j += 1;
            while j < keys.len() && body.len() < target {
                let (prev, key) = (keys.key(j - 1), keys.key(j));
                let shared = shared_len(prev, key);
                put_len(&mut body, shared);
                put_len(&mut body, key.len() - shared);
                body.extend_from_slice(&key[shared..]);
                j += 1;
            }
            self.bytes += first.len() + body.len();
            self.chunks.insert(first.into(), body.as_slice().into());
        }
        self.len += keys.len() - held;
    }

    /// The first key of `range` walking `dir`, into `out`; whether there is one.
    pub fn seek(&self, range: KeyRange<'_>, dir: Direction, out: &mut Vec<u8>) -> bool {
        match dir {
            Direction::Forward => self.seek_forward(range, out),
            Direction::Backward => self.seek_backward(range, out),
        }
    }

    fn seek_forward(&self, range: KeyRange<'_>, out: &mut Vec<u8>) -> bool {
        // The chunk that may hold `lo`, or the first.
        let start = match range.lo {
            Bound::Unbounded => self.chunks.iter().next(),
            Bound::Included(lo) | Bound::Excluded(lo) => self
                .chunks
                .range::<[u8], _>((Bound::Unbounded, Bound::Included(lo)))
                .next_back()
                .or_else(|| self.chunks.iter().next()),
        };
        let Some((start, _)) = start else {
            return false;
        };
        // At most two chunks: the next one starts past `lo`.
        let from = (Bound::Included(&**start), Bound::Unbounded);
        for (first, body) in self.chunks.range::<[u8], _>(from) {
            out.clear();
            out.extend_from_slice(first);
            if range.above_lo(out) {
                return range.below_hi(out);
            }
            for (shared, suffix) in suffixes(body) {
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
        // The last chunk whose first key is below `hi`: the key sought is in it.
        let start = match range.hi {
            Bound::Unbounded => self.chunks.iter().next_back(),
            hi => self
                .chunks
                .range::<[u8], _>((Bound::Unbounded, hi))
                .next_back(),
        };
        let Some((first, body)) = start else {
            return false;
        };
        out.clear();
        out.extend_from_slice(first);
        for (shared, suffix) in suffixes(body) {
            if !joined_below(&out[..shared], suffix, range.hi) {
                break;
            }
            out.truncate(shared);
            out.extend_from_slice(suffix);
        }
        range.above_lo(out)
    }

    /// Every key, in order (for tests and audits).
    pub fn keys(&self) -> Vec<Vec<u8>> {
        let mut all = Vec::with_capacity(self.len);
        for (first, body) in &self.chunks {
            let mut key = first.to_vec();
            all.push(key.clone());
            for (shared, suffix) in suffixes(body) {
                key.truncate(shared);
                key.extend_from_slice(suffix);
                all.push(key.clone());
            }
        }
        all
    }
}

/// Merges the chunk (`first`, `body`) with `batch`'s keys `keys` into `out`, each key once;
/// returns how many keys the chunk held.
fn merge_into(
    first: &[u8],
    body: &[u8],
    batch: &Staged,
    keys: std::ops::Range<usize>,
    out: &mut Staged,
) -> usize {
    let mut held = 0;
    let mut next = keys.start;
    let mut add = |key: &[u8], out: &mut Staged| {
        while next < keys.end && batch.key(next) < key {
            out.push(batch.key(next));
            next += 1;
        }
        if next < keys.end && batch.key(next) == key {
            next += 1;
        }
        out.push(key);
        held += 1;
    };
    let mut key = first.to_vec();
    add(&key, out);
    for (shared, suffix) in suffixes(body) {
        key.truncate(shared);
        key.extend_from_slice(suffix);
        add(&key, out);
    }
    for j in next..keys.end {
        out.push(batch.key(j));
    }
    held
}

/// The order over every key changed since the run, in generations (see the module docs).
pub struct Order {
    /// Generations sealed when a merge started, oldest first, each with the height of the
    /// last block it covers: dropped once a run at that height or above is installed.
    sealed: VecDeque<(u64, KeySet)>,
    /// The generation commits add to.
    open: KeySet,
    /// Changes at or after this location in the log belong to the open generation.
    open_from: Loc,
    /// The current block's keys that enter the open generation.
    staged: Staged,
    scratch: Staged,
}

impl Default for Order {
    fn default() -> Self {
        Self {
            sealed: VecDeque::new(),
            open: KeySet::default(),
            // Every change belongs to the first generation.
            open_from: Loc::new(0, 0),
            staged: Staged::default(),
            scratch: Staged::default(),
        }
    }
}

impl Order {
    /// Notes a change of `key` whose previous change (per the index) was at `previous`:
    /// the key enters the open generation unless it is there already. Keys are noted in
    /// increasing order between [`Order::flush`]es.
    pub fn note(&mut self, key: &[u8], previous: Option<Loc>) {
        if previous.is_none_or(|p| p < self.open_from) {
            self.staged.push(key);
        }
    }

    /// Adds the keys noted since the last flush (one block's) to the open generation.
    pub fn flush(&mut self) {
        if !self.staged.is_empty() {
            self.open.insert_sorted(&self.staged, &mut self.scratch);
            self.staged.clear();
        }
    }

    /// Seals the open generation at block `through` (a merge is starting): changes from
    /// `next` on, the log's end, go into a new one.
    pub fn seal(&mut self, through: u64, next: Loc) {
        self.flush();
        if !self.open.is_empty() {
            self.sealed
                .push_back((through, std::mem::take(&mut self.open)));
        }
        self.open_from = next;
    }

    /// A run at `height` is installed: generations it covers whole go.
    pub fn merged(&mut self, height: u64) {
        self.sealed.retain(|(through, _)| *through > height);
    }

    /// The first key of `range` walking `dir` in any generation, into `out`.
    pub fn seek(&self, range: KeyRange<'_>, dir: Direction, out: &mut Vec<u8>) -> bool {
        let mut found = self.open.seek(range, dir, out);
        let mut other = Vec::new();
        for (_, set) in &self.sealed {
            if set.seek(range, dir, &mut other) && (!found || comes_before(&other, out, dir)) {
                std::mem::swap(out, &mut other);
                found = true;
            }
        }
        found
    }

    /// Keys held, once per generation holding them.
    pub fn len(&self) -> usize {
        self.open.len() + self.sealed.iter().map(|(_, s)| s.len()).sum::<usize>()
    }

    /// Whether it holds no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Generations held (the open one included).
    pub fn generations(&self) -> usize {
        1 + self.sealed.len()
    }

    /// Bytes held on the heap.
    pub fn heap_bytes(&self) -> usize {
        self.open.heap_bytes()
            + self
                .sealed
                .iter()
                .map(|(_, s)| s.heap_bytes())
                .sum::<usize>()
            + self.staged.heap_bytes()
            + self.scratch.heap_bytes()
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
    /// and now and then one longer than a chunk.
    fn key(next: &mut impl FnMut() -> u64) -> Vec<u8> {
        let len = match next() % 20 {
            0 => 0,
            1 => CHUNK_BYTES + 1 + (next() % 300) as usize,
            _ => 1 + (next() % 6) as usize,
        };
        (0..len)
            .map(|_| [0u8, 1, 2, 0xff][next() as usize % 4])
            .collect()
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
        // BTreeSet::range panics on a range whose ends are crossed; a seek answers None.
        let mut all = model.iter().filter(|k| range.contains(k));
        match dir {
            Direction::Forward => all.next().cloned(),
            Direction::Backward => all.next_back().cloned(),
        }
    }

    #[test]
    fn a_key_set_seeks_as_a_btree_set_does_through_batches_of_inserts() {
        for seed in 0..20 {
            let mut next = rng(seed);
            let mut set = KeySet::default();
            let mut model = BTreeSet::new();
            let mut scratch = Staged::default();
            for _ in 0..60 {
                let mut batch: Vec<Vec<u8>> =
                    (0..1 + next() % 40).map(|_| key(&mut next)).collect();
                batch.sort();
                batch.dedup();
                let mut staged = Staged::default();
                for k in &batch {
                    staged.push(k);
                    model.insert(k.clone());
                }
                set.insert_sorted(&staged, &mut scratch);
                assert_eq!(set.len(), model.len(), "seed {seed}");
                for _ in 0..30 {
                    let (a, b) = (key(&mut next), key(&mut next));
                    let range = KeyRange::new(bound(&mut next, &a), bound(&mut next, &b));
                    for dir in [Direction::Forward, Direction::Backward] {
                        let mut out = Vec::new();
                        let got = set.seek(range, dir, &mut out).then_some(out);
                        assert_eq!(
                            got,
                            model_seek(&model, range, dir),
                            "seed {seed} {range:?} {dir:?}"
                        );
                    }
                }
            }
            assert_eq!(set.keys(), model.iter().cloned().collect::<Vec<_>>());
        }
    }

    #[test]
    fn chunks_stay_near_their_size_and_front_coding_shares_a_namespace() {
        // 10,000 balances of one token: [0x10, contract (8), owner (8)], owners random.
        let mut next = rng(7);
        let mut set = KeySet::default();
        let mut scratch = Staged::default();
        for _ in 0..100 {
            let mut batch: Vec<Vec<u8>> = (0..100)
                .map(|_| {
                    let mut k = vec![0x10, 1, 2, 3, 4, 5, 6, 7, 8];
                    k.extend_from_slice(&next().to_be_bytes());
                    k
                })
                .collect();
            batch.sort();
            let mut staged = Staged::default();
            batch.iter().for_each(|k| staged.push(k));
            set.insert_sorted(&staged, &mut scratch);
        }
        let per_key = set.heap_bytes() as f64 / set.len() as f64;
        // Each key keeps about 7 of its 17 bytes and 2 of lengths; chunks add about 2.
        assert!(per_key < 13.0, "{per_key} bytes per key");
        let largest = set.chunks.values().map(|b| b.len()).max().unwrap();
        assert!(largest < 2 * CHUNK_BYTES, "a chunk of {largest} bytes");
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
