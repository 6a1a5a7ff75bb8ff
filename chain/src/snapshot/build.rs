//! Building snapshots beside block execution.
//!
//! The chain hands every committed block's changes to the [`Snapshotter`]. At a snapshot
//! height `S` a thread merges the newest state file (the base) with the changes of the blocks
//! above it up to `S` into the state file of `S`, while blocks go on; block `T = S + delay`
//! takes its digest (waiting only if the merge is not done), and once `T` is committed the
//! snapshot is published with the blocks `S..=T`.
//!
//! The changes wait on disk, not in memory ([`super::spill`]). After a restart they are read
//! back from the block archive, which the chain keeps from the base up
//! ([`Snapshotter::retain_floor`]). A node with no usable base (its first start, or a lost
//! snapshot directory) writes one from the store's entries.

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::block::{BlockHeader, BlockId};
use crate::store::{BlockRecord, Changes, StateStore};

use super::file::{StateIndex, StateWriter, for_each_entry};
use super::spill::{Mark, Spill, SpillFile};
use super::{Manifest, SnapshotError, SnapshotRef, SnapshotSchedule, SnapshotStore, TailBlock};

/// The merge of the state file of `height`: on its own thread, or done already (where no
/// thread could be started, it ran on the chain's: slower, never a fault).
struct Job {
    height: u64,
    run: Run,
}

enum Run {
    Thread(JoinHandle<Result<StateIndex, SnapshotError>>),
    Done(Result<StateIndex, SnapshotError>),
}

/// The chain's side of snapshots (see the module docs).
pub(crate) struct Snapshotter {
    store: Arc<SnapshotStore>,
    schedule: SnapshotSchedule,
    /// The height of the newest complete state file.
    base: u64,
    /// The changes of the committed blocks above `base` not yet handed to a merge, in order.
    pending: Spill,
    job: Option<Job>,
}

impl Snapshotter {
    /// Takes up snapshots for a chain whose head is `head` in `store`.
    pub(crate) fn open(
        snapshots: Arc<SnapshotStore>,
        schedule: SnapshotSchedule,
        chain: &dyn StateStore,
        head: &BlockHeader,
    ) -> Result<Self, SnapshotError> {
        // Files above the head are of a future this store does not have (it was put back
        // from a backup): pruning would take the newest of them for the base of the next
        // snapshot and delete the real one. This chain writes its own when it gets there.
        snapshots.forget_above(head.height)?;
        let head_id = head.id();
        let head = head.height;
        // The newest base from which every block up to the head can still be read back, and
        // that is this chain's state: a file another chain left has another block id.
        let usable = match snapshots.latest_state(head) {
            Some(s) if s.height == head => (s.block == head_id).then_some(s),
            Some(s) if chain.first_retained() <= s.height + 1 => {
                let next = chain.header_and_body(s.height + 1)?;
                next.is_some_and(|(next, _)| next.previous == s.block)
                    .then_some(s)
            }
            _ => None,
        };
        let base = match usable {
            Some(s) => s.height,
            None => {
                // The snapshot this head is waiting to commit needs the state at its height,
                // which a base written now (at the head) cannot give.
                if let Some(s) = pending_snapshot(&schedule, head)
                    && s < head
                {
                    return Err(SnapshotError::Missing(format!(
                        "the chain must commit the snapshot of block {s} in block {}, but this node has no state file at or below block {s} to build it from; copy the snapshots directory of a node of this chain, or restore this node by state sync",
                        s + schedule.delay
                    )));
                }
                let path = snapshots.state_path(head);
                let mut writer = StateWriter::create(&path, head, head_id, schedule.chunk_bytes)?;
                for entry in chain.entries()? {
                    let (k, v) = entry?;
                    writer.add(&k, &v)?;
                }
                let index = writer.finish()?;
                snapshots.add_state(index);
                head
            }
        };
        snapshots.remove_spills()?;
        let mut snapshotter = Self {
            pending: Spill::create(&snapshots.spill_path(base + 1))?,
            store: snapshots,
            schedule,
            base,
            job: None,
        };
        // A merge a restart interrupted starts again once its blocks are spilled.
        let restart =
            pending_snapshot(&schedule, head).filter(|&s| snapshotter.store.state(s).is_none());
        for h in base + 1..=head {
            let changes = chain.changes(h)?.ok_or_else(|| gone(h))?;
            let mut collected = Changes::new();
            for change in changes.iter {
                let (key, value) = change?;
                collected.push(&key, value.as_deref());
            }
            snapshotter.pending.add(h, &collected)?;
            if restart == Some(h) {
                let (header, _) = chain.header_and_body(h)?.ok_or_else(|| gone(h))?;
                snapshotter.start(h, header.id())?;
            }
        }
        Ok(snapshotter)
    }

    /// The lowest block the archive must keep: the base's (its body travels with the next
    /// snapshot), and every block above it, read back after a restart.
    pub(crate) fn retain_floor(&self) -> u64 {
        self.base
    }

    /// Spills the changes of block `height` before the store commits it; [`Snapshotter::undo`]
    /// takes them back if the commit fails.
    pub(crate) fn spill(&mut self, height: u64, changes: &Changes) -> Result<Mark, SnapshotError> {
        self.pending.add(height, changes)
    }

    /// Takes back the changes spilled since `mark` (their block did not commit).
    pub(crate) fn undo(&mut self, mark: Mark) -> Result<(), SnapshotError> {
        self.pending.undo(mark)
    }

    /// After block `height` (id `id`, spilled) committed: at a snapshot height, starts its
    /// merge.
    pub(crate) fn committed(&mut self, height: u64, id: BlockId) -> Result<(), SnapshotError> {
        if self.schedule.is_snapshot(height) {
            self.start(height, id)?;
        }
        Ok(())
    }

    /// Starts the merge of the state file at `height` (block `id`) from the base and the
    /// spilled blocks, which end at `height`; the blocks after it spill into a new file.
    fn start(&mut self, height: u64, id: BlockId) -> Result<(), SnapshotError> {
        debug_assert_eq!(self.pending.last_height(), Some(height));
        let next = Spill::create(&self.store.spill_path(height + 1))?;
        let spilled = std::mem::replace(&mut self.pending, next).finish()?;
        let base = self
            .store
            .state(self.base)
            .expect("the base stays until replaced");
        let chunk_bytes = self.schedule.chunk_bytes;
        let spilled = Arc::new(Mutex::new(Some(spilled)));
        let spawned = std::thread::Builder::new()
            .name(format!("snapshot-{height}"))
            .spawn({
                let (store, base, spilled) = (self.store.clone(), base.clone(), spilled.clone());
                move || {
                    let spilled = spilled.lock().expect("taken once").take().expect("once");
                    merge(&store, &base, spilled, (height, id), chunk_bytes)
                }
            });
        let run = match spawned {
            Ok(handle) => Run::Thread(handle),
            Err(_) => {
                let spilled = spilled.lock().expect("taken once").take().expect("once");
                Run::Done(merge(
                    &self.store,
                    &base,
                    spilled,
                    (height, id),
                    chunk_bytes,
                ))
            }
        };
        self.job = Some(Job { height, run });
        Ok(())
    }

    /// The digest block `height` must commit to, waiting for its merge if it is still
    /// running; `None` if the block commits to none.
    pub(crate) fn digest_for(&mut self, height: u64) -> Result<Option<SnapshotRef>, SnapshotError> {
        let Some(s) = self.schedule.committed_at(height) else {
            return Ok(None);
        };
        if let Some(job) = self.job.take_if(|j| j.height == s) {
            let index = match job.run {
                Run::Thread(handle) => handle.join().map_err(|_| {
                    SnapshotError::Missing(format!("the merge of block {s} panicked"))
                })?,
                Run::Done(result) => result,
            }?;
            self.store.add_state(index);
            self.base = s;
        }
        let index = self.store.state(s).ok_or_else(|| {
            SnapshotError::Missing(format!("no state file of block {s} to commit to"))
        })?;
        Ok(Some(SnapshotRef {
            height: s,
            digest: index.digest(),
        }))
    }

    /// After block `header` committed: if it committed to a snapshot, publishes it with the
    /// blocks `S..=T` read from the archive.
    pub(crate) fn publish_if_due(
        &mut self,
        header: &BlockHeader,
        chain: &dyn StateStore,
    ) -> Result<(), SnapshotError> {
        let Some(r) = header.committed_snapshot() else {
            return Ok(());
        };
        if self.store.has_snapshot(header.height) {
            return Ok(());
        }
        let index = self.store.state(r.height).ok_or_else(|| {
            SnapshotError::Missing(format!("no state file of block {}", r.height))
        })?;
        // The tail streams into its file a block at a time: at the limits a block is ~80 MB
        // (16 MiB of transactions, 64 MB of changes), and the tail `delay + 1` of them.
        let mut headers = Vec::new();
        let mut tail = self.store.tail_writer(header.height)?;
        let mut tail_lens = Vec::new();
        for h in r.height..=header.height {
            // The base block's changes are not read: a restored node's base record holds its
            // whole state.
            let (block_header, body, changes) = if h == r.height {
                let (block_header, body) = chain.header_and_body(h)?.ok_or_else(|| gone(h))?;
                (block_header, body, Changes::new())
            } else {
                let record: BlockRecord = chain.block(h)?.ok_or_else(|| gone(h))?;
                (record.header, record.body, record.changes)
            };
            tail_lens.push(tail.add(&TailBlock { body, changes })?);
            headers.push(block_header);
        }
        let (tail, tail_hashes) = tail.finish()?;
        let manifest = Manifest::new(&index, headers, tail_lens, tail_hashes);
        self.store.publish(header.height, &manifest, &tail)
    }
}

fn gone(height: u64) -> SnapshotError {
    SnapshotError::Missing(format!("block {height} is no longer in the store"))
}

/// The snapshot height whose digest a chain at `head` has yet to commit, if any.
fn pending_snapshot(schedule: &SnapshotSchedule, head: u64) -> Option<u64> {
    if !schedule.is_enabled() {
        return None;
    }
    // The delay is below the interval: only the last snapshot height can still be pending.
    let s = head - head % schedule.interval;
    (s > 0 && head < s + schedule.delay).then_some(s)
}

/// Writes the state file of block `at` (height and id): the base's entries with the spilled
/// blocks' changes applied, later blocks over earlier ones; then deletes the spill.
fn merge(
    store: &SnapshotStore,
    base: &StateIndex,
    spilled: SpillFile,
    at: (u64, BlockId),
    chunk_bytes: u32,
) -> Result<StateIndex, SnapshotError> {
    let (height, id) = at;
    let mut writer = StateWriter::create(&store.state_path(height), height, id, chunk_bytes)?;
    let mut changes = spilled.merged()?;
    let mut next = changes.next_change()?;
    for_each_entry(&store.state_path(base.height), base, &mut |k, v| {
        // Changed keys before this one: new ones, or deletions of keys the base lacks.
        while let Some((ck, cv)) = &next
            && ck.as_slice() < k
        {
            if let Some(cv) = cv {
                writer.add(ck, cv)?;
            }
            next = changes.next_change()?;
        }
        match &next {
            Some((ck, cv)) if ck.as_slice() == k => {
                if let Some(cv) = cv {
                    writer.add(ck, cv)?;
                }
                next = changes.next_change()?;
            }
            _ => writer.add(k, v)?,
        }
        Ok(())
    })?;
    while let Some((ck, cv)) = next {
        if let Some(cv) = cv {
            writer.add(&ck, &cv)?;
        }
        next = changes.next_change()?;
    }
    let index = writer.finish()?;
    drop(changes);
    spilled.remove();
    Ok(index)
}
