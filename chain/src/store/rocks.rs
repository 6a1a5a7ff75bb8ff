//! The `rocksdb` store (cargo feature `rocksdb`): the reference backend.
//!
//! Three column families: `state` (the live state), `blocks` (height, big-endian → borsh of
//! the retained [`BlockRecord`]) and `meta` (`head` → borsh of the head header). One block
//! commit is one `WriteBatch` (state changes + the block + the pruned blocks + the head), so a
//! block is never half there; [`Durability::Immediate`] (and `Background`, which RocksDB
//! cannot overlap) writes it with `sync`, `None` without.
//!
//! Settings ([`Tuning`]), chosen per workload so that comparisons with the log store are fair
//! (each with its reason):
//! - **all**: bloom filters of 10 bits per key on `state` (about 1% false positives, RocksDB's
//!   usual setting): a read of an absent key, or of a key in a lower level, costs no disk
//!   read; index and filter blocks live in the block cache, so memory stays bounded; 64 MiB
//!   memtables, three of them, so a flush never blocks writes; level compaction with dynamic
//!   level sizes (RocksDB's recommended default, lowest space amplification); two background
//!   jobs, one per core here; statistics on, for the amplification counters.
//! - [`Tuning::Chain`] (what `tally` itself uses): a 256 MiB block cache and LZ4 (block bodies
//!   compress).
//! - [`Tuning::Transfers`]: a 256 MiB block cache; no compression (8- and 32-byte values are
//!   random); a hash index inside data blocks (faster point lookups, RocksDB's
//!   `kDataBlockBinaryAndHash`); a memtable bloom filter, since the hot Zipf accounts are
//!   read right after they were written.
//! - [`Tuning::Griffin`]: a 512 MiB block cache (the log store's index holds about as much
//!   for 50M keys); no compression (random values); `optimize_filters_for_hits`, since every
//!   get finds its key: no filter on the last level, whose filter would only cost memory.
//! - [`Tuning::Iavl`]: values average 12 KiB with a long tail, so blob files (RocksDB's
//!   key-value separation, as WiscKey and GriffinDB do) for values of 4 KiB or more, with
//!   blob garbage collection; a 256 MiB block cache; no compression (random values).
//!
//! Deleted keys (issue 23): RocksDB keeps a deletion as a tombstone until a compaction drops
//! it, and an iterator steps over tombstones one by one, which a seek cannot be charged for
//! (how many there are differs by backend). So a table whose entries are mostly deletions is
//! marked for compaction as it is written ([`TOMBSTONE_WINDOW`], [`TOMBSTONE_TRIGGER`],
//! [`TOMBSTONE_RATIO`]), and a seek of a writable store steps over at most
//! [`SEEK_SKIP_LIMIT`] tombstones: past that, RocksDB stops it (`Incomplete`), the store
//! compacts the rest of its range (dropping the tombstones there) and seeks again. Each
//! tombstone is compacted away once; it is never stepped over by every later walk. A
//! read-only open cannot compact: it steps over them, as before.
//!
//! Locking: RocksDB's own `LOCK` file keeps a second writer out; its error becomes
//! [`StoreError::Locked`]. [`RocksStore::open_read_only`] takes no lock and writes nothing:
//! RocksDB's read-only mode reads the state as of the last write that finished, even while
//! a writer goes on.

use std::borrow::Cow;
use std::ops::Bound;
use std::path::{Path, PathBuf};

use rocksdb::statistics::Ticker;
use rocksdb::{
    BlockBasedOptions, BottommostLevelCompaction, Cache, ColumnFamilyDescriptor, CompactOptions,
    DB, DBCompressionType, DBRawIteratorWithThreadMode, DataBlockIndexType, IteratorMode, Options,
    ReadOptions, WriteBatch, WriteOptions,
};

use crate::block::BlockHeader;
use crate::store::{
    BlockArchive, BlockRecord, Commit, Direction, Durability, Entries, KeyRange, StateStore,
    StoreError, StoreResult, StoreStats,
};

/// Tombstones (and older versions) one seek steps over before the store compacts the rest
/// of its range: RocksDB steps over one in about 0.1–2 µs (in the memtable or a cached
/// block, or a block read from disk), so about a millisecond at most, while a range that
/// honest deletions leave tombstones in is compacted rarely.
pub const SEEK_SKIP_LIMIT: u64 = 1_000;

/// The deletion-triggered compaction collector's window of consecutive entries in a table,
/// and the deletions in one window that mark the table for compaction: half of them.
/// (RocksDB's `NewCompactOnDeletionCollector`; its tests use windows of this order.)
pub const TOMBSTONE_WINDOW: usize = 1_000;
/// See [`TOMBSTONE_WINDOW`].
pub const TOMBSTONE_TRIGGER: usize = 500;
/// A table at least this share of whose entries are deletions is marked for compaction too.
pub const TOMBSTONE_RATIO: f64 = 0.5;

const STATE: &str = "state";
const BLOCKS: &str = "blocks";
const META: &str = "meta";
const HEAD: &[u8] = b"head";

/// RocksDB settings for a workload (see the module docs for each one's reasons).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Tuning {
    /// What the chain uses.
    #[default]
    Chain,
    /// `tally storebench --workload transfers`.
    Transfers,
    /// `tally storebench --workload griffin`.
    Griffin,
    /// `tally storebench --workload iavl`.
    Iavl,
}

/// A RocksDB error of the store in `dir`, by kind.
fn store_err(dir: &Path, writing: bool, e: rocksdb::Error) -> StoreError {
    match e.kind() {
        rocksdb::ErrorKind::Corruption => StoreError::corrupted(dir, None, e.into_string()),
        // RocksDB says so only in its message, in one of two forms: another process holds
        // the lock ("While lock file: <dir>/LOCK: Resource temporarily unavailable"), or this
        // one does ("lock hold by current process, acquire time ...: <dir>/LOCK: No locks
        // available").
        rocksdb::ErrorKind::IOError if is_lock_message(e.as_ref()) => StoreError::Locked {
            dir: dir.to_path_buf(),
            writing,
        },
        _ => StoreError::Io(std::io::Error::other(e.into_string())),
    }
}

/// Whether a RocksDB I/O error message says the store's `LOCK` is held, by this process or
/// another.
fn is_lock_message(message: &str) -> bool {
    message.contains("lock file") || message.contains("lock hold by current process")
}

/// The RocksDB store.
pub struct RocksStore {
    db: DB,
    options: Options,
    head: Option<BlockHeader>,
    retain: u64,
    first_retained: u64,
    dir: PathBuf,
    read_only: bool,
    user_bytes_written: u64,
    commits: u64,
}

impl RocksStore {
    /// Opens (or creates) the store in `dir` for writing, keeping at most `retain` blocks
    /// (and fewer if commits ask). Fails with [`StoreError::Locked`] while another process
    /// has it open for writing.
    pub fn open(dir: impl AsRef<Path>, retain: u64) -> StoreResult<Self> {
        Self::open_with(dir.as_ref(), retain, false, Tuning::Chain)
    }

    /// [`RocksStore::open`] with settings for a benchmark workload, keeping only what commits
    /// ask.
    pub fn open_tuned(dir: impl AsRef<Path>, tuning: Tuning) -> StoreResult<Self> {
        Self::open_with(dir.as_ref(), u64::MAX, false, tuning)
    }

    /// Opens the store in `dir` for reading only: nothing in `dir` is created or changed, and
    /// a writer may keep running meanwhile.
    pub fn open_read_only(dir: impl AsRef<Path>) -> StoreResult<Self> {
        let dir = dir.as_ref();
        if !dir.join("CURRENT").is_file() {
            return Err(StoreError::Missing {
                dir: dir.to_path_buf(),
            });
        }
        Self::open_with(dir, u64::MAX, true, Tuning::Chain)
    }

    fn open_with(dir: &Path, retain: u64, read_only: bool, tuning: Tuning) -> StoreResult<Self> {
        let dir = dir.to_path_buf();
        let mut other = Options::default();
        other.set_compression_type(DBCompressionType::Lz4);
        let db_opts = db_options(read_only);
        let cfs = vec![
            ColumnFamilyDescriptor::new(STATE, state_options(tuning)),
            ColumnFamilyDescriptor::new(BLOCKS, other.clone()),
            ColumnFamilyDescriptor::new(META, other),
        ];
        let err = |e| store_err(&dir, !read_only, e);
        let db = if read_only {
            DB::open_cf_descriptors_read_only(&db_opts, &dir, cfs, false).map_err(err)?
        } else {
            DB::open_cf_descriptors(&db_opts, &dir, cfs).map_err(err)?
        };
        let head = match db
            .get_cf(db.cf_handle(META).expect("meta cf"), HEAD)
            .map_err(err)?
        {
            Some(bytes) => Some(borsh::from_slice(&bytes).map_err(|e| {
                StoreError::corrupted(&dir, None, format!("the head record does not decode: {e}"))
            })?),
            None => None,
        };
        let first_retained = first_block(&db, &dir).map_err(|e| match e {
            FirstBlock::Db(e) => err(e),
            FirstBlock::Corrupt(e) => e,
        })?;
        Ok(Self {
            db,
            options: db_opts,
            head,
            retain: retain.max(1),
            first_retained,
            dir,
            read_only,
            user_bytes_written: 0,
            commits: 0,
        })
    }

    fn err(&self, e: rocksdb::Error) -> StoreError {
        store_err(&self.dir, !self.read_only, e)
    }

    /// A raw iterator over the state, bounded to `range` (so that it stops at the range's end
    /// instead of stepping over deletions past it) and positioned at the first entry of
    /// `range` walking `dir`, if any. A writable store's iterator steps over at most
    /// [`SEEK_SKIP_LIMIT`] tombstones a seek: past them, the rest of the range is compacted
    /// and the seek made again (see the module docs).
    fn positioned(
        &self,
        range: KeyRange<'_>,
        dir: Direction,
    ) -> StoreResult<DBRawIteratorWithThreadMode<'_, DB>> {
        let iter = self.positioned_skipping(range, dir, !self.read_only);
        match iter.status() {
            Err(e) if e.kind() == rocksdb::ErrorKind::Incomplete => {
                // Dropped first: an iterator keeps the tables it reads.
                drop(iter);
                self.compact(range);
                Ok(self.positioned_skipping(range, dir, false))
            }
            _ => Ok(iter),
        }
    }

    /// Compacts the state in `range` (flushing the memtable first if it overlaps it),
    /// dropping its tombstones.
    fn compact(&self, range: KeyRange<'_>) {
        let (lower, upper) = rocks_bounds(range);
        let cf = self.db.cf_handle(STATE).expect("state cf");
        let mut options = CompactOptions::default();
        // Down to the last level, where a tombstone is dropped, even if no compaction filter
        // asks for it.
        options.set_bottommost_level_compaction(BottommostLevelCompaction::Force);
        self.db.compact_range_cf_opt(cf, lower, upper, &options);
    }

    /// [`RocksStore::positioned`], stepping over at most [`SEEK_SKIP_LIMIT`] tombstones if
    /// `bounded`.
    fn positioned_skipping(
        &self,
        range: KeyRange<'_>,
        dir: Direction,
        bounded: bool,
    ) -> DBRawIteratorWithThreadMode<'_, DB> {
        let (lower, upper) = rocks_bounds(range);
        let mut options = ReadOptions::default();
        if bounded {
            options.set_max_skippable_internal_keys(SEEK_SKIP_LIMIT);
        }
        if let Some(lower) = &lower {
            options.set_iterate_lower_bound(lower.clone());
        }
        if let Some(upper) = &upper {
            options.set_iterate_upper_bound(upper.clone());
        }
        let cf = self.db.cf_handle(STATE).expect("state cf");
        let mut iter = self.db.raw_iterator_cf_opt(cf, options);
        if range.is_empty() {
            // Left unpositioned: not valid, so it finds nothing.
            return iter;
        }
        match (dir, &lower, &upper) {
            (Direction::Forward, Some(lower), _) => iter.seek(lower),
            (Direction::Forward, None, _) => iter.seek_to_first(),
            (Direction::Backward, _, Some(upper)) => {
                // At or below its target, which the exclusive bound leaves out.
                iter.seek_for_prev(upper);
                if iter.key() == Some(upper.as_slice()) {
                    iter.prev();
                }
            }
            (Direction::Backward, _, None) => iter.seek_to_last(),
        }
        iter
    }
}

impl BlockArchive for RocksStore {
    fn head(&self) -> Option<&BlockHeader> {
        self.head.as_ref()
    }

    fn block(&self, height: u64) -> StoreResult<Option<BlockRecord>> {
        let cf = self.db.cf_handle(BLOCKS).expect("blocks cf");
        match self
            .db
            .get_cf(cf, height.to_be_bytes())
            .map_err(|e| self.err(e))?
        {
            Some(bytes) => Ok(Some(borsh::from_slice(&bytes).map_err(|e| {
                StoreError::corrupted(
                    &self.dir,
                    None,
                    format!("block {height} does not decode: {e}"),
                )
            })?)),
            None => Ok(None),
        }
    }

    fn first_retained(&self) -> u64 {
        self.first_retained
    }
}

impl StateStore for RocksStore {
    fn get(&self, key: &[u8]) -> StoreResult<Option<Cow<'_, [u8]>>> {
        let cf = self.db.cf_handle(STATE).expect("state cf");
        Ok(self
            .db
            .get_cf(cf, key)
            .map_err(|e| self.err(e))?
            .map(Cow::Owned))
    }

    fn get_in<'a>(&'a self, key: &[u8], scratch: &'a mut Vec<u8>) -> StoreResult<Option<&'a [u8]>> {
        let cf = self.db.cf_handle(STATE).expect("state cf");
        // Pinned: copied once, from RocksDB's block into the buffer, without an allocation.
        let Some(value) = self.db.get_pinned_cf(cf, key).map_err(|e| self.err(e))? else {
            return Ok(None);
        };
        scratch.clear();
        scratch.extend_from_slice(&value);
        Ok(Some(scratch.as_slice()))
    }

    fn commit(&mut self, block: BlockRecord, commit: Commit) -> StoreResult<()> {
        if self.read_only {
            return Err(StoreError::ReadOnly);
        }
        let (state, blocks, meta) = (
            self.db.cf_handle(STATE).expect("state cf"),
            self.db.cf_handle(BLOCKS).expect("blocks cf"),
            self.db.cf_handle(META).expect("meta cf"),
        );
        let height = block.header.height;
        let mut batch = WriteBatch::default();
        let user_bytes = block.changes.byte_len() as u64;
        for (k, v) in &block.changes {
            match v {
                Some(v) => batch.put_cf(state, k, v),
                None => batch.delete_cf(state, k),
            }
        }
        batch.put_cf(blocks, height.to_be_bytes(), borsh::to_vec(&block)?);
        let first = commit
            .retain_from
            .max((height + 1).saturating_sub(self.retain))
            .min(height);
        for old in self.first_retained..first {
            batch.delete_cf(blocks, old.to_be_bytes());
        }
        batch.put_cf(meta, HEAD, borsh::to_vec(&block.header)?);
        let mut options = WriteOptions::default();
        options.set_sync(commit.durability != Durability::None);
        self.db
            .write_opt(batch, &options)
            .map_err(|e| self.err(e))?;
        self.first_retained = first.max(self.first_retained);
        self.head = Some(block.header.clone());
        self.user_bytes_written += user_bytes;
        self.commits += 1;
        Ok(())
    }

    fn sync(&mut self) -> StoreResult<()> {
        if self.read_only {
            return Ok(());
        }
        self.db.flush_wal(true).map_err(|e| self.err(e))
    }

    fn entries(&self) -> StoreResult<Entries<'_>> {
        let cf = self.db.cf_handle(STATE).expect("state cf");
        Ok(Box::new(self.db.iterator_cf(cf, IteratorMode::Start).map(
            |kv| {
                kv.map(|(k, v)| (k.into_vec(), v.into_vec()))
                    .map_err(|e| self.err(e))
            },
        )))
    }

    fn seek(&self, range: KeyRange<'_>, dir: Direction) -> StoreResult<Option<(Vec<u8>, Vec<u8>)>> {
        let iter = self.positioned(range, dir)?;
        let found = iter.item().map(|(k, v)| (k.to_vec(), v.to_vec()));
        iter.status().map_err(|e| self.err(e))?;
        Ok(found)
    }

    /// One RocksDB iterator for the whole walk, rather than a seek per entry. A step that
    /// meets more than [`SEEK_SKIP_LIMIT`] tombstones compacts the rest of the range and goes
    /// on past the last entry with a new iterator, as a seek does.
    fn range(&self, range: KeyRange<'_>, dir: Direction) -> StoreResult<Entries<'_>> {
        // `None` once the walk is over.
        let mut iter = Some(self.positioned(range, dir)?);
        let mut last: Option<Vec<u8>> = None;
        // The walk outlives `range`'s borrow: its bounds, owned, for a new seek.
        let (lo, hi) = (range.lo.map(<[u8]>::to_vec), range.hi.map(<[u8]>::to_vec));
        Ok(Box::new(std::iter::from_fn(move || {
            if let Err(e) = iter.as_ref()?.status()
                && e.kind() == rocksdb::ErrorKind::Incomplete
            {
                // Dropped first: an iterator keeps the tables it reads.
                iter = None;
                let range = KeyRange::new(
                    lo.as_ref().map(Vec::as_slice),
                    hi.as_ref().map(Vec::as_slice),
                );
                let rest = match &last {
                    Some(key) => range.past(key, dir),
                    None => range,
                };
                // This step met them: compacted now, not met again by a bounded seek first.
                self.compact(rest);
                iter = Some(self.positioned_skipping(rest, dir, false));
            }
            let it = iter.as_mut()?;
            let item = it.item().map(|(k, v)| (k.to_vec(), v.to_vec()));
            if let Err(e) = it.status() {
                iter = None;
                return Some(Err(self.err(e)));
            }
            let Some(item) = item else {
                iter = None;
                return None;
            };
            last = Some(item.0.clone());
            match dir {
                Direction::Forward => it.next(),
                Direction::Backward => it.prev(),
            }
            Some(Ok(item))
        })))
    }

    fn disk_bytes(&self) -> u64 {
        fs_size(&self.dir)
    }

    fn kind(&self) -> &'static str {
        "rocksdb"
    }

    fn stats(&self) -> StoreStats {
        let t = |ticker| self.options.get_ticker_count(ticker);
        StoreStats {
            commits: self.commits,
            user_bytes_written: self.user_bytes_written,
            disk_bytes_written: t(Ticker::WalFileBytes)
                + t(Ticker::FlushWriteBytes)
                + t(Ticker::CompactWriteBytes),
            gets: t(Ticker::NumberKeysRead),
            cache_hits: t(Ticker::BlockCacheHit),
            user_bytes_read: t(Ticker::BytesRead),
            // Blocks brought into the cache: read from the files (or the OS page cache).
            disk_bytes_read: t(Ticker::BlockCacheBytesWrite),
            background_bytes_read: t(Ticker::CompactReadBytes),
            longest_pause_ms: 0.0,
            ..StoreStats::default()
        }
    }
}

/// `range` as RocksDB's bounds: an inclusive lower and an exclusive upper one (the least key
/// above `k` is `k` followed by a zero byte).
fn rocks_bounds(range: KeyRange<'_>) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
    let after = |k: &[u8]| [k, &[0]].concat();
    let lower = match range.lo {
        Bound::Included(lo) => Some(lo.to_vec()),
        Bound::Excluded(lo) => Some(after(lo)),
        Bound::Unbounded => None,
    };
    let upper = match range.hi {
        Bound::Included(hi) => Some(after(hi)),
        Bound::Excluded(hi) => Some(hi.to_vec()),
        Bound::Unbounded => None,
    };
    (lower, upper)
}

/// The state column family's options for `tuning`: its block cache, bloom filters and
/// compression.
fn state_options(tuning: Tuning) -> Options {
    let cache_mib = match tuning {
        Tuning::Griffin => 512,
        _ => 256,
    };
    let cache = Cache::new_lru_cache(cache_mib << 20);
    let mut table = BlockBasedOptions::default();
    table.set_block_cache(&cache);
    table.set_bloom_filter(10.0, false);
    table.set_cache_index_and_filter_blocks(true);
    table.set_pin_l0_filter_and_index_blocks_in_cache(true);
    if tuning == Tuning::Transfers {
        table.set_data_block_index_type(DataBlockIndexType::BinaryAndHash);
    }
    let mut state = Options::default();
    state.set_block_based_table_factory(&table);
    state.set_write_buffer_size(64 << 20);
    state.set_max_write_buffer_number(3);
    state.set_level_compaction_dynamic_level_bytes(true);
    // Tables written mostly of deletions are compacted soon, so that their tombstones go
    // (issue 23).
    state.add_compact_on_deletion_collector_factory(
        TOMBSTONE_WINDOW,
        TOMBSTONE_TRIGGER,
        TOMBSTONE_RATIO,
    );
    state.set_compression_type(match tuning {
        Tuning::Chain => DBCompressionType::Lz4,
        _ => DBCompressionType::None,
    });
    match tuning {
        Tuning::Transfers => {
            state.set_memtable_prefix_bloom_ratio(0.1);
            state.set_memtable_whole_key_filtering(true);
        }
        Tuning::Griffin => state.set_optimize_filters_for_hits(true),
        Tuning::Iavl => {
            state.set_enable_blob_files(true);
            state.set_min_blob_size(4096);
            state.set_enable_blob_gc(true);
        }
        Tuning::Chain => {}
    }
    state
}

/// The database's options: created if missing unless `read_only`, background work on every
/// core, statistics on (for [`StateStore::stats`]).
fn db_options(read_only: bool) -> Options {
    let mut db_opts = Options::default();
    db_opts.create_if_missing(!read_only);
    db_opts.create_missing_column_families(!read_only);
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get()) as i32;
    db_opts.increase_parallelism(cores);
    db_opts.set_max_background_jobs(cores);
    db_opts.enable_statistics();
    db_opts
}

/// Why the first retained block could not be found.
enum FirstBlock {
    Db(rocksdb::Error),
    Corrupt(StoreError),
}

/// The height of the first block `db` holds, or 0 for none.
fn first_block(db: &DB, dir: &Path) -> Result<u64, FirstBlock> {
    let Some((key, _)) = db
        .iterator_cf(
            db.cf_handle(BLOCKS).expect("blocks cf"),
            IteratorMode::Start,
        )
        .next()
        .transpose()
        .map_err(FirstBlock::Db)?
    else {
        return Ok(0);
    };
    key.get(..8)
        .and_then(|k| k.try_into().ok())
        .map(u64::from_be_bytes)
        .ok_or_else(|| {
            FirstBlock::Corrupt(StoreError::corrupted(
                dir,
                None,
                "a block key is not 8 bytes",
            ))
        })
}

fn fs_size(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok()?.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_of_rocksdbs_lock_messages_are_recognised() {
        // Verbatim from RocksDB 10: another process holds the lock, then this one does.
        assert!(is_lock_message(
            "IO error: While lock file: /tmp/x/LOCK: Resource temporarily unavailable"
        ));
        assert!(is_lock_message(
            "IO error: lock hold by current process, acquire time 1795379650 acquiring thread \
             13231: /tmp/x/LOCK: No locks available"
        ));
        assert!(!is_lock_message("IO error: No space left on device"));
    }
}
