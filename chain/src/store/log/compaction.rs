//! The log store's upkeep: merging the log into the next run on the merge worker, installing it,
//! sweeping merged keys out of the index, and deleting dead segments.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::block::BlockHeader;
use crate::store::error::Step;
use crate::store::{Poison, StateStore, StoreError, StoreResult};

use super::crash;
use super::index::{Loc, SHARDS};
use super::merge::{MergeBlock, MergeDone, MergeJob, run_merge};
use super::record::{FileReader, RECORD_HEADER_LEN, read_prefix};
use super::run::{KeptBlock, Run, RunMask};
use super::worker::{Pending, Priority, Worker};
use super::{BlockPos, LogStore, segment_path};

/// Most blocks one merge reads at once: each holds a 16 KiB buffer, so at most 16 MiB.
const MAX_MERGE_BLOCKS: usize = 1024;

/// How long one commit may spend dropping merged keys from the index before it leaves the
/// rest to the next commits.
pub(super) const SWEEP_BUDGET: Duration = Duration::from_millis(2);

/// A merge running on the merge worker.
pub(super) struct Merging {
    pub(super) handle: Pending<Result<Option<MergeDone>, Poison>>,
    /// Set to stop it early (the store is closing or stopping).
    pub(super) cancel: Arc<AtomicBool>,
}

/// After a merge: dropping merged keys from the index, shard by shard.
pub(super) struct Sweep {
    next_shard: usize,
    /// Index entries before this location are in the run.
    end: Loc,
}

impl LogStore {
    /// Stops a running merge early and waits for it, dropping what it did: its temporary file
    /// is deleted at the next open, and a run it renamed into place holds only blocks on disk.
    pub(super) fn stop_merge(&mut self) {
        if let Some(merging) = self.merging.take() {
            merging.cancel.store(true, Ordering::Relaxed);
            let _ = merging.handle.wait();
        }
    }

    /// Installs a finished merge, if one finished (never waits for one).
    pub(super) fn poll_merge(&mut self, wait: bool) -> Result<(), Poison> {
        let finished = self
            .merging
            .as_mut()
            .is_some_and(|m| wait || m.handle.is_done());
        if !finished {
            return Ok(());
        }
        let merging = self.merging.take().expect("checked");
        let done = merging.handle.wait().map_err(|_| {
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

    pub(super) fn install(&mut self, done: MergeDone) -> Result<(), Poison> {
        let started = Instant::now();
        let run = Arc::new(Run::open(&*self.vfs, &done.path).at("opening", &done.path)?);
        // The order's generations sealed at or below this run's head hold nothing the run
        // does not; what is left holds every key changed since, dead ones among them.
        self.order.merged(done.height);
        let old = self
            .set_run(run)
            .at("masking the deleted keys of", &done.path)?;
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

    /// Makes `run` the store's run, masking its entries of keys the order holds dead (deleted
    /// since: issue 23); returns the run it replaces. The masking costs a bloom probe per
    /// dead key and a block read per one the run holds: keys deleted while the merge that
    /// wrote `run` ran, each deletion paid for.
    pub(super) fn set_run(&mut self, run: Arc<Run>) -> StoreResult<Option<Arc<Run>>> {
        let mut mask = RunMask::new(run.block_count());
        let (mut kept, mut failed) = (KeptBlock::default(), None);
        self.order.for_each_dead(|key| {
            if failed.is_none() {
                match run.position(key, &mut kept) {
                    Ok((Some(at), _)) => mask.mask(at),
                    Ok((None, _)) => {}
                    Err(e) => failed = Some(e),
                }
            }
        });
        if let Some(e) = failed {
            return Err(e);
        }
        self.masked = mask;
        Ok(self.run.replace(run))
    }

    /// Drops merged keys from the index for a while; once all are gone, deletes dead
    /// segments.
    pub(super) fn sweep_step(&mut self, budget: Option<Duration>) -> Result<(), Poison> {
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
    pub(super) fn delete_dead_segments(&mut self) -> Result<(), Poison> {
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
    pub(super) fn maybe_merge(&mut self) -> Result<(), Poison> {
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
        // Keys changed from here on enter a new generation of the order, so that the one
        // this merge covers can go when it is installed.
        let through = self.head.as_ref().map_or(0, |h| h.height);
        let active = self.segments.back().expect("an active segment");
        self.order.seal(through, Loc::new(active.seq, active.size));
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
            let handle = Worker::get(&mut self.merge_worker, "tally-merge", Priority::Yielding)
                .at("starting the merge worker for", &self.dir)?
                .run(move || run_merge(job));
            self.merging = Some(Merging { handle, cancel });
        } else if let Some(done) = run_merge(job)? {
            self.install(done)?;
            self.sweep_step(None)?;
        }
        Ok(())
    }

    pub(super) fn block_header(&self, pos: &BlockPos) -> io::Result<BlockHeader> {
        let file = &self.segment(pos.seq).expect("a block's segment").file;
        let start = pos.offset + RECORD_HEADER_LEN;
        let mut reader = FileReader::new(&**file, start, start + pos.len, 256);
        read_prefix(&mut reader)?
            .map(|p| p.header)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "not a block record"))
    }

    /// Waits for a running merge and installs it, then finishes the index sweep, and the
    /// same for the order's merges (for tests and for closing).
    pub fn settle(&mut self) -> StoreResult<()> {
        self.usable()?;
        self.order.settle();
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

    /// The blocks above the run, as merge inputs.
    pub(super) fn unmerged(&self) -> Vec<MergeBlock> {
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
