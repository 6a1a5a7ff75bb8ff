//! Reading the log store: point reads through the value cache and the index (or the run), the
//! block archive, and every entry in key order.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::block::BlockHeader;
use crate::store::{
    BlockArchive, BlockChanges, BlockRecord, Direction, Entries, KeyRange, StoreError, StoreResult,
    StoreStats, comes_before,
};

use super::cache::ValueCache;
use super::index::Loc;
use super::merge::Merger;
use super::record::{self, ChangeCursor, RECORD_HEADER_LEN, parse_header, read_change_at};
use super::run::BLOCK_BYTES;
use super::{LogStore, segment_path};

/// Shards of the value cache: reads take `&self` and may come from several threads at once
/// (parallel execution reads the store from every core), so each shard has its own lock.
const CACHE_SHARDS: usize = 32;

/// Bytes a block's change stream reads from its segment at a time.
const CHANGE_CHUNK: usize = 1 << 20;

/// What reads share: the value cache and the read counters (reads and the bytes they returned
/// are counted in each cache shard, under its lock).
pub(super) struct Reads {
    pub(super) shards: Vec<Mutex<ValueCache>>,
    pub(super) disk_bytes: AtomicU64,
    /// Deleted keys seeks passed over ([`StoreStats::seek_steps`]).
    seek_steps: AtomicU64,
}

impl Reads {
    pub(super) fn new(budget: usize) -> Self {
        Self {
            shards: (0..CACHE_SHARDS)
                .map(|_| Mutex::new(ValueCache::new(budget / CACHE_SHARDS)))
                .collect(),
            disk_bytes: AtomicU64::new(0),
            seek_steps: AtomicU64::new(0),
        }
    }

    pub(super) fn shard_of(hash: u64) -> usize {
        // The top bits: the index uses them for its shards too, the cache's sets the low ones.
        (hash >> 40) as usize % CACHE_SHARDS
    }

    pub(super) fn lock(&self, hash: u64) -> MutexGuard<'_, ValueCache> {
        self.shards[Self::shard_of(hash)]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn shard_mut(&mut self, hash: u64) -> &mut ValueCache {
        self.shards[Self::shard_of(hash)]
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
    }
}

impl LogStore {
    /// Counters of the store's work so far.
    pub(super) fn current_stats(&self) -> StoreStats {
        let (mut hits, mut gets, mut user_bytes, mut cache_bytes) = (0, 0, 0, 0);
        for shard in &self.reads.shards {
            let cache = shard.lock().unwrap_or_else(|e| e.into_inner());
            hits += cache.hits;
            // Every point read looks in the cache once: `read_into` is `ValueCache::get`'s
            // only caller.
            gets += cache.hits + cache.misses;
            user_bytes += cache.user_bytes;
            cache_bytes += cache.heap_bytes();
        }
        StoreStats {
            gets,
            user_bytes_read: user_bytes,
            disk_bytes_read: self.reads.disk_bytes.load(Ordering::Relaxed),
            seek_steps: self.reads.seek_steps.load(Ordering::Relaxed),
            cache_hits: hits,
            memory_bytes: (self.index.heap_bytes()
                + self.order.heap_bytes()
                + cache_bytes
                + self.run.as_ref().map_or(0, |r| r.heap_bytes())
                + self.masked.heap_bytes()) as u64,
            index_keys: self.index.len() as u64,
            index_bytes: self.index.heap_bytes() as u64,
            ordered_keys: self.order.len() as u64,
            order_bytes: self.order.heap_bytes() as u64,
            ..self.stats.clone()
        }
    }

    /// Reads `key` from the index (the log) or the run, filling the cache. Inlined: it is
    /// the whole of a point read ([`crate::StateStore::get`]), which it was part of before
    /// seeks shared it, and out of line it costs a get 17 more instructions (callgrind,
    /// `tally storebench --workload transfers --scale 0.001 --blocks 40`).
    #[inline(always)]
    pub(super) fn read(&self, key: &[u8]) -> StoreResult<Option<Vec<u8>>> {
        let mut value = Vec::new();
        Ok(self.read_into(key, &mut value)?.then_some(value))
    }

    /// [`LogStore::read`] into `out` (its bytes replaced by the value's; left empty if the key
    /// has none): whether the key has a value. A cached value is copied without allocating
    /// once `out` has grown to it. The read counters are kept in the shard, under the lock
    /// the cache lookup takes anyway: two atomic adds a read fewer.
    #[inline(always)]
    pub(super) fn read_into(&self, key: &[u8], out: &mut Vec<u8>) -> StoreResult<bool> {
        let hash = self.hasher.of(key);
        let reads = &self.reads;
        out.clear();
        {
            let mut cache = reads.lock(hash);
            if let Some(value) = cache.get(hash, key) {
                let present = value.is_some();
                out.extend_from_slice(value.unwrap_or_default());
                cache.user_bytes += (key.len() + out.len()) as u64;
                return Ok(present);
            }
        }
        // The key read back to confirm the index's candidate, into one buffer per thread: a
        // read that misses the value cache allocated one (and a chunk, now on the stack:
        // `read_change_at`).
        thread_local! {
            static KEY: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        let mut present = false;
        let mut read = 0;
        let found = KEY.with_borrow_mut(|k| {
            self.index.find(hash, |loc| {
                let file = self.segment_file(loc)?;
                let (p, n) = read_change_at(&**file, loc.offset(), k, out).map_err(|e| {
                    StoreError::corrupted(
                        segment_path(&self.dir, loc.seq()),
                        Some(loc.offset()),
                        format!("a change the index points at does not read: {e}"),
                    )
                })?;
                read += n;
                present = p;
                Ok::<_, StoreError>(*k == key)
            })
        })?;
        let loc = match found {
            // A deletion's change leaves `out` empty.
            Some(loc) => Some(loc),
            None => {
                out.clear();
                if let Some(run) = &self.run {
                    // One block buffer per thread, reused: parallel execution reads from
                    // every core.
                    thread_local! {
                        static BLOCK: std::cell::RefCell<Vec<u8>> =
                            const { std::cell::RefCell::new(Vec::new()) };
                    }
                    let (p, n) = BLOCK.with_borrow_mut(|block| {
                        let got = run.get(key, block, out);
                        // A block that held a large value (contract code) is not kept for
                        // the thread's lifetime.
                        if block.capacity() > 16 * BLOCK_BYTES {
                            *block = Vec::new();
                        }
                        got
                    })?;
                    read += n;
                    present = p;
                } else {
                    present = false;
                }
                None
            }
        };
        reads.disk_bytes.fetch_add(read, Ordering::Relaxed);
        let mut cache = reads.lock(hash);
        cache.put(hash, key, present.then_some(out.as_slice()), loc);
        cache.user_bytes += (key.len() + out.len()) as u64;
        Ok(present)
    }

    /// [`crate::StateStore::seek`]: the nearer of the run's first entry in range not
    /// deleted since the run, and the order's first live key in range. A key the order holds
    /// was changed since the run, so its value is read through the index (the cache first).
    /// A run entry nearer than any such key was not changed since the run (or was, and is
    /// live: the order then finds it too, and its value is read from the index): its value
    /// is current. Neither steps over deleted keys one by one (issue 23): the order's tiers
    /// and the run's mask skip them in logarithmic time.
    pub(super) fn seek_entry(
        &self,
        range: KeyRange<'_>,
        dir: Direction,
    ) -> StoreResult<Option<(Vec<u8>, Vec<u8>)>> {
        self.usable()?;
        // The last deleted key stepped over: the seek goes on past it. The order marks every
        // deleted key dead, so this happens only if it and the index disagree, which would be
        // a bug; the loop keeps the answer right even then.
        let mut past: Option<Vec<u8>> = None;
        loop {
            let range = match &past {
                Some(key) => range.past(key, dir),
                None => range,
            };
            let mut key = Vec::new();
            let changed = self.order.seek(range, dir, &mut key);
            let from_run = match &self.run {
                None => None,
                Some(run) => {
                    let (entry, cost) = run.seek_with(range, dir, &self.masked, |found| {
                        found
                            .filter(|(k, _)| !changed || comes_before(k, &key, dir))
                            .map(|(k, v)| (k.to_vec(), v.to_vec()))
                    })?;
                    self.reads
                        .disk_bytes
                        .fetch_add(cost.read, Ordering::Relaxed);
                    self.reads
                        .seek_steps
                        .fetch_add(cost.skipped, Ordering::Relaxed);
                    entry
                }
            };
            if from_run.is_some() || !changed {
                return Ok(from_run);
            }
            match self.read(&key)? {
                Some(value) => return Ok(Some((key, value))),
                None => {
                    self.reads.seek_steps.fetch_add(1, Ordering::Relaxed);
                    past = Some(key)
                }
            }
        }
    }

    pub(super) fn all_entries(&self) -> StoreResult<Entries<'_>> {
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

    fn header(&self, height: u64) -> StoreResult<Option<BlockHeader>> {
        self.usable()?;
        let Some(pos) = self.retained(height) else {
            return Ok(None);
        };
        // The payload's checksum was checked when the store opened (every record's is).
        let file = self.segment_file(Loc::new(pos.seq, pos.offset))?;
        let header = record::read_header(&**file, pos.offset, pos.len)
            .map_err(|e| pos.corrupt(&self.dir, format!("block {height}: {e}")))?;
        pos.holds(&self.dir, &header)?;
        Ok(Some(header))
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

    fn changes(&self, height: u64) -> StoreResult<Option<BlockChanges<'_>>> {
        self.usable()?;
        let Some(pos) = self.retained(height) else {
            return Ok(None);
        };
        // The payload's checksum was checked when the store opened (every record's is).
        let file = self.segment_file(Loc::new(pos.seq, pos.offset))?.clone();
        let corrupt = move |e: io::Error| pos.corrupt(&self.dir, format!("block {height}: {e}"));
        let (_, mut cursor) =
            ChangeCursor::new(file, pos.offset, pos.len, CHANGE_CHUNK).map_err(corrupt)?;
        let len = u64::from(cursor.remaining());
        let iter = std::iter::from_fn(move || {
            let (mut key, mut value) = (Vec::new(), Vec::new());
            match cursor.next_into(&mut key, &mut value) {
                Ok(None) => None,
                Ok(Some((_, present))) => Some(Ok((key, present.then_some(value)))),
                Err(e) => Some(Err(corrupt(e))),
            }
        });
        Ok(Some(BlockChanges {
            len,
            iter: Box::new(iter),
        }))
    }

    fn first_retained(&self) -> u64 {
        let first = self.blocks.front().map_or(0, |b| b.height);
        first
            .max(self.retain_from)
            .min(self.head.as_ref().map_or(0, |h| h.height))
    }
}
