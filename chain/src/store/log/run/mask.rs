//! Which entries of the run were deleted since it was written, so that a seek skips them in
//! logarithmic time (issue 23): a deleted run entry stays in the run until the next merge
//! rewrites it (64 MiB of log, the run's own size, or 1,024 blocks), and a contract that
//! deletes 100,000 keys must not make every later walk of them step over each.
//!
//! Derived, never stored: a deletion committed (or replayed on open) masks its key's entry,
//! and a new run is masked from the order's dead keys when it is installed, so a restart and
//! a read-only open mask what a node that never stopped does.

use std::collections::BTreeMap;

use super::super::live::LiveBits;

/// An entry's place in a run: its block, its index in the block, and how many entries that
/// block holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryAt {
    /// The block.
    pub block: usize,
    /// Its index in the block.
    pub index: usize,
    /// Entries in the block.
    pub entries: usize,
}

/// The masked entries of one block.
struct BlockMask {
    /// A bit per entry (set: masked).
    masked: Vec<u64>,
    count: usize,
    entries: usize,
}

/// The masked (deleted since the run) entries of a run.
pub struct RunMask {
    /// Blocks with an entry not masked, so that a seek finds the next such block at once.
    blocks: LiveBits,
    /// The blocks with masked entries.
    masked: BTreeMap<usize, BlockMask>,
}

impl RunMask {
    /// Nothing masked, over `blocks` blocks.
    pub fn new(blocks: usize) -> Self {
        Self {
            blocks: LiveBits::all_live(blocks),
            masked: BTreeMap::new(),
        }
    }

    /// Masks the entry at `at`.
    pub fn mask(&mut self, at: EntryAt) {
        let block = self.masked.entry(at.block).or_insert_with(|| BlockMask {
            masked: vec![0; at.entries.div_ceil(64)],
            count: 0,
            entries: at.entries,
        });
        let (word, bit) = (at.index / 64, 1u64 << (at.index % 64));
        if block.masked[word] & bit == 0 {
            block.masked[word] |= bit;
            block.count += 1;
            if block.count == block.entries {
                self.blocks.set(at.block, false);
            }
        }
    }

    /// Whether entry `index` of `block` is masked.
    pub fn is_masked(&self, block: usize, index: usize) -> bool {
        self.masked
            .get(&block)
            .is_some_and(|b| b.masked[index / 64] & (1 << (index % 64)) != 0)
    }

    /// The first block at or after `block` with an entry not masked.
    pub fn next_block(&self, block: usize) -> Option<usize> {
        self.blocks.next_live(block)
    }

    /// The last block at or before `block` with an entry not masked.
    pub fn prev_block(&self, block: usize) -> Option<usize> {
        self.blocks.prev_live(block)
    }

    /// Entries masked.
    pub fn len(&self) -> usize {
        self.masked.values().map(|b| b.count).sum()
    }

    /// Whether no entry is masked.
    pub fn is_empty(&self) -> bool {
        self.masked.is_empty()
    }

    /// Bytes it holds on the heap.
    pub fn heap_bytes(&self) -> usize {
        self.blocks.heap_bytes()
            + self
                .masked
                .values()
                .map(|b| 64 + b.masked.len() * 8)
                .sum::<usize>()
    }
}
