//! The `log` store: after Vilmo, QMDB and GriffinDB, an in-memory index over append-only
//! logs, with the cold state in a sorted run that a background merge rewrites.
//!
//! - **The log.** Each block commit is one checksummed append to the active segment
//!   (`log-<seq>.tlog`); the block is durable per its [`Durability`]. A segment past
//!   [`LogOptions::segment_bytes`] is synced and sealed, and the next one starts (the
//!   directory is synced too, so the new file survives a power cut).
//! - **The index.** Every key changed by a block above the run maps to where its latest change
//!   lies in the log: 12 bytes per key ([`crate::store::index`]). Values stay on disk; a
//!   bounded cache keeps the hot ones ([`crate::store::cache`]).
//! - **The run** (`run-<height>.trun`): the whole state at one block, sorted, with a sparse
//!   index and a bloom filter in memory ([`crate::store::run`]). A lookup that misses the
//!   index and the cache reads one 4 KiB block of it.
//! - **Snapshot and compaction, in the background.** Once the log above the run outgrows
//!   both [`LogOptions::snapshot_min_bytes`] and the run, a thread merges the run with those
//!   blocks into the next run ([`crate::store::merge`]), syncs it and renames it into place.
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
//! ([`crate::store::vfs::FaultFs`]).

use std::borrow::Cow;
use std::collections::VecDeque;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::block::BlockHeader;
use crate::state::{
    BlockArchive, BlockRecord, ChangeSource, Commit, DroppedTail, Durability, Entries, StateStore,
    StoreStats, collect_and_commit_genesis,
};
use crate::store::cache::ValueCache;
use crate::store::crash;
use crate::store::error::Step;
use crate::store::index::{Index, KeyHash, Loc, SHARDS};
use crate::store::merge::{MergeBlock, MergeDone, MergeJob, Merger, run_merge, run_path};
use crate::store::record::{
    self, ChangeCursor, FileReader, RECORD_HEADER_LEN, change_offsets, parse_header,
    read_change_at, read_prefix, write_block_record, write_streamed_block_record,
};
use crate::store::run::{BLOCK_BYTES, FileWriter, Run, RunWriter};
use crate::store::vfs::{RealFs, VFile, VLock, Vfs};
use crate::store::{Poison, StoreError, StoreResult};

const LOG_MAGIC: &[u8; 8] = b"TALLYLOG";
/// Version 2 added the record header's own checksum; version 3 the record kind and
/// `retain_from` in the payload.
const FORMAT_VERSION: u32 = 3;
const FILE_HEADER_LEN: u64 = 12;

/// Most blocks one merge reads at once: each holds a 16 KiB buffer, so at most 16 MiB.
const MAX_MERGE_BLOCKS: usize = 1024;

/// How long one commit may spend dropping merged keys from the index before it leaves the
/// rest to the next commits.
const SWEEP_BUDGET: Duration = Duration::from_millis(2);

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

/// Shards of the value cache: reads take `&self` and may come from several threads at once
/// (parallel execution reads the store from every core), so each shard has its own lock.
const CACHE_SHARDS: usize = 32;

/// What reads share: the value cache and the read counters.
struct Reads {
    shards: Vec<Mutex<ValueCache>>,
    gets: AtomicU64,
    user_bytes: AtomicU64,
    disk_bytes: AtomicU64,
}

impl Reads {
    fn new(budget: usize) -> Self {
        Self {
            shards: (0..CACHE_SHARDS)
                .map(|_| Mutex::new(ValueCache::new(budget / CACHE_SHARDS)))
                .collect(),
            gets: AtomicU64::new(0),
            user_bytes: AtomicU64::new(0),
            disk_bytes: AtomicU64::new(0),
        }
    }

    fn shard_of(hash: u64) -> usize {
        // The top bits: the index uses them for its shards too, the cache's sets the low ones.
        (hash >> 40) as usize % CACHE_SHARDS
    }

    fn lock(&self, hash: u64) -> MutexGuard<'_, ValueCache> {
        self.shards[Self::shard_of(hash)]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    fn shard_mut(&mut self, hash: u64) -> &mut ValueCache {
        self.shards[Self::shard_of(hash)]
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
    }
}

struct Merging {
    handle: JoinHandle<Result<Option<MergeDone>, Poison>>,
    cancel: Arc<AtomicBool>,
}

/// A background sync of the active segment, and what it makes durable.
struct Syncing {
    handle: JoinHandle<io::Result<()>>,
    seq: u64,
    /// The segment's length when the sync started.
    end: u64,
    /// The block it makes durable.
    head: BlockHeader,
}

/// What is known to be on disk: what a sync that returned, or a sealed segment, covers.
#[derive(Default)]
struct Durable {
    /// The last block on disk.
    head: Option<BlockHeader>,
    /// Bytes of the active segment on disk; anything after them may be only in the page cache.
    active_len: u64,
}

/// After a merge: dropping merged keys from the index, shard by shard.
struct Sweep {
    next_shard: usize,
    /// Index entries before this location are in the run.
    end: Loc,
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
    /// The hash of keys in the index and the cache, seeded for this store.
    hasher: KeyHash,
    run: Option<Arc<Run>>,
    reads: Reads,
    syncing: Option<Syncing>,
    merging: Option<Merging>,
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

/// Files in `names` called `<prefix><number><suffix>` exactly as the store names them
/// (`path_of`), sorted by number. Any other spelling of a number (`log-7.tlog`, `log-+7.tlog`)
/// is not the store's file: read as one, it would name a file that does not exist, or the same
/// segment twice (issue 10, found by fuzzing).
fn numbered(
    names: &[String],
    prefix: &str,
    suffix: &str,
    path_of: fn(&Path, u64) -> PathBuf,
) -> Vec<u64> {
    let mut found: Vec<u64> = names
        .iter()
        .filter_map(|name| {
            let number = name
                .strip_prefix(prefix)?
                .strip_suffix(suffix)?
                .parse()
                .ok()?;
            (path_of(Path::new(""), number).as_os_str() == name.as_str()).then_some(number)
        })
        .collect();
    found.sort_unstable();
    found
}

/// What reading the record at some offset of a segment found.
enum Scan {
    /// A whole record: its payload length, retain_from and header.
    Record(u64, u64, BlockHeader),
    End,
    Torn(&'static str),
    BadHeader,
    Corrupt(String),
}

/// Reads the record at `offset` of `file` (`file_len` bytes), checking its checksums.
fn scan_record(file: &(dyn VFile + 'static), offset: u64, file_len: u64) -> io::Result<Scan> {
    let rest = file_len.saturating_sub(offset);
    if rest == 0 {
        return Ok(Scan::End);
    }
    if rest < RECORD_HEADER_LEN {
        return Ok(Scan::Torn("the log ends inside a record header"));
    }
    let mut header = [0u8; RECORD_HEADER_LEN as usize];
    file.read_exact_at(&mut header, offset)?;
    let Some(header) = parse_header(&header) else {
        return Ok(Scan::BadHeader);
    };
    if header.len > rest - RECORD_HEADER_LEN {
        return Ok(Scan::Torn("the log ends inside a record"));
    }
    let start = offset + RECORD_HEADER_LEN;
    let end = start + header.len;
    if !record::payload_crc_ok(file, start, header.len, header.payload_crc)? {
        return Ok(if end == file_len {
            Scan::Torn("the last record fails its checksum")
        } else {
            Scan::Corrupt(format!(
                "record checksum mismatch, with {} more bytes of log after the record",
                file_len - end
            ))
        });
    }
    let mut reader = FileReader::new(file, start, end, 256);
    match read_prefix(&mut reader) {
        Ok(Some(prefix)) => Ok(Scan::Record(header.len, prefix.retain_from, prefix.header)),
        Ok(None) => Ok(Scan::Corrupt("a record of an unknown kind".into())),
        Err(e) => Ok(Scan::Corrupt(format!("the record does not decode: {e}"))),
    }
}

/// What follows a damaged record header in the last segment.
enum After {
    /// A whole, checksummed record starts at this offset: the damage is not a torn tail.
    Good(u64),
    /// No good record follows: the damaged record may be a torn tail.
    Nothing,
    /// Too many record-like headers follow to check them all (each costs a checksum of the
    /// rest of the file, so a crafted file could make this quadratic): not a torn tail either.
    TooMany,
}

/// The first whole, checksummed record that starts after `from` in `file`. A damaged record
/// header hides where its record ends; if a good record follows somewhere, the damage is not a
/// torn tail.
fn good_record_after(file: &(dyn VFile + 'static), from: u64, file_len: u64) -> io::Result<After> {
    const WINDOW: u64 = 1 << 20;
    // A random 12 bytes pass the header checksum once in 2^32, so an honest torn tail
    // checksums next to nothing; this allows every byte of the file twice over.
    let mut budget = 2 * file_len + WINDOW;
    let mut buf = Vec::new();
    let mut pos = from;
    while pos + RECORD_HEADER_LEN <= file_len {
        let n = (WINDOW + RECORD_HEADER_LEN).min(file_len - pos);
        buf.resize(n as usize, 0);
        file.read_exact_at(&mut buf, pos)?;
        let candidates = n - RECORD_HEADER_LEN + 1;
        for i in 0..candidates {
            let at = i as usize;
            let bytes: &[u8; RECORD_HEADER_LEN as usize] = buf[at..at + RECORD_HEADER_LEN as usize]
                .try_into()
                .expect("12 bytes");
            let Some(header) = parse_header(bytes) else {
                continue;
            };
            let start = pos + i + RECORD_HEADER_LEN;
            if start + header.len > file_len {
                continue;
            }
            let Some(left) = budget.checked_sub(header.len) else {
                return Ok(After::TooMany);
            };
            budget = left;
            if record::payload_crc_ok(file, start, header.len, header.payload_crc)? {
                return Ok(After::Good(pos + i));
            }
        }
        pos += candidates;
    }
    Ok(After::Nothing)
}

/// A write that failed while opening: the open fails with it (there is no store to stop yet).
fn open_error(failure: Poison) -> StoreError {
    StoreError::Io(io::Error::other(format!(
        "{} {} failed: {}",
        failure.step,
        failure.path.display(),
        failure.cause
    )))
}

fn check_changes(block: &BlockRecord) -> StoreResult<()> {
    if block.changes.windows(2).all(|w| w[0].0 < w[1].0) {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "block {}: its changes must be sorted by key, each key once",
            block.header.height
        ),
    )
    .into())
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
            hasher: KeyHash::default(),
            run: None,
            syncing: None,
            merging: None,
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

    /// Whether this store may commit.
    fn writable(&self) -> StoreResult<()> {
        if self.read_only {
            return Err(StoreError::ReadOnly);
        }
        self.usable()
    }

    /// Fails once a write or sync failed: nothing this process holds can be trusted then.
    fn usable(&self) -> StoreResult<()> {
        match &self.poison {
            None => Ok(()),
            Some(poison) => Err(StoreError::Poisoned(Box::new(poison.clone()))),
        }
    }

    /// Whether block `height` is known to be on disk.
    fn is_durable(&self, height: u64) -> bool {
        self.durable
            .head
            .as_ref()
            .is_some_and(|h| h.height >= height)
    }

    /// Notes that the active segment `seq` is on disk up to `end`, holding blocks up to
    /// `head`.
    fn raise_durable(&mut self, seq: u64, end: u64, head: Option<&BlockHeader>) {
        if self.segments.back().is_some_and(|s| s.seq == seq) {
            self.durable.active_len = self.durable.active_len.max(end);
        }
        if let Some(head) = head
            && !self.is_durable(head.height)
        {
            self.durable.head = Some(head.clone());
        }
    }

    /// Stops the store after `failure`, the first failed write or sync (see the module docs):
    /// background work ends, the active segment is cut back to what is known to be on disk,
    /// and every later call gets the returned error. `attempted`: a block whose record may
    /// have been written in part.
    fn poison(&mut self, mut failure: Poison, attempted: Option<u64>) -> StoreError {
        if let Some(poison) = &self.poison {
            return StoreError::Poisoned(Box::new(poison.clone()));
        }
        // A background sync that succeeded still counts; one that failed is cut off below.
        let _ = self.finish_sync();
        // A merge writes only its own run, of blocks on disk: stopped or finished, it leaves
        // nothing the cut must take back.
        if let Some(merging) = self.merging.take() {
            merging.cancel.store(true, Ordering::Relaxed);
            let _ = merging.handle.join();
        }
        let written = self.blocks.back().map(|b| b.height).max(attempted);
        let durable = self.durable.head.as_ref().map(|h| h.height);
        failure.durable = durable;
        if self.cut_back().is_err() {
            failure.unsure = written
                .filter(|&w| durable.is_none_or(|d| w > d))
                .map(|w| durable.map_or(0, |d| d + 1)..=w);
        }
        self.head = self.durable.head.clone();
        self.poison = Some(failure.clone());
        StoreError::Poisoned(Box::new(failure))
    }

    /// Cuts the active segment back to what is on disk. Cutting also drops whatever a failed
    /// sync left in the page cache, which a later sync would not write.
    fn cut_back(&self) -> io::Result<()> {
        let Some(segment) = self.segments.back() else {
            return Ok(());
        };
        if segment.file.len()? <= self.durable.active_len {
            return Ok(());
        }
        segment.file.set_len(self.durable.active_len)?;
        segment.file.sync()
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

    /// Loads the newest run and replays the log above it.
    fn load(&mut self) -> StoreResult<()> {
        let names = self.vfs.list(&self.dir)?;
        if !self.read_only {
            // Leftovers of a merge that a crash interrupted.
            for name in names.iter().filter(|n| n.ends_with(".tmp")) {
                self.vfs.remove(&self.dir.join(name))?;
            }
        }
        let runs = numbered(&names, "run-", ".trun", run_path);
        if let Some(&height) = runs.last() {
            let run = Run::open(&*self.vfs, &run_path(&self.dir, height))?;
            if run.head().height != height {
                return Err(StoreError::corrupted(
                    run_path(&self.dir, height),
                    None,
                    format!("the run holds block {} instead", run.head().height),
                ));
            }
            self.run = Some(Arc::new(run));
            if !self.read_only {
                for &old in &runs[..runs.len() - 1] {
                    self.vfs.remove(&run_path(&self.dir, old))?;
                }
            }
        }
        let seqs = numbered(&names, "log-", ".tlog", segment_path);
        // The index addresses a change by segment number; the store never numbers a segment
        // past what it can address, so such a file is not one it wrote (issue 10, found by
        // fuzzing: it used to panic in `Loc::new`).
        if let Some(&seq) = seqs.last()
            && seq > Loc::MAX_SEQ
        {
            return Err(StoreError::corrupted(
                segment_path(&self.dir, seq),
                None,
                format!(
                    "segment number {seq} is past the largest a store can have ({})",
                    Loc::MAX_SEQ
                ),
            ));
        }
        for (i, &seq) in seqs.iter().enumerate() {
            self.replay_segment(seq, i + 1 == seqs.len())?;
        }
        self.head = match (self.blocks.back(), &self.run) {
            (Some(_), _) => self.head.take(),
            (None, Some(run)) => Some(run.head().clone()),
            (None, None) => None,
        };
        if let (Some(run), Some(first)) = (&self.run, self.blocks.front())
            && first.height > run.head().height + 1
        {
            return Err(StoreError::corrupted(
                segment_path(&self.dir, first.seq),
                Some(first.offset),
                format!(
                    "the log starts at block {} but the run ends at block {}",
                    first.height,
                    run.head().height
                ),
            ));
        }
        if !self.read_only {
            self.delete_dead_segments().map_err(open_error)?;
        }
        self.stats.index_keys = self.index.len() as u64;
        Ok(())
    }

    fn replay_segment(&mut self, seq: u64, last: bool) -> StoreResult<()> {
        let path = segment_path(&self.dir, seq);
        let file = if self.read_only {
            self.vfs.open_read(&path)?
        } else {
            self.vfs.open_append(&path)?
        };
        let file_len = file.len()?;
        let segment = Segment {
            seq,
            file: file.clone(),
            size: FILE_HEADER_LEN,
            max_height: None,
        };
        let mut magic = [0u8; FILE_HEADER_LEN as usize];
        let whole = file_len >= FILE_HEADER_LEN && file.read_exact_at(&mut magic, 0).is_ok();
        if !whole || &magic[..8] != LOG_MAGIC {
            // Its header was synced before any record went in, so this is damage, unless the
            // file is no longer than a header: a crash while creating it.
            if !(last && file_len <= FILE_HEADER_LEN) {
                return Err(StoreError::corrupted(
                    path,
                    Some(0),
                    "not a Tally log segment (bad or missing header)",
                ));
            }
            if !self.read_only {
                file.set_len(0)?;
                file.append(&Self::segment_header())?;
                file.sync()?;
            }
            self.segments.push_back(segment);
            return Ok(());
        }
        let version = u32::from_le_bytes(magic[8..].try_into().expect("4 bytes"));
        if version != FORMAT_VERSION {
            return Err(StoreError::Version {
                path,
                found: version,
                expected: FORMAT_VERSION,
            });
        }
        // In the list before its records replay: the index confirms keys by reading them back.
        self.segments.push_back(segment);
        loop {
            let offset = self.segments.back().expect("pushed").size;
            let torn = match scan_record(&*file, offset, file_len)? {
                Scan::End => break,
                Scan::Record(len, retain_from, header) => {
                    self.replay_record(&path, &file, seq, offset, len, retain_from, header)?;
                    let segment = self.segments.back_mut().expect("pushed");
                    segment.max_height = self.blocks.back().map(|b| b.height);
                    segment.size += RECORD_HEADER_LEN + len;
                    continue;
                }
                Scan::Corrupt(why) => return Err(StoreError::corrupted(path, Some(offset), why)),
                Scan::Torn(why) if !last => {
                    return Err(StoreError::corrupted(
                        path,
                        Some(offset),
                        format!("{why}, in a sealed segment (not the last one)"),
                    ));
                }
                Scan::Torn(why) => why,
                Scan::BadHeader => {
                    let why = if !last {
                        Some(
                            "record header checksum mismatch, in a sealed segment (not the last \
                             one)"
                                .to_string(),
                        )
                    } else {
                        match good_record_after(&*file, offset + 1, file_len)? {
                            After::Good(at) => Some(format!(
                                "record header checksum mismatch, with a good record after it at \
                                 byte {at}"
                            )),
                            After::TooMany => Some(
                                "record header checksum mismatch, followed by more record-like \
                                 headers than can be checked"
                                    .to_string(),
                            ),
                            After::Nothing => None,
                        }
                    };
                    if let Some(why) = why {
                        return Err(StoreError::corrupted(path, Some(offset), why));
                    }
                    "the last record's header is damaged and no record follows it"
                }
            };
            // A record that never finished: a crash before its sync returned, so its block
            // never counted as committed. Reported, since damage to the last block looks
            // the same.
            self.dropped_tail = Some(DroppedTail {
                file: path.clone(),
                offset,
                bytes: file_len - offset,
                why: torn,
                cut: !self.read_only,
            });
            if !self.read_only {
                file.set_len(offset)?;
                file.sync()?;
            }
            break;
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn replay_record(
        &mut self,
        path: &Path,
        file: &Arc<dyn VFile>,
        seq: u64,
        offset: u64,
        len: u64,
        retain_from: u64,
        header: BlockHeader,
    ) -> StoreResult<()> {
        let height = header.height;
        let run_height = self.run_height();
        let expected = match (self.blocks.back(), run_height) {
            (Some(b), _) => Some(b.height + 1),
            (None, Some(_)) => None, // the log may start anywhere at or below the run
            (None, None) => Some(0),
        };
        if expected.is_some_and(|e| e != height) {
            return Err(StoreError::corrupted(
                path,
                Some(offset),
                format!(
                    "a record of block {height} where block {} was expected",
                    expected.expect("some")
                ),
            ));
        }
        if run_height.is_none_or(|r| height > r) {
            let (_, mut cursor) = ChangeCursor::new(&**file, offset, len, 1 << 20)
                .map_err(|e| StoreError::corrupted(path, Some(offset), e.to_string()))?;
            let (mut key, mut value, mut previous) = (Vec::new(), Vec::new(), Vec::new());
            let mut first = true;
            while let Some((at, present)) = cursor
                .next_into(&mut key, &mut value)
                .map_err(|e| StoreError::corrupted(path, Some(offset), e.to_string()))?
            {
                if !first && previous >= key {
                    return Err(StoreError::corrupted(
                        path,
                        Some(offset),
                        "changes out of order",
                    ));
                }
                first = false;
                self.index_change(&key, present.then_some(value.as_slice()), Loc::new(seq, at))?;
                std::mem::swap(&mut previous, &mut key);
            }
        }
        self.blocks.push_back(BlockPos {
            height,
            seq,
            offset,
            len,
        });
        self.retain_from = retain_from;
        self.head = Some(header);
        Ok(())
    }

    fn segment_header() -> Vec<u8> {
        let mut h = LOG_MAGIC.to_vec();
        h.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        h
    }

    fn new_segment(&mut self, seq: u64) -> Result<(), Poison> {
        let path = segment_path(&self.dir, seq);
        let file = self.vfs.create(&path).at("creating", &path)?;
        let written = file
            .append(&Self::segment_header())
            .at("writing the header of", &path)
            .and_then(|()| file.sync().at("syncing", &path))
            .and_then(|()| {
                crash::point("rotate");
                // The new file's name must survive a power cut before anything is written to
                // it.
                self.vfs
                    .sync_dir(&self.dir)
                    .at("syncing the directory", &self.dir)
            });
        if let Err(failure) = written {
            // The file goes again: a header that a failed sync dropped reads back as zeros
            // once a later sync succeeds, and the next open would take the file for a damaged
            // segment.
            let _ = self
                .vfs
                .remove(&path)
                .and_then(|()| self.vfs.sync_dir(&self.dir));
            return Err(failure);
        }
        self.stats.disk_bytes_written += FILE_HEADER_LEN;
        self.segments.push_back(Segment {
            seq,
            file,
            size: FILE_HEADER_LEN,
            max_height: None,
        });
        self.durable.active_len = FILE_HEADER_LEN;
        Ok(())
    }

    /// Points `key` at its change at `loc` in the index and the cache.
    fn index_change(&mut self, key: &[u8], value: Option<&[u8]>, loc: Loc) -> StoreResult<()> {
        let hash = self.hasher.of(key);
        let (segments, dir) = (&self.segments, &self.dir);
        let cache = self.reads.shard_mut(hash);
        let mut scratch = (Vec::new(), Vec::new());
        let mut read = 0;
        self.index.insert(hash, loc, |old| {
            if cache.confirms(hash, old, key) {
                return Ok::<_, StoreError>(true);
            }
            let first = segments.front().map_or(0, |s| s.seq);
            let seg = old
                .seq()
                .checked_sub(first)
                .and_then(|i| segments.get(i as usize))
                .ok_or_else(|| {
                    StoreError::corrupted(
                        segment_path(dir, old.seq()),
                        Some(old.offset()),
                        "the index points into a segment that is gone",
                    )
                })?;
            let (_, n) = read_change_at(&*seg.file, old.offset(), &mut scratch.0, &mut scratch.1)?;
            read += n;
            Ok(scratch.0 == key)
        })?;
        cache.update(hash, key, value, loc);
        *self.reads.disk_bytes.get_mut() += read;
        Ok(())
    }

    /// Waits for the background sync of the last block, if any.
    fn finish_sync(&mut self) -> Result<(), Poison> {
        let Some(syncing) = self.syncing.take() else {
            return Ok(());
        };
        let path = segment_path(&self.dir, syncing.seq);
        match syncing.handle.join() {
            Ok(Ok(())) => {
                self.raise_durable(syncing.seq, syncing.end, Some(&syncing.head));
                Ok(())
            }
            Ok(Err(e)) => Err(Poison::new(&path, "syncing", e)),
            Err(_) => Err(Poison::new(
                &path,
                "syncing",
                "the background sync thread panicked",
            )),
        }
    }

    /// Finishes what runs in the background: the last block's sync (waiting for it) and a
    /// merge (only if it is done).
    fn finish_background(&mut self) -> Result<(), Poison> {
        self.finish_sync()?;
        self.poll_merge(false)
    }

    /// Installs a finished merge, if one finished (never waits for one).
    fn poll_merge(&mut self, wait: bool) -> Result<(), Poison> {
        let finished = self
            .merging
            .as_ref()
            .is_some_and(|m| wait || m.handle.is_finished());
        if !finished {
            return Ok(());
        }
        let merging = self.merging.take().expect("checked");
        let done = merging.handle.join().map_err(|_| {
            Poison::new(
                &self.dir,
                "merging a snapshot in",
                "the merge thread panicked",
            )
        })??;
        if let Some(done) = done {
            self.install(done)?;
        }
        Ok(())
    }

    fn install(&mut self, done: MergeDone) -> Result<(), Poison> {
        let started = Instant::now();
        let run = Arc::new(Run::open(&*self.vfs, &done.path).at("opening", &done.path)?);
        let old = self.run.replace(run);
        self.stats.snapshots += 1;
        self.stats.disk_bytes_written += done.written;
        self.stats.background_bytes_read += done.read;
        self.stats.longest_snapshot_ms = self
            .stats
            .longest_snapshot_ms
            .max(done.took.as_secs_f64() * 1e3);
        crash::point("snapshot-installed");
        if let Some(old) = old {
            self.vfs.remove(old.path()).at("removing", old.path())?;
            self.vfs
                .sync_dir(&self.dir)
                .at("syncing the directory", &self.dir)?;
        }
        let end = self
            .blocks
            .iter()
            .find(|b| b.height == done.height)
            .map(BlockPos::end)
            .expect("the merged head is in the log");
        for shard in &mut self.reads.shards {
            shard
                .get_mut()
                .unwrap_or_else(|e| e.into_inner())
                .forget_locations();
        }
        self.sweep = Some(Sweep { next_shard: 0, end });
        self.note_pause(started);
        Ok(())
    }

    /// Appends `block`'s record to the active segment, durable as `durability` says: synced
    /// now, or a sync started in the background.
    fn append(
        &mut self,
        block: &BlockRecord,
        retain_from: u64,
        durability: Durability,
    ) -> Result<BlockPos, Poison> {
        let height = block.header.height;
        let segment = self.segments.back_mut().expect("an active segment");
        let (seq, offset) = (segment.seq, segment.size);
        let path = segment_path(&self.dir, seq);
        let mut out = FileWriter::new(segment.file.clone());
        let len = write_block_record(block, retain_from, &mut out)
            .and_then(|len| out.flush().map(|()| len).map_err(StoreError::from))
            .at(&format!("appending block {height} to"), &path)?;
        segment.size += RECORD_HEADER_LEN + len;
        segment.max_height = Some(height);
        let (file, end) = (segment.file.clone(), segment.size);
        match durability {
            Durability::Immediate => {
                file.sync().at("syncing", &path)?;
                self.raise_durable(seq, end, Some(&block.header));
            }
            Durability::Background => {
                let handle = std::thread::Builder::new()
                    .name("tally-sync".into())
                    .spawn(move || crash::io_point("background-sync").and_then(|()| file.sync()))
                    .at("starting a sync of", &path)?;
                self.syncing = Some(Syncing {
                    handle,
                    seq,
                    end,
                    head: block.header.clone(),
                });
            }
            Durability::None => {}
        }
        Ok(BlockPos {
            height,
            seq,
            offset,
            len,
        })
    }

    /// After a block's record is written: its changes into the index, the archive's
    /// bookkeeping, and upkeep (rotating a full segment, sweeping the index, deleting dead
    /// segments, starting a merge).
    fn after_append(
        &mut self,
        block: BlockRecord,
        pos: BlockPos,
        retain_from: u64,
    ) -> Result<(), Poison> {
        let path = segment_path(&self.dir, pos.seq);
        let mut user_bytes = 0;
        for ((key, value), at) in block.changes.iter().zip(change_offsets(&block)) {
            user_bytes += key.len() as u64 + value.as_ref().map_or(0, |v| v.len() as u64);
            self.index_change(key, value.as_deref(), Loc::new(pos.seq, pos.offset + at))
                .at("indexing a change in", &path)?;
        }
        self.blocks.push_back(pos);
        self.head = Some(block.header);
        self.retain_from = retain_from;
        self.stats.commits += 1;
        self.stats.user_bytes_written += user_bytes;
        self.stats.disk_bytes_written += RECORD_HEADER_LEN + pos.len;
        self.stats.index_keys = self.index.len() as u64;

        let segment = self.segments.back().expect("an active segment");
        if segment.size >= self.options.segment_bytes {
            let started = Instant::now();
            // A sealed segment is durable to its last byte, so that only the end of the last
            // segment can ever hold a torn record.
            self.finish_sync()?;
            let segment = self.segments.back().expect("an active segment");
            segment.file.sync().at("syncing", &path)?;
            let (seq, end, head) = (segment.seq, segment.size, self.head.clone());
            self.raise_durable(seq, end, head.as_ref());
            self.new_segment(seq + 1)?;
            self.note_pause(started);
        }
        self.sweep_step(Some(SWEEP_BUDGET))?;
        if self.sweep.is_none() {
            self.delete_dead_segments()?;
        }
        self.maybe_merge()
    }

    /// Writes a large genesis's record to the log, synced, and its changes to a new run at
    /// `tmp` as they stream past. Returns where the record lies, the run still to finish, and
    /// the bytes of keys and values.
    fn append_genesis(
        &mut self,
        block: &BlockRecord,
        changes: &dyn ChangeSource,
        tmp: &Path,
    ) -> Result<(BlockPos, RunWriter, u64), Poison> {
        let file = self.vfs.create(tmp).at("creating", tmp)?;
        let mut run =
            RunWriter::with_entries(file, &block.header, changes.len()).at("writing", tmp)?;
        let segment = self.segments.back_mut().expect("an active segment");
        let (seq, offset) = (segment.seq, segment.size);
        let path = segment_path(&self.dir, seq);
        let mut out = FileWriter::new(segment.file.clone());
        let mut user_bytes = 0;
        let len = write_streamed_block_record(block, changes, 0, &mut out, &mut |k, v| {
            user_bytes += (k.len() + v.map_or(0, <[u8]>::len)) as u64;
            match v {
                Some(v) => run.add(k, v),
                None => Ok(()),
            }
        })
        .and_then(|len| out.flush().map(|()| len).map_err(StoreError::from))
        .at("appending block 0 to", &path)?;
        segment.size += RECORD_HEADER_LEN + len;
        segment.max_height = Some(0);
        let (file, end) = (segment.file.clone(), segment.size);
        file.sync().at("syncing", &path)?;
        self.raise_durable(seq, end, Some(&block.header));
        let pos = BlockPos {
            height: 0,
            seq,
            offset,
            len,
        };
        Ok((pos, run, user_bytes))
    }

    /// Finishes a genesis's run at `tmp`, syncs it and renames it into place.
    fn install_genesis_run(&mut self, run: RunWriter, tmp: &Path) -> Result<(), Poison> {
        let path = run_path(&self.dir, 0);
        let (file, run_bytes) = run.finish().at("writing", tmp)?;
        file.sync().at("syncing", tmp)?;
        self.vfs.rename(tmp, &path).at("renaming", tmp)?;
        self.vfs
            .sync_dir(&self.dir)
            .at("syncing the directory", &self.dir)?;
        self.run = Some(Arc::new(Run::open(&*self.vfs, &path).at("opening", &path)?));
        self.stats.disk_bytes_written += run_bytes;
        Ok(())
    }

    fn note_pause(&mut self, started: Instant) {
        let ms = started.elapsed().as_secs_f64() * 1e3;
        self.stats.longest_pause_ms = self.stats.longest_pause_ms.max(ms);
    }

    /// Drops merged keys from the index for a while; once all are gone, deletes dead
    /// segments.
    fn sweep_step(&mut self, budget: Option<Duration>) -> Result<(), Poison> {
        let Some(sweep) = self.sweep.as_mut() else {
            return Ok(());
        };
        let started = Instant::now();
        let end = sweep.end;
        while sweep.next_shard < SHARDS {
            self.index.retain_shard(sweep.next_shard, |loc| loc < end);
            sweep.next_shard += 1;
            if budget.is_some_and(|b| started.elapsed() >= b) {
                break;
            }
        }
        let done = sweep.next_shard == SHARDS;
        if done {
            self.sweep = None;
            self.delete_dead_segments()?;
        }
        self.stats.index_keys = self.index.len() as u64;
        self.note_pause(started);
        Ok(())
    }

    /// Deletes sealed segments whose blocks are all merged into the run and below the
    /// retention height, oldest first.
    fn delete_dead_segments(&mut self) -> Result<(), Poison> {
        if self.sweep.is_some() {
            return Ok(());
        }
        let run_height = self.run_height();
        let mut deleted = false;
        while self.segments.len() > 1 {
            let front = &self.segments[0];
            let dead = match front.max_height {
                None => true,
                Some(max) => run_height.is_some_and(|r| max <= r) && max < self.retain_from,
            };
            if !dead {
                break;
            }
            let seq = front.seq;
            let path = segment_path(&self.dir, seq);
            self.vfs.remove(&path).at("removing", &path)?;
            crash::point("compact-delete");
            self.segments.pop_front();
            while self.blocks.front().is_some_and(|b| b.seq == seq) {
                self.blocks.pop_front();
            }
            self.stats.segments_deleted += 1;
            deleted = true;
        }
        if deleted {
            self.vfs
                .sync_dir(&self.dir)
                .at("syncing the directory", &self.dir)?;
        }
        Ok(())
    }

    /// Starts a merge if the log above the run has grown enough and none is running.
    ///
    /// It merges only blocks known to be on disk, so the run never holds a block the log could
    /// still lose, and the merge never syncs the log itself: an `fsync` error is reported once,
    /// to whichever thread syncs first, so two threads syncing one file could each miss it.
    fn maybe_merge(&mut self) -> Result<(), Poison> {
        if self.merging.is_some() || self.sweep.is_some() || self.read_only {
            return Ok(());
        }
        let run_height = self.run_height();
        let durable = self.durable.head.as_ref().map(|h| h.height);
        let above: Vec<BlockPos> = self
            .blocks
            .iter()
            .filter(|b| run_height.is_none_or(|r| b.height > r))
            .take_while(|b| durable.is_some_and(|d| b.height <= d))
            .take(MAX_MERGE_BLOCKS)
            .copied()
            .collect();
        let Some(last) = above.last() else {
            return Ok(());
        };
        let bytes: u64 = above.iter().map(|b| b.len).sum();
        let threshold = self
            .options
            .snapshot_min_bytes
            .max(self.run.as_ref().map_or(0, |r| r.size()));
        if !self.force_merge && bytes < threshold && above.len() < MAX_MERGE_BLOCKS {
            return Ok(());
        }
        let mut blocks = Vec::with_capacity(above.len());
        for b in &above {
            let seg = self
                .segment(b.seq)
                .expect("blocks above the run have segments");
            blocks.push(MergeBlock {
                height: b.height,
                file: seg.file.clone(),
                path: segment_path(&self.dir, b.seq),
                offset: b.offset,
                len: b.len,
            });
        }
        let head = self
            .block_header(last)
            .map_err(|e| last.corrupt(&self.dir, e.to_string()))
            .at(
                "reading a block to merge from",
                &segment_path(&self.dir, last.seq),
            )?;
        let cancel = Arc::new(AtomicBool::new(false));
        let job = MergeJob {
            vfs: self.vfs.clone(),
            dir: self.dir.clone(),
            run: self.run.clone(),
            blocks,
            head,
            cancel: cancel.clone(),
        };
        if self.options.background {
            let handle = std::thread::Builder::new()
                .name("tally-merge".into())
                .spawn(move || run_merge(job))
                .at("starting a merge in", &self.dir)?;
            self.merging = Some(Merging { handle, cancel });
        } else if let Some(done) = run_merge(job)? {
            self.install(done)?;
            self.sweep_step(None)?;
        }
        Ok(())
    }

    fn block_header(&self, pos: &BlockPos) -> io::Result<BlockHeader> {
        let file = &self.segment(pos.seq).expect("a block's segment").file;
        let start = pos.offset + RECORD_HEADER_LEN;
        let mut reader = FileReader::new(&**file, start, start + pos.len, 256);
        read_prefix(&mut reader)?
            .map(|p| p.header)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "not a block record"))
    }

    /// Waits for a running merge and installs it, then finishes the index sweep (for tests
    /// and for closing).
    pub fn settle(&mut self) -> StoreResult<()> {
        self.usable()?;
        let settled = self.poll_merge(true).and_then(|()| self.sweep_step(None));
        settled.map_err(|failure| self.poison(failure, None))
    }

    /// Syncs the log, merges everything committed into a new run now, whatever its size, and
    /// waits for it (for tests; commits trigger merges on their own).
    pub fn snapshot(&mut self) -> StoreResult<()> {
        if self.read_only {
            return Err(StoreError::ReadOnly);
        }
        self.sync()?;
        self.settle()?;
        self.force_merge = true;
        let background = std::mem::replace(&mut self.options.background, false);
        let result = self.maybe_merge();
        self.force_merge = false;
        self.options.background = background;
        result.map_err(|failure| self.poison(failure, None))?;
        self.settle()
    }

    /// Counters of the store's work so far.
    fn current_stats(&self) -> StoreStats {
        let (mut hits, mut cache_bytes) = (0, 0);
        for shard in &self.reads.shards {
            let cache = shard.lock().unwrap_or_else(|e| e.into_inner());
            hits += cache.hits;
            cache_bytes += cache.heap_bytes();
        }
        StoreStats {
            gets: self.reads.gets.load(Ordering::Relaxed),
            user_bytes_read: self.reads.user_bytes.load(Ordering::Relaxed),
            disk_bytes_read: self.reads.disk_bytes.load(Ordering::Relaxed),
            cache_hits: hits,
            memory_bytes: (self.index.heap_bytes()
                + cache_bytes
                + self.run.as_ref().map_or(0, |r| r.heap_bytes())) as u64,
            index_keys: self.index.len() as u64,
            ..self.stats.clone()
        }
    }

    /// Reads `key` from the index (the log) or the run, filling the cache.
    fn read(&self, key: &[u8]) -> StoreResult<Option<Vec<u8>>> {
        let hash = self.hasher.of(key);
        let reads = &self.reads;
        reads.gets.fetch_add(1, Ordering::Relaxed);
        let user = |value: &Option<Vec<u8>>| {
            let n = key.len() + value.as_ref().map_or(0, Vec::len);
            reads.user_bytes.fetch_add(n as u64, Ordering::Relaxed);
        };
        if let Some(value) = reads.lock(hash).get(hash, key) {
            let value = value.map(<[u8]>::to_vec);
            user(&value);
            return Ok(value);
        }
        let (mut k, mut v) = (Vec::new(), Vec::new());
        let mut present = false;
        let mut read = 0;
        let found = self.index.find(hash, |loc| {
            let file = self.segment_file(loc)?;
            let (p, n) = read_change_at(&**file, loc.offset(), &mut k, &mut v).map_err(|e| {
                StoreError::corrupted(
                    segment_path(&self.dir, loc.seq()),
                    Some(loc.offset()),
                    format!("a change the index points at does not read: {e}"),
                )
            })?;
            read += n;
            present = p;
            Ok::<_, StoreError>(k == key)
        })?;
        let (value, loc) = match found {
            Some(loc) => (present.then_some(v), Some(loc)),
            None => match &self.run {
                Some(run) => {
                    // One block buffer per thread, reused: parallel execution reads from
                    // every core.
                    thread_local! {
                        static BLOCK: std::cell::RefCell<Vec<u8>> =
                            const { std::cell::RefCell::new(Vec::new()) };
                    }
                    let (value, n) = BLOCK.with_borrow_mut(|block| {
                        let got = run.get(key, block);
                        // A block that held a large value (contract code) is not kept for
                        // the thread's lifetime.
                        if block.capacity() > 16 * BLOCK_BYTES {
                            *block = Vec::new();
                        }
                        got
                    })?;
                    read += n;
                    (value, None)
                }
                None => (None, None),
            },
        };
        reads.disk_bytes.fetch_add(read, Ordering::Relaxed);
        reads.lock(hash).put(hash, key, value.as_deref(), loc);
        user(&value);
        Ok(value)
    }

    /// The blocks above the run, as merge inputs.
    fn unmerged(&self) -> Vec<MergeBlock> {
        let run_height = self.run_height();
        self.blocks
            .iter()
            .filter(|b| run_height.is_none_or(|r| b.height > r))
            .map(|b| MergeBlock {
                height: b.height,
                file: self
                    .segment(b.seq)
                    .expect("blocks above the run have segments")
                    .file
                    .clone(),
                path: segment_path(&self.dir, b.seq),
                offset: b.offset,
                len: b.len,
            })
            .collect()
    }
}

impl BlockArchive for LogStore {
    fn head(&self) -> Option<&BlockHeader> {
        self.head.as_ref()
    }

    fn block(&self, height: u64) -> StoreResult<Option<BlockRecord>> {
        self.usable()?;
        let Some(pos) = self.retained(height) else {
            return Ok(None);
        };
        let corrupt = |why: String| pos.corrupt(&self.dir, why);
        let file = self.segment_file(Loc::new(pos.seq, pos.offset))?;
        let mut bytes = vec![0u8; (RECORD_HEADER_LEN + pos.len) as usize];
        file.read_exact_at(&mut bytes, pos.offset)
            .map_err(|e| corrupt(format!("block {height}: {e}")))?;
        let header = parse_header(bytes[..12].try_into().expect("12 bytes"))
            .ok_or_else(|| corrupt(format!("block {height}: record header checksum mismatch")))?;
        let payload = &bytes[RECORD_HEADER_LEN as usize..];
        if header.len != pos.len || crc32fast::hash(payload) != header.payload_crc {
            return Err(corrupt(format!("block {height}: record checksum mismatch")));
        }
        let (_, record) =
            record::decode_block(payload).map_err(|e| corrupt(format!("block {height}: {e}")))?;
        pos.holds(&self.dir, &record.header)?;
        Ok(Some(record))
    }

    fn header_and_body(&self, height: u64) -> StoreResult<Option<(BlockHeader, Vec<u8>)>> {
        self.usable()?;
        let Some(pos) = self.retained(height) else {
            return Ok(None);
        };
        // The payload's checksum was checked when the store opened (every record's is).
        let file = self.segment_file(Loc::new(pos.seq, pos.offset))?;
        let (header, body) = record::read_header_and_body(&**file, pos.offset, pos.len)
            .map_err(|e| pos.corrupt(&self.dir, format!("block {height}: {e}")))?;
        pos.holds(&self.dir, &header)?;
        Ok(Some((header, body)))
    }

    fn first_retained(&self) -> u64 {
        let first = self.blocks.front().map_or(0, |b| b.height);
        first
            .max(self.retain_from)
            .min(self.head.as_ref().map_or(0, |h| h.height))
    }
}

impl StateStore for LogStore {
    fn get(&self, key: &[u8]) -> StoreResult<Option<Cow<'_, [u8]>>> {
        self.usable()?;
        Ok(self.read(key)?.map(Cow::Owned))
    }

    fn commit(&mut self, block: BlockRecord, commit: Commit) -> StoreResult<()> {
        self.writable()?;
        let height = block.header.height;
        let expected = self.head.as_ref().map_or(0, |h| h.height + 1);
        if height != expected {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("block {height} committed where block {expected} was expected"),
            )
            .into());
        }
        check_changes(&block)?;
        let started = Instant::now();
        if let Err(failure) = self.finish_background() {
            return Err(self.poison(failure, None));
        }
        self.note_pause(started);
        let cap_from = (height + 1).saturating_sub(self.options.retain_blocks);
        let retain_from = commit
            .retain_from
            .max(cap_from)
            .max(self.retain_from)
            .min(height);
        let pos = match self.append(&block, retain_from, commit.durability) {
            Ok(pos) => pos,
            Err(failure) => return Err(self.poison(failure, Some(height))),
        };
        // The block is written as `commit.durability` asks. What follows is upkeep: should it
        // fail, the store stops, and this commit fails too unless its block is on disk.
        if let Err(failure) = self.after_append(block, pos, retain_from) {
            let error = self.poison(failure, Some(height));
            if !self.is_durable(height) {
                return Err(error);
            }
        }
        Ok(())
    }

    /// A large genesis is written twice as it streams past, never held in memory: as the
    /// log's first record (the archive's block 0, which `verify` replays) and as the first
    /// run, so that no genesis key enters the index. The record is synced first: after a
    /// crash before the run is in place, opening replays the record as for any block.
    fn commit_genesis(
        &mut self,
        block: BlockRecord,
        changes: &dyn ChangeSource,
        commit: Commit,
    ) -> StoreResult<()> {
        if changes.len() < BULK_GENESIS_CHANGES {
            return collect_and_commit_genesis(self, block, changes, commit);
        }
        self.writable()?;
        if self.head.is_some() || block.header.height != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a genesis is committed as block 0 of an empty store",
            )
            .into());
        }
        let tmp = run_path(&self.dir, 0).with_extension("tmp");
        let (pos, run, user_bytes) = match self.append_genesis(&block, changes, &tmp) {
            Ok(logged) => logged,
            Err(failure) => {
                let _ = self.vfs.remove(&tmp);
                return Err(self.poison(failure, Some(0)));
            }
        };
        crash::point("genesis-logged");
        self.blocks.push_back(pos);
        self.head = Some(block.header);
        self.retain_from = 0;
        self.stats.commits += 1;
        self.stats.user_bytes_written += user_bytes;
        self.stats.disk_bytes_written += RECORD_HEADER_LEN + pos.len;
        // The genesis is on disk in the log; its keys are in no index, only in the run. Should
        // the run fail, reads here would miss them: the store stops, and the next open
        // replays the record.
        if let Err(failure) = self.install_genesis_run(run, &tmp) {
            self.poison(failure, None);
        }
        Ok(())
    }

    fn sync(&mut self) -> StoreResult<()> {
        self.usable()?;
        if self.read_only {
            return Ok(());
        }
        let synced = self.finish_background().and_then(|()| {
            let segment = self.segments.back().expect("an active segment");
            let path = segment_path(&self.dir, segment.seq);
            segment.file.sync().at("syncing", &path)?;
            Ok((segment.seq, segment.size))
        });
        match synced {
            Ok((seq, end)) => {
                let head = self.head.clone();
                self.raise_durable(seq, end, head.as_ref());
                Ok(())
            }
            Err(failure) => Err(self.poison(failure, None)),
        }
    }

    fn entries(&self) -> StoreResult<Entries<'_>> {
        self.usable()?;
        let mut merger = Merger::new(self.run.as_ref(), &self.unmerged())?;
        Ok(Box::new(std::iter::from_fn(move || {
            let (mut key, mut value) = (Vec::new(), Vec::new());
            match merger.next_into(&mut key, &mut value) {
                Ok(true) => Some(Ok((key, value))),
                Ok(false) => None,
                Err(e) => Some(Err(e)),
            }
        })))
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

impl Drop for LogStore {
    fn drop(&mut self) {
        // A merge stops early (its temporary file is deleted at the next open).
        if let Some(merging) = self.merging.take() {
            merging.cancel.store(true, Ordering::Relaxed);
            let _ = merging.handle.join();
        }
        // A background sync finishes. No caller is left to tell if it failed, so the store
        // says so itself, after cutting off what may not be on disk.
        if let Err(failure) = self.finish_sync() {
            eprintln!("tally: {}", self.poison(failure, None));
        }
    }
}
