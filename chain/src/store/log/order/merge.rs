//! Merging two adjacent tiers into one, a budget of keys at a time.

use std::sync::Arc;

use super::tier::{Tier, TierWriter, get_len};

/// A position in a tier, a key at a time, for a merge that may stop and go on at a later
/// commit: it holds no borrow of the tier.
struct TierCursor {
    chunk: usize,
    at: usize,
    key: Vec<u8>,
    /// The key's position in the tier.
    pos: usize,
    valid: bool,
}

impl TierCursor {
    fn new(tier: &Tier) -> Self {
        let mut cursor = Self {
            chunk: 0,
            at: 0,
            key: Vec::new(),
            pos: usize::MAX,
            valid: true,
        };
        cursor.advance(tier);
        cursor
    }

    /// Moves to the next key of `tier`.
    fn advance(&mut self, tier: &Tier) {
        // From "before the first key" (`usize::MAX`) to 0, then on.
        self.pos = self.pos.wrapping_add(1);
        while self.chunk < tier.chunks.len() {
            let chunk = tier.chunk(self.chunk);
            if self.at < chunk.len() {
                let shared = get_len(chunk, &mut self.at);
                let n = get_len(chunk, &mut self.at);
                self.key.truncate(shared);
                self.key.extend_from_slice(&chunk[self.at..self.at + n]);
                self.at += n;
                return;
            }
            (self.chunk, self.at) = (self.chunk + 1, 0);
        }
        self.valid = false;
    }
}

/// A merge of two adjacent tiers, done a budget of keys at a time.
pub(super) struct Merge {
    pub(super) older: Arc<Tier>,
    pub(super) newer: Arc<Tier>,
    a: TierCursor,
    b: TierCursor,
    pub(super) out: TierWriter,
    /// Keys whose liveness changed in `older` or `newer` while the merge was under way, with
    /// their new liveness: the merge may have copied them already, so they are set again
    /// in the merged tier once it is done.
    pub(super) changed: Vec<(Vec<u8>, bool)>,
}

impl Merge {
    pub(super) fn new(older: Arc<Tier>, newer: Arc<Tier>) -> Self {
        // A key's new neighbour below it is at least as close as its old one, so it shares
        // at least as much with it: the merge is no larger than its inputs but for chunks'
        // first keys, which are whole.
        let bytes = older.heap_bytes() + newer.heap_bytes();
        let chunks = older.chunks.len() + newer.chunks.len();
        Self {
            a: TierCursor::new(&older),
            b: TierCursor::new(&newer),
            out: TierWriter::with_capacity(bytes, chunks),
            changed: Vec::new(),
            older,
            newer,
        }
    }

    /// Merges up to `budget` keys (taking them off it); the merged tier once done.
    pub(super) fn step(&mut self, budget: &mut usize) -> Option<Tier> {
        let (a, b) = (&mut self.a, &mut self.b);
        while a.valid || b.valid {
            if *budget == 0 {
                return None;
            }
            *budget -= 1;
            let take_a = !b.valid || (a.valid && a.key <= b.key);
            let take_b = !a.valid || (b.valid && b.key <= a.key);
            // A key in both (never within a generation) is as the newer tier says.
            let live = if take_b {
                self.newer.is_live(b.pos)
            } else {
                self.older.is_live(a.pos)
            };
            self.out
                .push_with(if take_a { &a.key } else { &b.key }, live);
            if take_a {
                a.advance(&self.older);
            }
            if take_b {
                b.advance(&self.newer);
            }
        }
        let merged = std::mem::take(&mut self.out).finish();
        for (key, live) in self.changed.drain(..) {
            if let Some(at) = merged.locate(&key) {
                merged.set_live(at, live);
            }
        }
        Some(merged)
    }
}

/// The keys of `older` and `newer` as one tier, each key once.
pub fn merge_tiers(older: &Arc<Tier>, newer: &Arc<Tier>) -> Tier {
    let mut merge = Merge::new(older.clone(), newer.clone());
    let mut budget = usize::MAX;
    merge.step(&mut budget).expect("an unbounded budget")
}
