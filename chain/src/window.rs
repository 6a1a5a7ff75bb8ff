//! The replay window: which recent blocks a transaction may reference (TaPoS), and which
//! transaction ids were included recently enough that including them again would be a replay.
//!
//! Both halves are chain state, written by every block as EOS keeps its `block_summary` and
//! transaction tables in chain state: the TaPoS slot of the block before it
//! ([`keys::tapos`]), and the ids it included ([`keys::recent_ids`]), deleted once every one
//! of them has expired. What this type holds in memory is a cache of that state (plus the
//! head, whose id no block has written yet), and [`ReplayWindow::load`] rebuilds it from
//! committed state alone. So the rules it decides are a pure function of committed data: a node
//! that restarted, crashed between executing and committing a block, pruned its old blocks or
//! restored a snapshot decides every transaction as a node that never stopped. (Rebuilding the
//! window from retained blocks, as this chain once did, made a transaction that referenced a
//! block older than the retained ones valid on one validator and invalid on a restarted one.)

use std::collections::VecDeque;

use rayon::prelude::*;

use crate::block::{BlockId, ref_prefix};
use crate::error::ChainError;
use crate::exec::journal::Journal;
use crate::state::keys;
use crate::store::StateStore;
use crate::tx::TxId;

/// How many recent blocks a transaction may reference. `ref_block_num` has 16 bits, as in EOS,
/// whose `block_summary` table keeps the same 65,536 entries.
pub const TAPOS_WINDOW: usize = 1 << 16;

/// The ids one committed block included, kept until all of them have expired.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RecentBlock {
    height: u64,
    time_ms: u64,
    ids: Vec<TxId>,
}

/// Recent block ids and recently included transaction ids: an in-memory cache of the state
/// the window's keys hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayWindow {
    /// `(height, prefix)` of the latest block with each `height % TAPOS_WINDOW`.
    tapos: Vec<(u64, u32)>,
    /// Ids included within the lifetime window.
    ids: crate::IdSet,
    /// Per committed block, the ids it included, oldest first, so they can be forgotten once
    /// they could no longer be valid. Exactly the blocks whose [`keys::recent_ids`] key
    /// state holds.
    by_block: VecDeque<RecentBlock>,
    /// Longest a transaction may live past its block's time.
    max_lifetime_ms: u64,
}

impl ReplayWindow {
    /// An empty window for transactions that live at most `max_lifetime_ms`: a chain's before
    /// its genesis.
    pub fn new(max_lifetime_ms: u64) -> Self {
        Self {
            tapos: vec![(u64::MAX, 0); TAPOS_WINDOW],
            ids: crate::IdSet::default(),
            by_block: VecDeque::new(),
            max_lifetime_ms,
        }
    }

    /// Rebuilds the window of a chain whose last committed block is `head` (at `height`, with
    /// id `head_id`) from its committed state alone. It reads every TaPoS slot (65,536 point
    /// reads) and the recent-ids keys from the head down.
    pub fn load(
        store: &dyn StateStore,
        height: u64,
        head_id: &BlockId,
        max_lifetime_ms: u64,
    ) -> Result<Self, ChainError> {
        let mut window = Self::new(max_lifetime_ms);
        for slot in 0..TAPOS_WINDOW {
            let Some(value) = store.get(&keys::tapos(slot as u16))? else {
                continue;
            };
            let entry = decode_tapos(&value).ok_or_else(|| {
                ChainError::Corrupt(format!("TaPoS slot {slot} holds {} bytes", value.len()))
            })?;
            if entry.0 % TAPOS_WINDOW as u64 != slot as u64 || entry.0 >= height {
                return Err(ChainError::Corrupt(format!(
                    "TaPoS slot {slot} names block {} below head {height}",
                    entry.0
                )));
            }
            window.tapos[slot] = entry;
        }
        window.set_tapos(height, head_id);
        // Every block from 1 up writes its ids, and expiry deletes the oldest first: what is
        // left is a run of heights ending at the head.
        let mut recent = Vec::new();
        for h in (1..=height).rev() {
            let Some(value) = store.get(&keys::recent_ids(h))? else {
                break;
            };
            recent.push(decode_recent(h, &value)?);
        }
        for block in recent.into_iter().rev() {
            window.ids.extend(block.ids.iter().copied());
            window.by_block.push_back(block);
        }
        Ok(window)
    }

    /// Records in `journal` the state block `height` (at `time_ms`, including `ids`) writes
    /// for the window: the TaPoS slot of the block before it (`previous`, at `height - 1`),
    /// its own ids, and the deletion of every earlier block's ids that have all expired by its
    /// time. Called once per block, after its transactions.
    pub fn write_block(
        &self,
        journal: &mut Journal,
        previous: &BlockId,
        height: u64,
        time_ms: u64,
        ids: &[TxId],
    ) {
        let before = height - 1;
        journal.write_block(
            keys::tapos(before as u16).to_vec(),
            Some(encode_tapos(before, ref_prefix(previous))),
        );
        let mut recent = Vec::with_capacity(8 + ids.len() * 32);
        recent.extend_from_slice(&time_ms.to_le_bytes());
        for id in ids {
            recent.extend_from_slice(id);
        }
        journal.write_block(keys::recent_ids(height).to_vec(), Some(recent));
        for block in self.expired(time_ms) {
            journal.write_block(keys::recent_ids(block.height).to_vec(), None);
        }
    }

    /// The recorded blocks whose ids have all expired by `time_ms`: a transaction included at
    /// block time t expires by t + max lifetime, and one that has expired is refused as
    /// expired anyway, so forgetting its id changes no verdict.
    fn expired(&self, time_ms: u64) -> impl Iterator<Item = &RecentBlock> {
        self.by_block
            .iter()
            .take_while(move |b| b.time_ms + self.max_lifetime_ms < time_ms)
    }

    /// Records committed block `height` (id `id`, at `time_ms`, which included `ids`) as
    /// [`ReplayWindow::write_block`] recorded it in state.
    pub fn push_block(&mut self, height: u64, id: &BlockId, time_ms: u64, ids: Vec<TxId>) {
        self.set_tapos(height, id);
        let expired = self.expired(time_ms).count();
        for block in self.by_block.drain(..expired) {
            for id in &block.ids {
                self.ids.remove(id);
            }
        }
        self.ids.extend(ids.iter().copied());
        self.by_block.push_back(RecentBlock {
            height,
            time_ms,
            ids,
        });
    }

    /// Records the genesis block (`id`), which includes no transaction and writes no ids.
    pub fn push_genesis(&mut self, id: &BlockId) {
        self.set_tapos(0, id);
    }

    fn set_tapos(&mut self, height: u64, id: &BlockId) {
        self.tapos[height as usize % TAPOS_WINDOW] = (height, ref_prefix(id));
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
}

/// A TaPoS slot's value: the block's height and its id's prefix, little-endian.
fn encode_tapos(height: u64, prefix: u32) -> Vec<u8> {
    let mut value = Vec::with_capacity(12);
    value.extend_from_slice(&height.to_le_bytes());
    value.extend_from_slice(&prefix.to_le_bytes());
    value
}

fn decode_tapos(value: &[u8]) -> Option<(u64, u32)> {
    let height = u64::from_le_bytes(value.get(..8)?.try_into().ok()?);
    let prefix = u32::from_le_bytes(value.get(8..)?.try_into().ok()?);
    Some((height, prefix))
}

/// A recent-ids value: the block's time, little-endian, then each id.
fn decode_recent(height: u64, value: &[u8]) -> Result<RecentBlock, ChainError> {
    let corrupt = || {
        ChainError::Corrupt(format!(
            "the recent ids of block {height} are {} bytes, not 8 + 32 per id",
            value.len()
        ))
    };
    let (time, ids) = value.split_at_checked(8).ok_or_else(corrupt)?;
    if ids.len() % 32 != 0 {
        return Err(corrupt());
    }
    Ok(RecentBlock {
        height,
        time_ms: u64::from_le_bytes(time.try_into().expect("8 bytes")),
        ids: ids
            .chunks_exact(32)
            .map(|id| id.try_into().expect("32 bytes"))
            .collect(),
    })
}
