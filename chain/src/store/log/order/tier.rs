//! A tier: an immutable sorted set of keys, front-coded in chunks, and how a seek finds a
//! key in it.

use std::ops::Bound;

use super::super::live::LiveBits;
use crate::store::{Direction, KeyRange, sort_prefix, starting_before};

/// The bytes of front-coded keys a chunk aims at. A seek decodes up to two chunks per tier
/// from their first key, so smaller chunks seek faster; each chunk also keeps its first key
/// whole and 28 bytes of index, so larger ones are smaller. At 256 bytes a chunk holds about
/// 30 of a token's balance keys (8 bytes each once front-coded): a seek in a tier of 400,000
/// of them took 0.67 µs and the tier 9.3 bytes a key, against 1.2 µs at 512 bytes a chunk
/// (`merge_tiers_and_seeks_are_timed` below, `--ignored --nocapture`, on a loaded 2-core
/// Zen 4).
pub const CHUNK_BYTES: usize = 256;

/// Appends `n` as LEB128.
fn put_len(out: &mut Vec<u8>, mut n: usize) {
    while n >= 0x80 {
        out.push(n as u8 | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// The length [`put_len`] wrote at `at`, moving `at` past it.
pub(super) fn get_len(data: &[u8], at: &mut usize) -> usize {
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

/// An immutable sorted set of keys, front-coded in chunks of about [`CHUNK_BYTES`]: one
/// block's new keys, or the merge of several blocks', with which of them are deleted now
/// (the one part that changes, as commits delete and re-create keys: issue 23).
pub struct Tier {
    /// The chunks, in slabs of at most [`SLAB_BYTES`]. Each entry is two LEB128 lengths
    /// (shared with the key before it, 0 for a chunk's first, then the rest's) and the rest's
    /// bytes.
    slabs: Box<[Box<[u8]>]>,
    /// Where each chunk lies: its slab, start and end there.
    pub(super) chunks: Box<[ChunkAt]>,
    /// Each chunk's first key's 16-byte prefix (`store::sort_prefix`): a search compares
    /// these, and whole keys only on a tie.
    prefixes: Box<[u128]>,
    /// Each chunk's first key's position in the tier.
    firsts: Box<[u32]>,
    /// Which keys are live (not deleted by the last change of them).
    live: LiveBits,
    len: usize,
}

/// A chunk's place in its tier's slabs.
#[derive(Clone, Copy)]
pub(super) struct ChunkAt {
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
    firsts: Vec<u32>,
    /// Each key's liveness, a bit a key.
    live: Vec<u64>,
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
            firsts: Vec::with_capacity(chunks),
            live: Vec::new(),
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
        self.firsts
            .push(u32::try_from(self.len).expect("a tier under 4 G keys"));
    }

    /// Adds `key`, live, which must sort after every key added before.
    pub fn push(&mut self, key: &[u8]) {
        self.push_with(key, true);
    }

    /// Adds `key`, live or deleted, which must sort after every key added before.
    pub fn push_with(&mut self, key: &[u8], live: bool) {
        if self.len.is_multiple_of(64) {
            self.live.push(0);
        }
        if live {
            *self.live.last_mut().expect("pushed") |= 1 << (self.len % 64);
        }
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
            + self.firsts.capacity() * 4
            + self.live.capacity() * 8
    }

    /// The tier.
    pub fn finish(mut self) -> Tier {
        if !self.slab.is_empty() {
            self.slabs.push(self.slab.into_boxed_slice());
        }
        let mut live = self.live;
        if live.is_empty() {
            live.push(0);
        }
        Tier {
            slabs: self.slabs.into_boxed_slice(),
            chunks: self.chunks.into_boxed_slice(),
            prefixes: self.prefixes.into_boxed_slice(),
            firsts: self.firsts.into_boxed_slice(),
            live: LiveBits::from_words(live, self.len),
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
            + self.firsts.len() * 4
            + self.live.heap_bytes()
    }

    pub(super) fn chunk(&self, i: usize) -> &[u8] {
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
        starting_before(&self.prefixes, key, inclusive, |i| self.first_key(i))
    }

    /// The first live key of `range` walking `dir`, into `out`; whether there is one. The
    /// first key at or past the range's bound is found as before deletions were tracked (a
    /// binary search over the chunks and a scan of one or two); dead keys from there on are
    /// skipped through `LiveBits`, in O(log₆₄ n) word reads however many there are, and
    /// the live key found is decoded from its chunk.
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
            for (at, (shared, suffix)) in entries(self.chunk(i)).enumerate() {
                out.truncate(shared);
                out.extend_from_slice(suffix);
                if range.above_lo(out) {
                    let at = self.firsts[i] as usize + at;
                    let Some(live) = self.live.next_live(at) else {
                        return false;
                    };
                    if live != at {
                        self.key_at(live, out);
                    }
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
        let mut last = self.firsts[i] as usize;
        for (at, (shared, suffix)) in entries(self.chunk(i)).enumerate() {
            if !joined_below(&out[..shared], suffix, range.hi) {
                break;
            }
            out.truncate(shared);
            out.extend_from_slice(suffix);
            last = self.firsts[i] as usize + at;
        }
        let Some(live) = self.live.prev_live(last) else {
            return false;
        };
        if live != last {
            self.key_at(live, out);
        }
        range.above_lo(out)
    }

    /// The key at position `at`, into `out`.
    fn key_at(&self, at: usize, out: &mut Vec<u8>) {
        let chunk = self.firsts.partition_point(|&f| f as usize <= at) - 1;
        let skip = at - self.firsts[chunk] as usize;
        for (shared, suffix) in entries(self.chunk(chunk)).take(skip + 1) {
            out.truncate(shared);
            out.extend_from_slice(suffix);
        }
    }

    /// The position of `key`, if the tier holds it.
    pub fn locate(&self, key: &[u8]) -> Option<usize> {
        let chunk = self.chunks_starting_before(key, true).checked_sub(1)?;
        let mut at = Vec::new();
        for (i, (shared, suffix)) in entries(self.chunk(chunk)).enumerate() {
            let order = cmp_joined(&at[..shared], suffix, key);
            if order.is_eq() {
                return Some(self.firsts[chunk] as usize + i);
            }
            if order.is_gt() {
                return None;
            }
            at.truncate(shared);
            at.extend_from_slice(suffix);
        }
        None
    }

    /// Whether the key at `at` is live.
    pub fn is_live(&self, at: usize) -> bool {
        self.live.is_live(at)
    }

    /// Makes the key at `at` live or dead; whether that changed it.
    pub fn set_live(&self, at: usize, live: bool) -> bool {
        self.live.set(at, live)
    }

    /// Every dead key, in order, into `f`.
    pub fn for_each_dead(&self, mut f: impl FnMut(&[u8])) {
        let mut key = Vec::new();
        for at in self.live.dead() {
            self.key_at(at, &mut key);
            f(&key);
        }
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
