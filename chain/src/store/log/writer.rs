//! Committing to the log store: one append per block, durable as its [`Durability`] says, and
//! what stops the store when a write or sync fails ([`Poison`]).

use std::io::{self, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use crate::block::BlockHeader;
use crate::store::error::Step;
use crate::store::{
    BlockRecord, ChangeSource, Commit, Durability, Poison, StoreError, StoreResult,
    collect_and_commit_genesis,
};

use super::compaction::SWEEP_BUDGET;
use super::crash;
use super::index::Loc;
use super::merge::run_path;
use super::record::{
    RECORD_HEADER_LEN, change_offsets, read_change_at, write_block_record,
    write_streamed_block_record,
};
use super::run::{Run, RunWriter};
use super::vfs::FileWriter;
use super::worker::{Pending, Priority, Worker};
use super::{
    BULK_GENESIS_CHANGES, BlockPos, FILE_HEADER_LEN, FORMAT_VERSION, LOG_MAGIC, LogStore, Segment,
    segment_path,
};

/// A background sync of the active segment, and what it makes durable.
pub(super) struct Syncing {
    handle: Pending<io::Result<()>>,
    seq: u64,
    /// The segment's length when the sync started.
    end: u64,
    /// The block it makes durable.
    head: BlockHeader,
}

/// What is known to be on disk: what a sync that returned, or a sealed segment, covers.
#[derive(Default)]
pub(super) struct Durable {
    /// The last block on disk.
    pub(super) head: Option<BlockHeader>,
    /// Bytes of the active segment on disk; anything after them may be only in the page cache.
    pub(super) active_len: u64,
}

fn check_changes(block: &BlockRecord) -> StoreResult<()> {
    if block.changes.is_strictly_sorted() {
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
    /// Whether this store may commit.
    pub(super) fn writable(&self) -> StoreResult<()> {
        if self.read_only {
            return Err(StoreError::ReadOnly);
        }
        self.usable()
    }

    /// Fails once a write or sync failed: nothing this process holds can be trusted then.
    pub(super) fn usable(&self) -> StoreResult<()> {
        match &self.poison {
            None => Ok(()),
            Some(poison) => Err(StoreError::Poisoned(Box::new(poison.clone()))),
        }
    }

    /// Whether block `height` is known to be on disk.
    pub(super) fn is_durable(&self, height: u64) -> bool {
        self.durable
            .head
            .as_ref()
            .is_some_and(|h| h.height >= height)
    }

    /// Notes that the active segment `seq` is on disk up to `end`, holding blocks up to
    /// `head`.
    pub(super) fn raise_durable(&mut self, seq: u64, end: u64, head: Option<&BlockHeader>) {
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
    pub(super) fn poison(&mut self, mut failure: Poison, attempted: Option<u64>) -> StoreError {
        if let Some(poison) = &self.poison {
            return StoreError::Poisoned(Box::new(poison.clone()));
        }
        // A background sync that succeeded still counts; one that failed is cut off below.
        let _ = self.finish_sync();
        // A merge writes only its own run, of blocks on disk: stopped or finished, it leaves
        // nothing the cut must take back.
        self.stop_merge();
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
    pub(super) fn cut_back(&self) -> io::Result<()> {
        let Some(segment) = self.segments.back() else {
            return Ok(());
        };
        if segment.file.len()? <= self.durable.active_len {
            return Ok(());
        }
        segment.file.set_len(self.durable.active_len)?;
        segment.file.sync()
    }

    pub(super) fn segment_header() -> Vec<u8> {
        let mut h = LOG_MAGIC.to_vec();
        h.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        h
    }

    pub(super) fn new_segment(&mut self, seq: u64) -> Result<(), Poison> {
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

    /// Points `key` at its change at `loc` in the index and the cache, and notes it for the
    /// order (a block's keys are noted in increasing order; [`super::order::Order::flush`]
    /// adds them).
    pub(super) fn index_change(
        &mut self,
        key: &[u8],
        value: Option<&[u8]>,
        loc: Loc,
    ) -> StoreResult<()> {
        let hash = self.hasher.of(key);
        let (segments, dir) = (&self.segments, &self.dir);
        let cache = self.reads.shard_mut(hash);
        let mut scratch = (Vec::new(), Vec::new());
        let mut read = 0;
        let previous = self.index.insert(hash, loc, |old| {
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
        self.order.note(key, hash, previous, value.is_some());
        // A run entry deleted since the run is masked, so that seeks skip it without reading
        // it (issue 23). Deletions pay for the run block this reads; puts read nothing.
        if value.is_none()
            && let Some(run) = &self.run
        {
            let (at, n) = run.position(key, &mut self.deleting)?;
            read += n;
            if let Some(at) = at {
                self.masked.mask(at);
            }
        }
        *self.reads.disk_bytes.get_mut() += read;
        Ok(())
    }

    /// Waits for the background sync of the last block, if any.
    pub(super) fn finish_sync(&mut self) -> Result<(), Poison> {
        let Some(syncing) = self.syncing.take() else {
            return Ok(());
        };
        let path = segment_path(&self.dir, syncing.seq);
        match syncing.handle.wait() {
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
    pub(super) fn finish_background(&mut self) -> Result<(), Poison> {
        self.finish_sync()?;
        self.poll_merge(false)
    }

    /// Appends `block`'s record to the active segment, durable as `durability` says: synced
    /// now, or a sync started in the background.
    pub(super) fn append(
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
        let len = write_block_record(block, retain_from, &mut out, &mut self.record)
            .and_then(|len| out.flush().map(|()| len).map_err(StoreError::from))
            .at(&format!("appending block {height} to"), &path)?;
        segment.size += RECORD_HEADER_LEN + len;
        segment.max_height = Some(height);
        let (file, end) = (segment.file.clone(), segment.size);
        match durability {
            Durability::Immediate => {
                crash::io_point("block-sync")
                    .and_then(|()| file.sync())
                    .at("syncing", &path)?;
                self.raise_durable(seq, end, Some(&block.header));
            }
            Durability::Background => {
                let worker = Worker::get(&mut self.sync_worker, "tally-sync", Priority::Normal)
                    .at("starting the sync worker for", &path)?;
                let handle =
                    worker.run(move || crash::io_point("block-sync").and_then(|()| file.sync()));
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
    pub(super) fn after_append(
        &mut self,
        block: BlockRecord,
        pos: BlockPos,
        retain_from: u64,
    ) -> Result<(), Poison> {
        let path = segment_path(&self.dir, pos.seq);
        let user_bytes = block.changes.byte_len() as u64;
        for ((key, value), at) in block.changes.iter().zip(change_offsets(&block)) {
            self.index_change(key, value, Loc::new(pos.seq, pos.offset + at))
                .at("indexing a change in", &path)?;
        }
        self.order.flush();
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
    pub(super) fn append_genesis(
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
        let height = block.header.height;
        let len = write_streamed_block_record(block, changes, height, &mut out, &mut |k, v| {
            user_bytes += (k.len() + v.map_or(0, <[u8]>::len)) as u64;
            match v {
                Some(v) => run.add(k, v),
                None => Ok(()),
            }
        })
        .and_then(|len| out.flush().map(|()| len).map_err(StoreError::from))
        .at("appending the first block to", &path)?;
        segment.size += RECORD_HEADER_LEN + len;
        segment.max_height = Some(height);
        let (file, end) = (segment.file.clone(), segment.size);
        file.sync().at("syncing", &path)?;
        self.raise_durable(seq, end, Some(&block.header));
        let pos = BlockPos {
            height,
            seq,
            offset,
            len,
        };
        Ok((pos, run, user_bytes))
    }

    /// Finishes a genesis's run at `tmp`, syncs it and renames it into place.
    pub(super) fn install_genesis_run(
        &mut self,
        run: RunWriter,
        tmp: &Path,
        height: u64,
    ) -> Result<(), Poison> {
        let path = run_path(&self.dir, height);
        let (file, run_bytes) = run.finish().at("writing", tmp)?;
        file.sync().at("syncing", tmp)?;
        self.vfs.rename(tmp, &path).at("renaming", tmp)?;
        self.vfs
            .sync_dir(&self.dir)
            .at("syncing the directory", &self.dir)?;
        let run = Arc::new(Run::open(&*self.vfs, &path).at("opening", &path)?);
        self.set_run(run).at("masking the deleted keys of", &path)?;
        self.stats.disk_bytes_written += run_bytes;
        Ok(())
    }

    pub(super) fn note_pause(&mut self, started: Instant) {
        let ms = started.elapsed().as_secs_f64() * 1e3;
        self.stats.longest_pause_ms = self.stats.longest_pause_ms.max(ms);
    }

    pub(super) fn commit_block(&mut self, block: BlockRecord, commit: Commit) -> StoreResult<()> {
        self.writable()?;
        let height = block.header.height;
        let expected = match (&self.head, self.run_height()) {
            (Some(head), _) => head.height + 1,
            // A restored snapshot's base: its run is in place, its record comes next.
            (None, Some(run)) => run,
            (None, None) => 0,
        };
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
    pub(super) fn commit_streamed_genesis(
        &mut self,
        block: BlockRecord,
        changes: &dyn ChangeSource,
        commit: Commit,
    ) -> StoreResult<()> {
        let height = block.header.height;
        if height > 0 {
            return self.commit_base(block, changes, commit);
        }
        if changes.len() < BULK_GENESIS_CHANGES {
            return collect_and_commit_genesis(self, block, changes, commit);
        }
        self.writable()?;
        if self.head.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a genesis is committed as block 0 of an empty store",
            )
            .into());
        }
        let tmp = run_path(&self.dir, height).with_extension("tmp");
        let (pos, run, user_bytes) = match self.append_genesis(&block, changes, &tmp) {
            Ok(logged) => logged,
            Err(failure) => {
                let _ = self.vfs.remove(&tmp);
                return Err(self.poison(failure, Some(height)));
            }
        };
        crash::point("genesis-logged");
        self.blocks.push_back(pos);
        self.head = Some(block.header);
        self.retain_from = height;
        self.stats.commits += 1;
        self.stats.user_bytes_written += user_bytes;
        self.stats.disk_bytes_written += RECORD_HEADER_LEN + pos.len;
        // The genesis is on disk in the log; its keys are in no index, only in the run. Should
        // the run fail, reads here would miss them: the store stops, and the next open
        // replays the record.
        if let Err(failure) = self.install_genesis_run(run, &tmp, height) {
            self.poison(failure, None);
        }
        Ok(())
    }

    /// A restored snapshot's base (block `S` above 0, with the whole state at `S`) is written
    /// once: to a run, synced and renamed into place, and only then the block's record,
    /// without changes, to the log. At every moment a crash leaves either an empty store or
    /// the whole state at `S` (a run and no record opens at the run), never part of it; and
    /// the state is not written twice, which for 10M accounts is 580 MB saved.
    fn commit_base(
        &mut self,
        mut block: BlockRecord,
        changes: &dyn ChangeSource,
        commit: Commit,
    ) -> StoreResult<()> {
        self.writable()?;
        let height = block.header.height;
        if self.head.is_some() || self.run.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a snapshot's base is committed as the first block of an empty store",
            )
            .into());
        }
        let tmp = run_path(&self.dir, height).with_extension("tmp");
        let written = self.vfs.create(&tmp).at("creating", &tmp).and_then(|file| {
            let mut run =
                RunWriter::with_entries(file, &block.header, changes.len()).at("writing", &tmp)?;
            changes
                .for_each(&mut |k, v| match v {
                    Some(v) => run.add(k, v),
                    None => Ok(()),
                })
                .at("writing", &tmp)?;
            Ok(run)
        });
        let run = match written {
            Ok(run) => run,
            Err(failure) => {
                let _ = self.vfs.remove(&tmp);
                return Err(self.poison(failure, None));
            }
        };
        if let Err(failure) = self.install_genesis_run(run, &tmp, height) {
            return Err(self.poison(failure, None));
        }
        crash::point("base-run-installed");
        block.changes.clear();
        self.commit_block(block, commit)
    }

    pub(super) fn sync_log(&mut self) -> StoreResult<()> {
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
}

impl Drop for LogStore {
    fn drop(&mut self) {
        self.stop_merge();
        // A background sync finishes. No caller is left to tell if it failed, so the store
        // says so itself, after cutting off what may not be on disk.
        if let Err(failure) = self.finish_sync() {
            eprintln!("tally: {}", self.poison(failure, None));
        }
    }
}
