//! The storage wing: where committed state and blocks live, behind one trait.
//!
//! - This file is the boundary every backend implements and the chain calls: [`StateStore`]
//!   (state and the block archive, [`BlockArchive`]), one [`Commit`] per block with its
//!   [`Durability`], and the types they exchange.
//! - [`memory`]: live state in a hash map, for tests and benchmarks.
//! - [`log`]: the embedded default on disk, an in-memory index over append-only logs.
//! - `rocks` (cargo feature `rocksdb`): RocksDB.
//! - Shared by the disk backends: the error type ([`error`], corruption its own kind) and the
//!   directory lock ([`lock`]).

use std::borrow::Cow;

use borsh::{BorshDeserialize, BorshSerialize};

use crate::block::BlockHeader;

pub mod error;
pub mod lock;
pub mod log;
pub mod memory;
#[cfg(feature = "rocksdb")]
pub mod rocks;

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
    pub changes: Vec<Change>,
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
            iter: Box::new(record.changes.into_iter().map(Ok)),
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
    block.changes.reserve(changes.len() as usize);
    changes.for_each(&mut |k, v| {
        block.changes.push((k.to_vec(), v.map(<[u8]>::to_vec)));
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
pub(crate) fn sort_prefix(key: &[u8]) -> u128 {
    let mut bytes = [0u8; 16];
    let n = key.len().min(16);
    bytes[..n].copy_from_slice(&key[..n]);
    u128::from_be_bytes(bytes)
}
