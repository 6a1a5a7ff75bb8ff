//! The replay window: which recent blocks a transaction may reference (TaPoS), and which
//! transaction ids were included recently enough that including them again would be a replay.

use std::collections::VecDeque;

use rayon::prelude::*;

use crate::KeyedSet;
use crate::block::{BlockId, ref_prefix};
use crate::tx::TxId;

/// How many recent blocks a transaction may reference. `ref_block_num` has 16 bits, as in EOS,
/// whose `block_summary` table keeps the same 65,536 entries.
pub const TAPOS_WINDOW: usize = 1 << 16;

/// Recent block ids and recently included transaction ids.
pub struct ReplayWindow {
    /// `(height, prefix)` of the latest block with each `height % TAPOS_WINDOW`.
    tapos: Vec<(u64, u32)>,
    /// Ids included within the lifetime window.
    ids: KeyedSet<TxId>,
    /// Per committed block (by block time), the ids it included, oldest first, so they can be
    /// forgotten once they could no longer be valid.
    by_block: VecDeque<(u64, Vec<TxId>)>,
    /// Longest a transaction may live past its block's time.
    max_lifetime_ms: u64,
}

impl ReplayWindow {
    /// An empty window for transactions that live at most `max_lifetime_ms`.
    pub fn new(max_lifetime_ms: u64) -> Self {
        Self {
            tapos: vec![(u64::MAX, 0); TAPOS_WINDOW],
            ids: KeyedSet::default(),
            by_block: VecDeque::new(),
            max_lifetime_ms,
        }
    }

    /// Records a committed block: its id for TaPoS and the ids of the transactions it
    /// included, then forgets ids that expired by its time.
    pub fn push_block(&mut self, height: u64, id: &BlockId, time_ms: u64, txs: Vec<TxId>) {
        self.tapos[height as usize % TAPOS_WINDOW] = (height, ref_prefix(id));
        self.ids.extend(txs.iter().copied());
        self.by_block.push_back((time_ms, txs));
        // A transaction included at block time t expires by t + max lifetime; once the head is
        // past that, a replay would be rejected as expired anyway.
        while let Some((time, _)) = self.by_block.front() {
            if time + self.max_lifetime_ms >= time_ms {
                break;
            }
            let (_, ids) = self.by_block.pop_front().expect("front exists");
            for id in ids {
                self.ids.remove(&id);
            }
        }
    }

    /// Whether `(num, prefix)` names a block of the window.
    pub fn knows(&self, num: u16, prefix: u32) -> bool {
        let (height, known) = self.tapos[num as usize];
        height != u64::MAX && known == prefix
    }

    /// `(ref_block_num, ref_block_prefix)` naming the block at `height`, while it is in the
    /// window.
    pub fn tapos_at(&self, height: u64) -> Option<(u16, u32)> {
        let (h, prefix) = self.tapos[height as usize % TAPOS_WINDOW];
        (h == height).then_some((height as u16, prefix))
    }

    /// Whether `id` was included in a committed block of the window.
    pub fn contains(&self, id: &TxId) -> bool {
        self.ids.contains(id)
    }

    /// [`ReplayWindow::contains`] for many ids at once, on all cores.
    pub fn contains_many(&self, ids: &[TxId]) -> Vec<bool> {
        ids.par_iter().map(|id| self.ids.contains(id)).collect()
    }

    /// The time of the oldest block whose ids the window still needs (`None` when empty): a
    /// restarted node must still have every block from then on to rebuild the window.
    pub fn oldest_time_ms(&self) -> Option<u64> {
        self.by_block.front().map(|(t, _)| *t)
    }
}
