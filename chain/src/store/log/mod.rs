//! The `log` store: after Vilmo, QMDB and GriffinDB, an in-memory index over append-only
//! logs, with the cold state in a sorted run that a background merge rewrites.
//!
//! - **The log.** Each block commit is one checksummed append to the active segment
//!   (`log-<seq>.tlog`); the block is durable per its [`crate::Durability`]. A segment past
//!   [`LogOptions::segment_bytes`] is synced and sealed, and the next one starts (the
//!   directory is synced too, so the new file survives a power cut).
//! - **The index.** Every key changed by a block above the run maps to where its latest change
//!   lies in the log: 12 bytes per key ([`index`]). Values stay on disk; a
//!   bounded cache keeps the hot ones ([`cache`]).
//! - **The order.** Beside the index, the keys changed above the run, sorted and front-coded
//!   ([`order`]), so that a seek ([`StateStore::seek`]) walks them beside the run.
//! - **The run** (`run-<height>.trun`): the whole state at one block, sorted, with a sparse
//!   index and a bloom filter in memory ([`run`]). A lookup that misses the
//!   index and the cache reads one 4 KiB block of it.
//! - **Snapshot and compaction, in the background.** Once the log above the run outgrows
//!   both [`LogOptions::snapshot_min_bytes`] and the run, a worker thread merges the run with those
//!   blocks into the next run ([`merge`]), syncs it and renames it into place.
//!   Commits go on meanwhile and never wait for it: the next commit after it finishes swaps
//!   the run in, the index drops the keys the run now holds (a few shards per commit), and
//!   segments that hold neither unmerged changes nor retained blocks are deleted. A merge's
//!   output depends only on the blocks, never on its timing, and the consensus checksum is
//!   computed by the chain from each block's changes, so neither can depend on when a merge
//!   ran.
//! - **Retention.** Each commit says the lowest height to keep ([`Commit::retain_from`]);
//!   older blocks leave the archive, and their segments go once merged.
//!
//! Opening loads the newest run and replays the blocks above it. Every block is durable
//! before anything after it is written, so after a crash only the very end of the last
//! segment can hold an unfinished record: one cut short, or one failing its checksum with
//! nothing after it. Only that is cut off, and only by a writer. Anything else that fails a
//! check is [`StoreError::Corrupted`], naming the file and the byte offset, and nothing is
//! changed. [`LogStore::open_read_only`] changes no file at all.
//!
//! A write or sync that fails stops the store ([`StoreError::Poisoned`]): after a failed
//! `fsync` the page cache no longer says what is on disk, and a later `fsync` may succeed
//! without writing what the failed one dropped (PostgreSQL's "fsyncgate"). The store cuts the
//! active segment back to what it knows is on disk (so no block it did not report durable can
//! come back, from the cache or from a later sync), then answers every call with the error,
//! which says to restart: opening again reads what is on disk. A commit reports `Err` exactly
//! when its block is not on disk afterwards, or may not be ([`crate::Poison::unsure`]).
//!
//! Files are reached through [`Vfs`], so tests can cut the power or fail any operation
//! ([`fault::FaultFs`]).
//!
//! # Where each part lives
//!
//! As fjall splits its journal: `recovery` opens the store (the crash model's one repair is
//! there), `writer` commits and stops the store on a failed write, `compaction` merges,
//! installs and deletes, `read` answers reads, and `worker` runs the background sync and
//! the merge on long-lived threads. The file formats are in [`record`] (log records) and
//! [`run`] (sorted runs); the file layer in [`vfs`], its simulated disk in [`fault`].

use std::borrow::Cow;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::block::BlockHeader;
use crate::store::{
    BlockArchive, BlockRecord, ChangeSource, Commit, Direction, DroppedTail, Entries, KeyRange,
    Poison, StateStore, StoreError, StoreResult, StoreStats,
};

pub mod cache;
pub mod crash;
pub mod fault;
pub mod index;
mod live;
pub mod merge;
pub mod order;
pub mod record;
pub mod run;
pub mod vfs;

mod compaction;
mod read;
mod recovery;
mod worker;
mod writer;

use compaction::{Merging, Sweep};
use index::{Index, KeyHash, Loc};
use order::Order;
use read::Reads;
use record::RECORD_HEADER_LEN;
use recovery::open_error;
use run::{KeptBlock, Run, RunMask};
use vfs::{RealFs, VFile, VLock, Vfs};
use worker::Worker;
use writer::{Durable, Syncing};

const LOG_MAGIC: &[u8; 8] = b"TALLYLOG";
/// Version 2 added the record header's own checksum; version 3 the record kind and
/// `retain_from` in the payload; version 4 the block header's proposer, prices and usage
/// (fees, issue 24); version 6 the compact transaction encoding of the blocks' bodies (varints,
/// implied signers and public keys, issue 26).
const FORMAT_VERSION: u32 = 6;
const FILE_HEADER_LEN: u64 = 12;

/// Changes at which a genesis goes straight into a run as well as into the log, instead of
/// into the index. Below it, the index costs little and one file is simpler; above it, the
/// index would hold every genesis key (12 bytes, plus its share of the hash table, each) and
/// the first snapshot would rewrite them all anyway. 100,000 changes is about 4 MB of state.
const BULK_GENESIS_CHANGES: u64 = 100_000;

/// Tuning of the log store.
#[derive(Clone)]
pub struct LogOptions {
    /// At most this many blocks are kept below the head, whatever commits ask (`u64::MAX`:
    /// only what commits ask).
    pub retain_blocks: u64,
    /// A new log segment starts after this many bytes.
    pub segment_bytes: u64,
    /// A merge (the next snapshot) starts once the log above the run exceeds both this and
    /// the run's size, so the run is rewritten at most once per its own size of log: write
    /// amplification stays near 2–3.
    pub snapshot_min_bytes: u64,
    /// Bytes the value cache may hold.
    pub cache_bytes: usize,
    /// Run merges on a background thread (else inline in the commit that triggers them:
    /// slower commits, same results; for tests that compare the two).
    pub background: bool,
    /// The file system (the real one but in power-loss tests).
    pub vfs: Arc<dyn Vfs>,
}

impl std::fmt::Debug for LogOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogOptions")
            .field("retain_blocks", &self.retain_blocks)
            .field("segment_bytes", &self.segment_bytes)
            .field("snapshot_min_bytes", &self.snapshot_min_bytes)
            .field("cache_bytes", &self.cache_bytes)
            .field("background", &self.background)
            .finish()
    }
}

impl Default for LogOptions {
    fn default() -> Self {
        Self {
            retain_blocks: u64::MAX,
            // 64 MiB: a segment is deleted whole, so this is the granularity of reclaimed
            // disk; Vilmo and Kafka use segments of this order.
            segment_bytes: 64 << 20,
            // 64 MiB: below this, rewriting the run costs more than replaying the log.
            snapshot_min_bytes: 64 << 20,
            // 64 MiB: the hot accounts of a 10M-account Zipf workload fit (about 600k
            // entries of 100 bytes).
            cache_bytes: 64 << 20,
            background: true,
            vfs: Arc::new(RealFs),
        }
    }
}

struct Segment {
    seq: u64,
    file: Arc<dyn VFile>,
    size: u64,
    max_height: Option<u64>,
}

/// Where a block's record lies.
#[derive(Debug, Clone, Copy)]
struct BlockPos {
    height: u64,
    seq: u64,
    offset: u64,
    len: u64,
}

impl BlockPos {
    /// The location just past its record.
    fn end(&self) -> Loc {
        Loc::new(self.seq, self.offset + RECORD_HEADER_LEN + self.len)
    }

    /// Damage to its record, in the store at `dir`.
    fn corrupt(&self, dir: &Path, why: String) -> StoreError {
        StoreError::corrupted(segment_path(dir, self.seq), Some(self.offset), why)
    }

    /// Checks that the record found here holds the block the index says it does.
    fn holds(&self, dir: &Path, found: &BlockHeader) -> StoreResult<()> {
        if found.height == self.height {
            return Ok(());
        }
        Err(self.corrupt(
            dir,
            format!(
                "block {} was indexed here, but the record holds block {}",
                self.height, found.height
            ),
        ))
    }
}

/// The embedded default store. See the module docs.
pub struct LogStore {
    dir: PathBuf,
    options: LogOptions,
    vfs: Arc<dyn Vfs>,
    read_only: bool,
    segments: VecDeque<Segment>,
    /// Every block record still in the log, ascending.
    blocks: VecDeque<BlockPos>,
    retain_from: u64,
    head: Option<BlockHeader>,
    index: Index,
    /// The keys changed above the run, in order.
    order: Order,
    /// The hash of keys in the index and the cache, seeded for this store.
    hasher: KeyHash,
    run: Option<Arc<Run>>,
    /// The run's entries deleted since it was written.
    masked: RunMask,
    /// The run block the last committed deletion read (to mask its entry).
    deleting: KeptBlock,
    reads: Reads,
    syncing: Option<Syncing>,
    merging: Option<Merging>,
    /// The thread that runs background syncs, started by the first one.
    sync_worker: Option<Worker>,
    /// The last block record's encoded payload, its allocation kept for the next
    /// ([`record::write_block_record`]).
    record: Vec<u8>,
    /// The thread that runs merges, started by the first one.
    merge_worker: Option<Worker>,
    sweep: Option<Sweep>,
    /// The next `maybe_merge` merges whatever the log holds ([`LogStore::snapshot`]).
    force_merge: bool,
    stats: StoreStats,
    /// What opening dropped from the end of the log, for the node to report.
    dropped_tail: Option<DroppedTail>,
    durable: Durable,
    /// Set by a failed write or sync: every later call fails with it, until the store is opened
    /// again (see the module docs).
    poison: Option<Poison>,
    _lock: VLock,
}

/// Parallel execution shares the store by reference across threads: it must be `Sync`.
const _: fn() = || {
    fn shared<T: Send + Sync>() {}
    shared::<LogStore>();
};

fn segment_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("log-{seq:08}.tlog"))
}

impl LogStore {
    /// Opens (or creates) the store in `dir` for writing. Fails with
    /// [`StoreError::Locked`] while another process has it open, and with
    /// [`StoreError::Corrupted`] if it is damaged beyond a torn last record.
    pub fn open(dir: impl AsRef<Path>, options: LogOptions) -> StoreResult<Self> {
        let dir = dir.as_ref().to_path_buf();
        let vfs = options.vfs.clone();
        vfs.create_dir_all(&dir)?;
        let lock = vfs.lock(&dir, true)?;
        let mut store = Self::empty(dir, options, lock, false);
        store.load()?;
        match store.segments.back() {
            None => store.new_segment(0).map_err(open_error)?,
            Some(segment) => {
                // The last process may have left records only in the page cache (commits
                // without durability): sync them, so that what counts as on disk is.
                segment.file.sync()?;
                store.durable = Durable {
                    head: store.head.clone(),
                    active_len: segment.size,
                };
            }
        }
        Ok(store)
    }

    /// Opens the store in `dir` for reading only: no file in `dir` is created, changed or
    /// removed, and a torn last record is skipped rather than cut. Shares the lock with other
    /// readers; fails with [`StoreError::Locked`] while a writer has the store open.
    pub fn open_read_only(dir: impl AsRef<Path>) -> StoreResult<Self> {
        Self::open_read_only_with(dir, LogOptions::default())
    }

    /// [`LogStore::open_read_only`] with `options` (its file system and cache).
    pub fn open_read_only_with(dir: impl AsRef<Path>, options: LogOptions) -> StoreResult<Self> {
        let dir = dir.as_ref().to_path_buf();
        let vfs = options.vfs.clone();
        if !vfs.dir_exists(&dir) {
            return Err(StoreError::Missing { dir });
        }
        let lock = vfs.lock(&dir, false)?;
        let mut store = Self::empty(dir, options, lock, true);
        store.load()?;
        Ok(store)
    }

    fn empty(dir: PathBuf, options: LogOptions, lock: VLock, read_only: bool) -> Self {
        Self {
            vfs: options.vfs.clone(),
            reads: Reads::new(options.cache_bytes),
            dir,
            options,
            read_only,
            segments: VecDeque::new(),
            blocks: VecDeque::new(),
            retain_from: 0,
            head: None,
            index: Index::default(),
            order: Order::default(),
            hasher: KeyHash::default(),
            run: None,
            masked: RunMask::new(0),
            deleting: KeptBlock::default(),
            syncing: None,
            merging: None,
            sync_worker: None,
            record: Vec::new(),
            merge_worker: None,
            sweep: None,
            force_merge: false,
            stats: StoreStats::default(),
            dropped_tail: None,
            durable: Durable::default(),
            poison: None,
            _lock: lock,
        }
    }

    fn run_height(&self) -> Option<u64> {
        self.run.as_ref().map(|r| r.head().height)
    }

    fn segment(&self, seq: u64) -> Option<&Segment> {
        let first = self.segments.front()?.seq;
        self.segments.get(seq.checked_sub(first)? as usize)
    }

    /// Where retained block `height` lies.
    fn retained(&self, height: u64) -> Option<&BlockPos> {
        if height < self.first_retained() {
            return None;
        }
        let first = self.blocks.front()?;
        height
            .checked_sub(first.height)
            .and_then(|i| self.blocks.get(i as usize))
            .filter(|p| p.height == height)
    }

    fn segment_file(&self, loc: Loc) -> StoreResult<&Arc<dyn VFile>> {
        self.segment(loc.seq()).map(|s| &s.file).ok_or_else(|| {
            StoreError::corrupted(
                segment_path(&self.dir, loc.seq()),
                Some(loc.offset()),
                "the index points into a segment that is gone",
            )
        })
    }
}

impl StateStore for LogStore {
    fn get(&self, key: &[u8]) -> StoreResult<Option<Cow<'_, [u8]>>> {
        self.usable()?;
        Ok(self.read(key)?.map(Cow::Owned))
    }

    fn get_in<'a>(&'a self, key: &[u8], scratch: &'a mut Vec<u8>) -> StoreResult<Option<&'a [u8]>> {
        self.usable()?;
        Ok(self.read_into(key, scratch)?.then_some(scratch.as_slice()))
    }

    fn commit(&mut self, block: BlockRecord, commit: Commit) -> StoreResult<()> {
        self.commit_block(block, commit)
    }

    fn commit_genesis(
        &mut self,
        block: BlockRecord,
        changes: &dyn ChangeSource,
        commit: Commit,
    ) -> StoreResult<()> {
        self.commit_streamed_genesis(block, changes, commit)
    }

    fn sync(&mut self) -> StoreResult<()> {
        self.sync_log()
    }

    fn entries(&self) -> StoreResult<Entries<'_>> {
        self.all_entries()
    }

    fn seek(&self, range: KeyRange<'_>, dir: Direction) -> StoreResult<Option<(Vec<u8>, Vec<u8>)>> {
        self.seek_entry(range, dir)
    }

    fn disk_bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.size).sum::<u64>()
            + self.run.as_ref().map_or(0, |r| r.size())
    }

    fn kind(&self) -> &'static str {
        "log"
    }

    fn stats(&self) -> StoreStats {
        self.current_stats()
    }

    fn dropped_tail(&self) -> Option<&DroppedTail> {
        self.dropped_tail.as_ref()
    }
}
