//! The merge: the previous sorted run plus the changes of the blocks committed since, in key
//! order, newest change first, deletions dropped. It writes the next run (the snapshot) in
//! the background, and it is also how [`crate::store::StateStore::entries`] lists the state.
//!
//! Each block's changes are stored sorted by key, so the merge is a k-way merge of sorted
//! streams read straight from the files: it holds one buffer per stream and never the state
//! itself. Its output depends only on the run and the blocks, never on when it runs.

use std::cmp::Ordering as CmpOrdering;
use std::collections::BinaryHeap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::block::BlockHeader;

use super::crash;
use super::record::ChangeCursor;
use super::run::{Run, RunIter, RunWriter};
use super::vfs::{VFile, Vfs};
use crate::store::error::{Poison, Step, StoreError, StoreResult};

/// Buffer per block stream: small, since a merge may read a thousand blocks at once.
const STREAM_CHUNK: usize = 16 << 10;

/// One block whose changes go into a merge.
#[derive(Clone)]
pub struct MergeBlock {
    /// Its height.
    pub height: u64,
    /// Its segment.
    pub file: Arc<dyn VFile>,
    /// The segment's path, for errors.
    pub path: PathBuf,
    /// Where its record starts.
    pub offset: u64,
    /// Its payload length.
    pub len: u64,
}

/// A source of sorted entries.
enum Source {
    Run(RunIter, PathBuf),
    Block {
        cursor: ChangeCursor<Arc<dyn VFile>>,
        path: PathBuf,
        offset: u64,
    },
}

/// The current entry of a source.
struct Head {
    key: Vec<u8>,
    value: Vec<u8>,
    present: bool,
    /// The source's rank: later blocks rank higher; the run ranks lowest.
    rank: usize,
}

impl PartialEq for Head {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == CmpOrdering::Equal
    }
}
impl Eq for Head {}
impl PartialOrd for Head {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for Head {
    /// A max-heap pops the smallest key first, and of equal keys the newest source.
    fn cmp(&self, other: &Self) -> CmpOrdering {
        other.key.cmp(&self.key).then(self.rank.cmp(&other.rank))
    }
}

/// The merged, sorted state of a run and the blocks above it.
pub struct Merger {
    sources: Vec<Source>,
    heap: BinaryHeap<Head>,
    spare: Vec<(Vec<u8>, Vec<u8>)>,
    /// Bytes read from files so far.
    pub read_bytes: u64,
}

impl Merger {
    /// The state of `run` with `blocks` (ascending heights, all above the run) applied.
    pub fn new(run: Option<&Arc<Run>>, blocks: &[MergeBlock]) -> StoreResult<Self> {
        let mut sources = Vec::with_capacity(blocks.len() + 1);
        if let Some(run) = run {
            sources.push(Source::Run(run.iter(), run.path().to_path_buf()));
        }
        for b in blocks {
            let (_, cursor) = ChangeCursor::new(b.file.clone(), b.offset, b.len, STREAM_CHUNK)
                .map_err(|e| StoreError::corrupted(&b.path, Some(b.offset), e.to_string()))?;
            sources.push(Source::Block {
                cursor,
                path: b.path.clone(),
                offset: b.offset,
            });
        }
        let mut merger = Self {
            sources,
            heap: BinaryHeap::new(),
            spare: Vec::new(),
            read_bytes: 0,
        };
        for rank in 0..merger.sources.len() {
            let (key, value) = merger.spare.pop().unwrap_or_default();
            merger.advance(rank, key, value, None)?;
        }
        Ok(merger)
    }

    /// Reads source `rank`'s next entry into the buffers and pushes it, checking that its keys
    /// increase (after `previous`).
    fn advance(
        &mut self,
        rank: usize,
        mut key: Vec<u8>,
        mut value: Vec<u8>,
        previous: Option<&[u8]>,
    ) -> StoreResult<()> {
        let present = match &mut self.sources[rank] {
            Source::Run(iter, _) => {
                if !iter.next_into(&mut key, &mut value)? {
                    self.spare.push((key, value));
                    return Ok(());
                }
                true
            }
            Source::Block {
                cursor,
                path,
                offset,
                ..
            } => {
                let before = cursor.read_bytes();
                let next = cursor
                    .next_into(&mut key, &mut value)
                    .map_err(|e| StoreError::corrupted(&*path, Some(*offset), e.to_string()))?;
                self.read_bytes += cursor.read_bytes() - before;
                match next {
                    None => {
                        self.spare.push((key, value));
                        return Ok(());
                    }
                    Some((_, present)) => present,
                }
            }
        };
        if previous.is_some_and(|p| p >= key.as_slice()) {
            let (path, offset) = match &self.sources[rank] {
                Source::Run(_, path) => (path.clone(), None),
                Source::Block { path, offset, .. } => (path.clone(), Some(*offset)),
            };
            return Err(StoreError::corrupted(path, offset, "keys out of order"));
        }
        self.heap.push(Head {
            key,
            value,
            present,
            rank,
        });
        Ok(())
    }

    /// The next live entry, `(key, value)` in key order, into the buffers; `false` at the end.
    pub fn next_into(&mut self, key: &mut Vec<u8>, value: &mut Vec<u8>) -> StoreResult<bool> {
        loop {
            let Some(top) = self.heap.pop() else {
                return Ok(false);
            };
            // Older changes of the same key lose.
            while self.heap.peek().is_some_and(|h| h.key == top.key) {
                let older = self.heap.pop().expect("peeked");
                let previous = older.key.clone();
                self.advance(older.rank, older.key, older.value, Some(&previous))?;
            }
            let present = top.present;
            key.clear();
            key.extend_from_slice(&top.key);
            value.clear();
            value.extend_from_slice(&top.value);
            self.advance(top.rank, top.key, top.value, Some(key))?;
            if present {
                return Ok(true);
            }
        }
    }
}

/// What a background merge is asked to do.
pub struct MergeJob {
    /// The file system.
    pub vfs: Arc<dyn Vfs>,
    /// The store's directory.
    pub dir: PathBuf,
    /// The run to merge into, if any.
    pub run: Option<Arc<Run>>,
    /// The blocks above the run, ascending.
    pub blocks: Vec<MergeBlock>,
    /// The last of them: the new run's head.
    pub head: BlockHeader,
    /// Set to stop early (the store is closing).
    pub cancel: Arc<AtomicBool>,
}

/// What a finished merge wrote.
#[derive(Debug)]
pub struct MergeDone {
    /// The new run's height.
    pub height: u64,
    /// Its path.
    pub path: PathBuf,
    /// Bytes it wrote.
    pub written: u64,
    /// Bytes it read.
    pub read: u64,
    /// How long it took.
    pub took: Duration,
}

/// The run file of the state at `height`.
pub fn run_path(dir: &Path, height: u64) -> PathBuf {
    dir.join(format!("run-{height:020}.trun"))
}

/// Runs `job`: writes the merged run to a temporary file, syncs it, renames it into place and
/// syncs the directory. Its blocks are on disk already (the store merges no other), so the run
/// never holds a block the log could lose.
pub fn run_merge(job: MergeJob) -> Result<Option<MergeDone>, Poison> {
    let start = Instant::now();
    let path = run_path(&job.dir, job.head.height);
    let tmp = path.with_extension("tmp");
    let file = job.vfs.create(&tmp).at("creating", &tmp)?;
    let mut writer = RunWriter::new(file, &job.head).at("writing", &tmp)?;
    let mut merger = Merger::new(job.run.as_ref(), &job.blocks).at("merging into", &tmp)?;
    let (mut key, mut value) = (Vec::new(), Vec::new());
    let mut n = 0u64;
    while merger
        .next_into(&mut key, &mut value)
        .at("merging into", &tmp)?
    {
        writer.add(&key, &value).at("writing", &tmp)?;
        n += 1;
        if n.is_multiple_of(65_536) && job.cancel.load(Ordering::Relaxed) {
            return Ok(None);
        }
    }
    let (file, written) = writer.finish().at("writing", &tmp)?;
    file.sync().at("syncing", &tmp)?;
    crash::point("snapshot-written");
    job.vfs.rename(&tmp, &path).at("renaming", &tmp)?;
    crash::point("snapshot-renamed");
    job.vfs
        .sync_dir(&job.dir)
        .at("syncing the directory", &job.dir)?;
    Ok(Some(MergeDone {
        height: job.head.height,
        path,
        written,
        read: merger.read_bytes,
        took: start.elapsed(),
    }))
}
