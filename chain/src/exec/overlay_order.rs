//! The journal overlay's keys in order, for ordered reads through the journal
//! ([`super::journal::Journal::seek`]).
//!
//! The overlay is an `IndexMap` in insertion order: a hash lookup per read and write, which is
//! what transfers need. An ordered read needs its keys sorted, but only when a contract
//! iterates, and the overlay holds the whole pending block's writes (tens of thousands of keys
//! in a block of 10,000 transfers), not just the running transaction's (at most
//! [`MAX_TX_WRITES`](tally_host_api::limits::MAX_TX_WRITES) = 1,024): a linear scan per seek
//! would cost a block of iterating transactions O(writes²), and sorting per seek O(n log n)
//! each. So the order is built on the first ordered read of a block and kept up lazily, by
//! Bentley and Saxe's logarithmic method: sorted runs of overlay indices, each covering a
//! contiguous span of the overlay's entries, the newest run merged into the one before it
//! once it is at least half its size. A key is merged about log₂(n / [`TAIL_SCAN`]) times, a
//! seek binary-searches each of the at most log₂ n runs and scans the unsorted tail of under
//! [`TAIL_SCAN`] entries. A block whose transactions never iterate builds nothing, and its
//! writes pay nothing for the order.
//!
//! Entries are only ever appended to the overlay, and removed from its end (a transaction or
//! call undone), so a span of indices stays a span of the same keys: undoing truncates the
//! runs past the overlay's new end.

use indexmap::IndexMap;

use crate::KeyedHasher;
use crate::store::{Direction, KeyRange, comes_before};

/// Overlay entries appended since the last run that a seek scans rather than sorts into a
/// new run: a scan of 32 entries compares about as many keys as a binary search over a few
/// runs, and a transaction that writes a few keys then iterates (the common case) sorts
/// nothing.
pub(crate) const TAIL_SCAN: usize = 32;

/// Sorted overlay indices covering the overlay's entries `start..end`.
struct Run {
    start: usize,
    end: usize,
    sorted: Vec<u32>,
}

/// The overlay's order: sorted runs of its indices (see the module docs).
#[derive(Default)]
pub(crate) struct OverlayOrder {
    /// Oldest (largest) first; each starts where the one before it ends.
    runs: Vec<Run>,
}

/// The overlay an order indexes.
pub(crate) type Overlay = IndexMap<Vec<u8>, Option<Vec<u8>>, KeyedHasher>;

impl OverlayOrder {
    /// Overlay entries the runs cover: `0..covered()`.
    fn covered(&self) -> usize {
        self.runs.last().map_or(0, |r| r.end)
    }

    /// Brings the runs up to the overlay's end, when its unsorted tail has grown to
    /// [`TAIL_SCAN`] entries: the tail becomes a run, and runs merge while the newest holds at
    /// least half as many entries as the one before it.
    pub(crate) fn catch_up(&mut self, overlay: &Overlay) {
        let (start, end) = (self.covered(), overlay.len());
        if end - start < TAIL_SCAN {
            return;
        }
        let key = |i: &u32| overlay.get_index(*i as usize).expect("in the overlay").0;
        let mut sorted: Vec<u32> = (start as u32..end as u32).collect();
        sorted.sort_unstable_by(|a, b| key(a).cmp(key(b)));
        self.runs.push(Run { start, end, sorted });
        while let [.., older, newer] = self.runs.as_slice()
            && newer.sorted.len() * 2 >= older.sorted.len()
        {
            let newer = self.runs.pop().expect("two runs");
            let older = self.runs.last_mut().expect("two runs");
            older.sorted = merge(&older.sorted, &newer.sorted, key);
            older.end = newer.end;
        }
    }

    /// Forgets entries `len..` of the overlay, which an undo removed.
    pub(crate) fn truncate(&mut self, len: usize) {
        while self.runs.last().is_some_and(|r| r.start >= len) {
            self.runs.pop();
        }
        if let Some(run) = self.runs.last_mut()
            && run.end > len
        {
            run.sorted.retain(|&i| (i as usize) < len);
            run.end = len;
        }
    }

    /// Forgets every entry (the overlay was drained).
    pub(crate) fn clear(&mut self) {
        self.runs.clear();
    }

    /// The overlay index of the first key of `range` walking `dir`, deleted or not: the runs
    /// must have [caught up](OverlayOrder::catch_up) with `overlay`.
    pub(crate) fn first(
        &self,
        overlay: &Overlay,
        range: KeyRange<'_>,
        dir: Direction,
    ) -> Option<usize> {
        let key = |i: usize| overlay.get_index(i).expect("in the overlay").0.as_slice();
        let mut best: Option<usize> = None;
        let mut offer = |i: usize| {
            if best.is_none_or(|b| comes_before(key(i), key(b), dir)) {
                best = Some(i);
            }
        };
        for run in &self.runs {
            let found = match dir {
                Direction::Forward => {
                    let at = run
                        .sorted
                        .partition_point(|&i| !range.above_lo(key(i as usize)));
                    run.sorted.get(at)
                }
                Direction::Backward => {
                    let at = run
                        .sorted
                        .partition_point(|&i| range.below_hi(key(i as usize)));
                    at.checked_sub(1).map(|at| &run.sorted[at])
                }
            };
            if let Some(&i) = found
                && range.contains(key(i as usize))
            {
                offer(i as usize);
            }
        }
        for i in self.covered()..overlay.len() {
            if range.contains(key(i)) {
                offer(i);
            }
        }
        best
    }
}

/// Two sorted runs of distinct keys as one.
fn merge<'k>(a: &[u32], b: &[u32], key: impl Fn(&u32) -> &'k Vec<u8>) -> Vec<u32> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if key(&a[i]) < key(&b[j]) {
            out.push(a[i]);
            i += 1;
        } else {
            out.push(b[j]);
            j += 1;
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
    out
}
