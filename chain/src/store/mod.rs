//! The storage wing: where committed state and blocks live, behind one trait.
//!
//! - This file is the boundary every backend implements and the chain calls: [`StateStore`]
//!   (state and the block archive, [`BlockArchive`]), one [`Commit`] per block with its
//!   [`Durability`], ordered reads ([`StateStore::seek`] over a [`KeyRange`] in a
//!   [`Direction`]), and the types they exchange.
//! - [`memory`]: live state in a hash map, for tests and benchmarks.
//! - [`log`]: the embedded default on disk, an in-memory index over append-only logs.
//! - `rocks` (cargo feature `rocksdb`): RocksDB.
//! - Shared by the disk backends: the error type ([`error`], corruption its own kind) and the
//!   directory lock ([`lock`]).

use std::borrow::Cow;
use std::ops::Bound;

use borsh::{BorshDeserialize, BorshSerialize};

use crate::block::BlockHeader;

mod changes;
pub mod error;
pub mod lock;
pub mod log;
pub mod memory;
#[cfg(feature = "rocksdb")]
pub mod rocks;

pub use changes::Changes;
pub use error::{Poison, StoreError, StoreResult};
pub use lock::DirLock;

/// Whether a store is opened to commit blocks or only to read them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Commit blocks: the one writer, holding the store's lock exclusively. Opening repairs
    /// what a crash left (a torn last record).
    ReadWrite,
    /// Read only: nothing in the store's directory is created, changed or removed.
    ReadOnly,
}

/// A key's new value in a block, or `None` if the block deleted it.
pub type Change = (Vec<u8>, Option<Vec<u8>>);

/// One committed block as a store keeps it: header, encoded body (a
/// [`crate::tx::BlockBody`]) and the state changes it made, sorted by key.
#[derive(Debug, Clone, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct BlockRecord {
    /// The header.
    pub header: BlockHeader,
    /// borsh of the block's [`crate::tx::BlockBody`].
    pub body: Vec<u8>,
    /// Its state changes, sorted by key, each key once.
    pub changes: Changes,
}

/// When a commit is durable: what survives a crash of the process or of the machine.
/// (After redb's `Durability` and fjall's `PersistMode`.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// On disk (`fdatasync`) before `commit` returns.
    #[default]
    Immediate,
    /// Synced in the background while the caller goes on (reads see the block at once); on
    /// disk before the next commit returns, or when [`StateStore::sync`] returns. A crash of
    /// the process loses nothing; a power cut may lose this last block. Should the sync fail,
    /// that next call fails instead ([`StoreError::Poisoned`]) and the block may be gone: a
    /// caller reports the block durable only after one of them returns `Ok`.
    Background,
    /// Left to the operating system until [`StateStore::sync`], a segment's end or a
    /// snapshot: a power cut may lose any number of recent blocks, never leaving a torn one.
    /// For benchmarks that compare stores without syncing.
    None,
}

/// How to commit one block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Commit {
    /// When the block is durable.
    pub durability: Durability,
    /// The lowest height whose block the archive must keep: the committer decides what to
    /// retain (by count, by block time for a duplicate window, …). Older blocks may go.
    pub retain_from: u64,
}

impl Commit {
    /// An immediately durable commit keeping the last `blocks` blocks up to `height`.
    pub fn keeping(height: u64, blocks: u64) -> Self {
        Self {
            durability: Durability::Immediate,
            retain_from: (height + 1).saturating_sub(blocks),
        }
    }
}

/// What a [`ChangeSource`] calls with each change: its key and its value (`None`: deleted).
pub type ChangeFn<'a> = dyn FnMut(&[u8], Option<&[u8]>) -> std::io::Result<()> + 'a;

/// Changes, sorted by key, that can be read more than once without being held in memory:
/// the state of a large genesis (ten million accounts), which the chain checksums and a store
/// writes as they stream past. Each pass yields the same changes.
pub trait ChangeSource: Sync {
    /// How many changes a pass yields.
    fn len(&self) -> u64;

    /// Whether a pass yields nothing.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Calls `f` with every change in strictly increasing key order (`None`: deleted), and
    /// stops at the first error `f` returns.
    fn for_each(&self, f: &mut ChangeFn<'_>) -> std::io::Result<()>;
}

impl ChangeSource for Vec<Change> {
    fn len(&self) -> u64 {
        Vec::len(self) as u64
    }

    fn for_each(&self, f: &mut ChangeFn<'_>) -> std::io::Result<()> {
        self.iter().try_for_each(|(k, v)| f(k, v.as_deref()))
    }
}

/// Every committed entry, in key order.
pub type Entries<'a> = Box<dyn Iterator<Item = StoreResult<(Vec<u8>, Vec<u8>)>> + 'a>;

/// Which way an ordered read walks the keys, in byte-lexicographic order (`[u8]`'s `Ord`:
/// a key sorts before every longer key it is a prefix of).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Ascending: a seek finds the smallest key of its range.
    Forward,
    /// Descending: a seek finds the largest key of its range.
    Backward,
}

/// The keys an ordered read may return: those above `lo` and below `hi`, each bound
/// inclusive, exclusive or open, as in [`std::ops::RangeBounds`]. A range whose `lo` lies
/// above its `hi` holds no key (it is not an error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyRange<'a> {
    /// The lower bound.
    pub lo: Bound<&'a [u8]>,
    /// The upper bound.
    pub hi: Bound<&'a [u8]>,
}

impl<'a> KeyRange<'a> {
    /// Every key.
    pub const ALL: KeyRange<'static> = KeyRange {
        lo: Bound::Unbounded,
        hi: Bound::Unbounded,
    };

    /// The keys between `lo` and `hi`.
    pub fn new(lo: Bound<&'a [u8]>, hi: Bound<&'a [u8]>) -> Self {
        Self { lo, hi }
    }

    /// The keys that start with `prefix`, given its [`prefix_end`] (computed once by the
    /// caller, who owns it): `KeyRange::prefix(p, prefix_end(p).as_deref())`.
    pub fn prefix(prefix: &'a [u8], end: Option<&'a [u8]>) -> Self {
        Self {
            lo: Bound::Included(prefix),
            hi: end.map_or(Bound::Unbounded, Bound::Excluded),
        }
    }

    /// Whether `key` satisfies the lower bound.
    pub fn above_lo(&self, key: &[u8]) -> bool {
        match self.lo {
            Bound::Included(lo) => key >= lo,
            Bound::Excluded(lo) => key > lo,
            Bound::Unbounded => true,
        }
    }

    /// Whether `key` satisfies the upper bound.
    pub fn below_hi(&self, key: &[u8]) -> bool {
        match self.hi {
            Bound::Included(hi) => key <= hi,
            Bound::Excluded(hi) => key < hi,
            Bound::Unbounded => true,
        }
    }

    /// Whether `key` lies in the range.
    pub fn contains(&self, key: &[u8]) -> bool {
        self.above_lo(key) && self.below_hi(key)
    }

    /// Whether no key can lie in the range: its bounds cross, or meet and exclude the key
    /// they meet at. (`BTreeMap::range` panics on such bounds; a seek finds nothing.)
    pub fn is_empty(&self) -> bool {
        match (self.lo, self.hi) {
            (Bound::Included(lo), Bound::Included(hi)) => lo > hi,
            (
                Bound::Included(lo) | Bound::Excluded(lo),
                Bound::Included(hi) | Bound::Excluded(hi),
            ) => lo >= hi,
            _ => false,
        }
    }

    /// What is left of the range strictly past `key` walking `dir`: the range a next-key
    /// call searches after it returned `key`. A `key` outside the range narrows nothing it
    /// need not: past a key below `lo`, walking forward, is the whole range.
    pub fn past(self, key: &'a [u8], dir: Direction) -> Self {
        match dir {
            Direction::Forward if self.above_lo(key) => Self {
                lo: Bound::Excluded(key),
                ..self
            },
            Direction::Backward if self.below_hi(key) => Self {
                hi: Bound::Excluded(key),
                ..self
            },
            _ => self,
        }
    }

    /// Whether `key` lies at or beyond the far end of the range walking `dir` (past `hi`
    /// forward, before `lo` backward): a walk in `dir` that reached it is done.
    pub fn beyond(&self, key: &[u8], dir: Direction) -> bool {
        match dir {
            Direction::Forward => !self.below_hi(key),
            Direction::Backward => !self.above_lo(key),
        }
    }
}

/// The smallest key greater than every key that starts with `prefix`: the exclusive upper
/// bound of a prefix scan. `None` when there is none (a prefix that is empty or all `0xff`
/// bytes): the scan then runs to the last key.
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let last = prefix.iter().rposition(|&b| b != 0xff)?;
    let mut end = prefix[..=last].to_vec();
    end[last] += 1;
    Some(end)
}

/// Of two keys found walking `dir`, whether `a` comes first.
pub(crate) fn comes_before(a: &[u8], b: &[u8], dir: Direction) -> bool {
    match dir {
        Direction::Forward => a < b,
        Direction::Backward => a > b,
    }
}

/// [`StateStore::range`] by one [`StateStore::seek`] per entry: each step searches the
/// range past the key it returned last, so it holds no cursor into the store.
struct Seeks<'a, S: ?Sized> {
    store: &'a S,
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    dir: Direction,
    done: bool,
}

impl<S: StateStore + ?Sized> Iterator for Seeks<'_, S> {
    type Item = StoreResult<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let range = KeyRange::new(
            self.lo.as_ref().map(Vec::as_slice),
            self.hi.as_ref().map(Vec::as_slice),
        );
        let found = self.store.seek(range, self.dir).transpose();
        match &found {
            Some(Ok((key, _))) => match self.dir {
                Direction::Forward => self.lo = Bound::Excluded(key.clone()),
                Direction::Backward => self.hi = Bound::Excluded(key.clone()),
            },
            // An error ends the walk: the caller has it.
            _ => self.done = true,
        }
        found
    }
}

/// [`StateStore::seek`] by walking [`StateStore::entries`]: what a store without an order of
/// its own (a test's wrapper) does.
fn seek_by_scan<S: StateStore + ?Sized>(
    store: &S,
    range: KeyRange<'_>,
    dir: Direction,
) -> StoreResult<Option<(Vec<u8>, Vec<u8>)>> {
    let mut last = None;
    for entry in store.entries()? {
        let (key, value) = entry?;
        if range.beyond(&key, Direction::Forward) {
            break;
        }
        if range.above_lo(&key) {
            last = Some((key, value));
            if dir == Direction::Forward {
                break;
            }
        }
    }
    Ok(last)
}

/// Counters of a store's work, for read and write amplification. Zero where a backend does
/// not know.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StoreStats {
    /// Blocks committed since the store was opened.
    pub commits: u64,
    /// Bytes of keys and values the committed changes carried.
    pub user_bytes_written: u64,
    /// Bytes written to files: log records, snapshots, compaction output.
    pub disk_bytes_written: u64,
    /// Point reads.
    pub gets: u64,
    /// Of which served from memory.
    pub cache_hits: u64,
    /// Bytes of keys and values the reads returned.
    pub user_bytes_read: u64,
    /// Bytes read from files to answer them.
    pub disk_bytes_read: u64,
    /// Deleted keys ordered reads ([`StateStore::seek`]) passed over one by one: keys read
    /// and found deleted, and deleted run entries looked at in the blocks a seek read. The
    /// log store keeps it to about two blocks' worth a seek however many deleted keys lie in
    /// the range (issue 23); the other stores count none.
    pub seek_steps: u64,
    /// Bytes read from files by background work (snapshots, compaction).
    pub background_bytes_read: u64,
    /// Snapshots written.
    pub snapshots: u64,
    /// The longest a snapshot took, in the background (ms).
    pub longest_snapshot_ms: f64,
    /// Segment files deleted by compaction.
    pub segments_deleted: u64,
    /// The longest time one commit spent on the store's upkeep (installing a snapshot,
    /// sweeping the index, rotating a segment) rather than on its own block (ms).
    pub longest_pause_ms: f64,
    /// Keys in the in-memory index.
    pub index_keys: u64,
    /// Bytes the index holds (part of `memory_bytes`).
    pub index_bytes: u64,
    /// Keys in the in-memory order of the keys changed since the last merge (the log
    /// store's [`log::order`]), counted once per generation that holds them.
    pub ordered_keys: u64,
    /// Bytes that order holds (part of `memory_bytes`).
    pub order_bytes: u64,
    /// Bytes the store's own structures hold in memory (index, cache, filters).
    pub memory_bytes: u64,
}

impl StoreStats {
    /// Bytes written to disk per byte of user data.
    pub fn write_amplification(&self) -> f64 {
        self.disk_bytes_written as f64 / self.user_bytes_written.max(1) as f64
    }

    /// Bytes read from disk per byte returned by reads.
    pub fn read_amplification(&self) -> f64 {
        self.disk_bytes_read as f64 / self.user_bytes_read.max(1) as f64
    }
}

/// The block archive: recent blocks, by height.
pub trait BlockArchive {
    /// The last committed block, or `None` for an empty store.
    fn head(&self) -> Option<&BlockHeader>;

    /// A retained block.
    fn block(&self, height: u64) -> StoreResult<Option<BlockRecord>>;

    /// A retained block's header alone: what a view of recent blocks (fees, proposers) needs,
    /// without reading a body of up to 16 MiB and its changes. By default taken from
    /// [`BlockArchive::block`].
    fn header(&self, height: u64) -> StoreResult<Option<BlockHeader>> {
        Ok(self.block(height)?.map(|record| record.header))
    }

    /// A retained block's header and encoded body, without its changes (which a genesis of
    /// millions of accounts makes large). By default taken from [`BlockArchive::block`].
    fn header_and_body(&self, height: u64) -> StoreResult<Option<(BlockHeader, Vec<u8>)>> {
        Ok(self
            .block(height)?
            .map(|record| (record.header, record.body)))
    }

    /// A retained block's changes in key order, read as they are used: a genesis of ten
    /// million accounts streams past instead of filling memory. By default taken from
    /// [`BlockArchive::block`].
    fn changes(&self, height: u64) -> StoreResult<Option<BlockChanges<'_>>> {
        Ok(self.block(height)?.map(|record| BlockChanges {
            len: record.changes.len() as u64,
            iter: Box::new(record.changes.to_vec().into_iter().map(Ok)),
        }))
    }

    /// The lowest height whose block is still retained.
    fn first_retained(&self) -> u64;
}

/// A stored block's changes, in key order, as [`BlockArchive::changes`] reads them.
pub struct BlockChanges<'a> {
    /// How many there are.
    pub len: u64,
    /// Each change, or the error met reading it.
    pub iter: Box<dyn Iterator<Item = StoreResult<Change>> + 'a>,
}

/// Where committed state lives, with the block archive beside it. Shared by reference across
/// the threads that execute a block in parallel, which only read it.
///
/// Errors are [`StoreError`]s: I/O, corruption (its own kind), a lock held by another
/// process, or a write to a store opened read-only. Reads see only committed blocks.
/// [`StateStore::commit`] applies one block's changes and records the block atomically:
/// after a crash the store is at the last block whose commit was durable, or a later one,
/// never between two blocks.
pub trait StateStore: BlockArchive + Send + Sync {
    /// The committed value of `key`.
    fn get(&self, key: &[u8]) -> StoreResult<Option<Cow<'_, [u8]>>>;

    /// [`StateStore::get`] for a reader that keeps a buffer: the value lent when the store
    /// holds it in place, else copied into `scratch` (whose bytes it replaces), so that a
    /// store handing out owned bytes costs the executor no allocation per read. The
    /// executor's reads come here; the default goes through [`StateStore::get`].
    fn get_in<'a>(&'a self, key: &[u8], scratch: &'a mut Vec<u8>) -> StoreResult<Option<&'a [u8]>> {
        Ok(match self.get(key)? {
            None => None,
            Some(Cow::Borrowed(value)) => Some(value),
            Some(Cow::Owned(value)) => {
                *scratch = value;
                Some(scratch.as_slice())
            }
        })
    }

    /// Commits `block` (the next height), durable as `commit` says, keeping blocks from
    /// `commit.retain_from` up. The store takes the record: one that keeps blocks in memory
    /// keeps it without a copy. `Err` means the block is not committed, or, for a store
    /// stopped by a failed write ([`StoreError::Poisoned`]), may not be: its
    /// [`Poison`] says which blocks are on disk.
    fn commit(&mut self, block: BlockRecord, commit: Commit) -> StoreResult<()>;

    /// Commits the genesis block (height 0, on an empty store) with the changes of `changes`
    /// rather than `block.changes` (empty): a genesis too large to hold in memory. A store
    /// that can write it as it streams past should; this default collects the changes and
    /// commits them as usual.
    fn commit_genesis(
        &mut self,
        block: BlockRecord,
        changes: &dyn ChangeSource,
        commit: Commit,
    ) -> StoreResult<()> {
        collect_and_commit_genesis(self, block, changes, commit)
    }

    /// Waits until every committed block is durable. An error means the store can no longer
    /// promise that: the node must stop.
    fn sync(&mut self) -> StoreResult<()> {
        Ok(())
    }

    /// Every committed entry, in key order (for audits; not a hot path).
    fn entries(&self) -> StoreResult<Entries<'_>>;

    /// The first committed entry of `range` walking `dir` (its smallest key forward, its
    /// largest backward) with its value, or `None` if the range holds no key.
    ///
    /// The hot path of a next-key host call: stateless, one seek per call, no cursor kept
    /// between calls (the next call asks for `range.past(last_key, dir)`), and no allocation
    /// but the returned key and value where the backend can help it. Keys are compared as
    /// byte strings. Every backend returns the same entry for the same committed state,
    /// whatever it has merged, compacted or pruned since and whether it was reopened.
    ///
    /// By default it walks [`StateStore::entries`], which costs the whole state: every
    /// backend in this crate has its own.
    fn seek(&self, range: KeyRange<'_>, dir: Direction) -> StoreResult<Option<(Vec<u8>, Vec<u8>)>> {
        seek_by_scan(self, range, dir)
    }

    /// The committed entries of `range` in `dir` order (`tally keys`). By default one
    /// [`StateStore::seek`] per entry, so it costs what the seeks cost; a backend with a
    /// cheaper cursor may override it.
    fn range(&self, range: KeyRange<'_>, dir: Direction) -> StoreResult<Entries<'_>> {
        let owned = |b: Bound<&[u8]>| b.map(<[u8]>::to_vec);
        Ok(Box::new(Seeks {
            store: self,
            lo: owned(range.lo),
            hi: owned(range.hi),
            dir,
            done: false,
        }))
    }

    /// Bytes the store occupies on disk (0 for memory).
    fn disk_bytes(&self) -> u64;

    /// The backend's name: `memory`, `log` or `rocksdb`.
    fn kind(&self) -> &'static str;

    /// Counters of the work done so far.
    fn stats(&self) -> StoreStats {
        StoreStats::default()
    }

    /// The unfinished last record that opening the store dropped, if any: a node reports it.
    fn dropped_tail(&self) -> Option<&DroppedTail> {
        None
    }
}

/// A last record that opening a log dropped: one whose bytes end the log but do not hold a
/// whole, checksummed record. A crash before the record's sync returned leaves one (its block
/// never counted as committed); so can damage to the last block on disk, which is why it is
/// reported and not dropped silently. Anything that fails its checksum with data after it is
/// corruption instead, and the store does not open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DroppedTail {
    /// The segment file.
    pub file: std::path::PathBuf,
    /// Where the record starts in it.
    pub offset: u64,
    /// The bytes from there to the end of the file.
    pub bytes: u64,
    /// What was wrong with it.
    pub why: &'static str,
    /// Whether the file was cut there (a writer) or left as it is (a reader).
    pub cut: bool,
}

impl std::fmt::Display for DroppedTail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the last {} bytes of {}, from byte {}, are not a whole record ({}): {}; a crash \
             before that block's sync leaves this, and the store opened at the block before it",
            self.bytes,
            self.file.display(),
            self.offset,
            self.why,
            if self.cut {
                "cut off"
            } else {
                "skipped, file unchanged"
            },
        )
    }
}

/// [`StateStore::commit_genesis`] by collecting the changes into the record and committing it
/// as any block: what a store does that cannot stream them.
pub fn collect_and_commit_genesis<S: StateStore + ?Sized>(
    store: &mut S,
    mut block: BlockRecord,
    changes: &dyn ChangeSource,
    commit: Commit,
) -> StoreResult<()> {
    changes.for_each(&mut |k, v| {
        block.changes.push(k, v);
        Ok(())
    })?;
    store.commit(block, commit)
}

/// BLAKE3 over sorted entries ([`StateStore::entries`]): a digest of a whole state, for
/// audits. Unlike the block checksum it does not depend on history.
pub fn digest_entries(
    entries: impl IntoIterator<Item = StoreResult<(Vec<u8>, Vec<u8>)>>,
) -> StoreResult<[u8; 32]> {
    let mut h = blake3::Hasher::new();
    for entry in entries {
        let (k, v) = entry?;
        h.update(&(k.len() as u32).to_le_bytes());
        h.update(&k);
        h.update(&(v.len() as u32).to_le_bytes());
        h.update(&v);
    }
    Ok(h.finalize().into())
}

/// The first 16 bytes of `key`, zero-padded, as a big-endian integer. Ordering by it never
/// contradicts ordering by the whole key: where two prefixes differ, the keys differ the same
/// way (a zero pad is only less than a longer key's byte, and a prefix sorts first).
///
/// Loaded in at most two fixed-size reads, not a copy of a variable length (a call to
/// `memcpy` for every key a block sorts and every entry a run block scans): a key of 8 to 15
/// bytes (what follows a contract's name in a simplecoin balance's key) is two overlapping
/// 8-byte reads, its second shifted past the bytes the first read.
#[inline]
pub(crate) fn sort_prefix(key: &[u8]) -> u128 {
    if let Some(head) = key.first_chunk::<16>() {
        return u128::from_be_bytes(*head);
    }
    let high = |bytes: &[u8; 8]| u128::from(u64::from_be_bytes(*bytes)) << 64;
    match key.first_chunk::<8>() {
        Some(head) => {
            let (rest, tail) = (key.len() - 8, key.last_chunk::<8>().expect("8 or more"));
            // `rest` is 0..8: the tail's last `rest` bytes are the ones the head did not read.
            let low = u64::from_be_bytes(*tail).checked_shl(8 * (8 - rest) as u32);
            high(head) | u128::from(low.unwrap_or(0))
        }
        None => {
            let mut bytes = [0u8; 8];
            for (b, k) in bytes.iter_mut().zip(key) {
                *b = *k;
            }
            high(&bytes)
        }
    }
}

/// Of `n` sorted entries (the log store's run blocks, an order tier's chunks), how many start
/// at or before `key` (`inclusive`) or before it, by binary search on their first keys'
/// [`sort_prefix`]es (`prefixes`); only an equal prefix needs the whole first key
/// (`first_key`), since prefix order never contradicts key order.
pub(crate) fn starting_before<'a>(
    prefixes: &[u128],
    key: &[u8],
    inclusive: bool,
    first_key: impl Fn(usize) -> &'a [u8],
) -> usize {
    let prefix = sort_prefix(key);
    let (mut lo, mut hi) = (0, prefixes.len());
    while lo < hi {
        let mid = (lo + hi) / 2;
        let before = match prefixes[mid].cmp(&prefix) {
            std::cmp::Ordering::Less => true,
            std::cmp::Ordering::Greater => false,
            std::cmp::Ordering::Equal if inclusive => first_key(mid) <= key,
            std::cmp::Ordering::Equal => first_key(mid) < key,
        };
        if before {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sort_prefix_is_the_first_16_bytes_zero_padded_for_every_length() {
        let naive = |key: &[u8]| {
            let mut bytes = [0u8; 16];
            let n = key.len().min(16);
            bytes[..n].copy_from_slice(&key[..n]);
            u128::from_be_bytes(bytes)
        };
        let bytes: Vec<u8> = (1..=40u8).map(|i| i.wrapping_mul(37) | 1).collect();
        for len in 0..=bytes.len() {
            let key = &bytes[..len];
            assert_eq!(sort_prefix(key), naive(key), "length {len}");
            let ones = vec![0xff; len];
            assert_eq!(sort_prefix(&ones), naive(&ones), "length {len}, 0xff bytes");
        }
    }

    #[test]
    fn prefix_end_is_the_least_key_above_every_key_with_the_prefix() {
        assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_end(&[1, 0xff, 0xff]), Some(vec![2]));
        assert_eq!(prefix_end(&[0xff, 0xff]), None);
        assert_eq!(prefix_end(&[]), None);
        let end = prefix_end(&[7, 0xff]).unwrap();
        let range = KeyRange::prefix(&[7, 0xff], Some(&end));
        assert!(range.contains(&[7, 0xff]) && range.contains(&[7, 0xff, 0xff, 0xff]));
        assert!(!range.contains(&[8]) && !range.contains(&[7, 0xfe, 0xff]));
        assert!(!range.contains(&[7]));
    }

    #[test]
    fn past_a_key_narrows_only_the_side_a_walk_comes_from() {
        let range = KeyRange::new(Bound::Included(b"b"), Bound::Excluded(b"y"));
        let (m, a, z): (&[u8], &[u8], &[u8]) = (b"m", b"a", b"z");
        assert_eq!(
            range.past(m, Direction::Forward),
            KeyRange::new(Bound::Excluded(m), Bound::Excluded(b"y"))
        );
        assert_eq!(
            range.past(m, Direction::Backward),
            KeyRange::new(Bound::Included(b"b"), Bound::Excluded(m))
        );
        // Past a key outside the range, on the side the walk starts from: the whole range.
        assert_eq!(range.past(a, Direction::Forward), range);
        assert_eq!(range.past(z, Direction::Backward), range);
    }

    /// Every range over keys of up to three bytes of `00 01`: an empty one holds none of
    /// them, and one that is not empty can be handed to `BTreeSet::range` (which panics on
    /// crossed bounds) and finds what `contains` finds.
    #[test]
    fn a_range_said_empty_holds_no_key_and_any_other_is_a_valid_btree_range() {
        let mut keys = vec![Vec::new()];
        for len in 1..=3 {
            for bits in 0..1u32 << len {
                keys.push((0..len).map(|i| (bits >> i & 1) as u8).collect::<Vec<u8>>());
            }
        }
        let set: std::collections::BTreeSet<Vec<u8>> = keys.iter().cloned().collect();
        let bounds = |k: &[u8]| [Bound::Included(k.to_vec()), Bound::Excluded(k.to_vec())];
        for a in &keys {
            for b in &keys {
                for lo in bounds(a) {
                    for hi in bounds(b) {
                        let range = KeyRange::new(
                            lo.as_ref().map(Vec::as_slice),
                            hi.as_ref().map(Vec::as_slice),
                        );
                        let held: Vec<_> = keys.iter().filter(|k| range.contains(k)).collect();
                        if range.is_empty() {
                            assert!(held.is_empty(), "{range:?} holds {held:?}");
                        } else {
                            let mut got: Vec<_> =
                                set.range::<[u8], _>((range.lo, range.hi)).collect();
                            got.sort();
                            let mut held = held;
                            held.sort();
                            assert_eq!(got, held, "{range:?}");
                        }
                    }
                }
            }
        }
    }
}
