//! The in-memory store: live state in a hash map, recent blocks in a queue. Nothing survives
//! the process; tests and benchmarks use it to compare against the disk backends.

use std::borrow::Cow;
use std::collections::VecDeque;

use crate::KeyedMap;
use crate::block::BlockHeader;

use super::{
    BlockArchive, BlockRecord, Change, Commit, Entries, StateStore, StoreResult, StoreStats,
};

/// Live state in a hash map; nothing survives the process.
pub struct MemoryStore {
    map: KeyedMap<Vec<u8>, Vec<u8>>,
    blocks: VecDeque<BlockRecord>,
    retain: u64,
    stats: StoreStats,
}

impl MemoryStore {
    /// An empty store keeping at most the last `retain` blocks (and fewer if commits ask).
    pub fn new(retain: u64) -> Self {
        Self {
            map: KeyedMap::default(),
            blocks: VecDeque::new(),
            retain: retain.max(1),
            stats: StoreStats::default(),
        }
    }
}

/// Applies sorted changes to a hash map.
pub(crate) fn apply_changes(map: &mut KeyedMap<Vec<u8>, Vec<u8>>, changes: &[Change]) {
    for (key, value) in changes {
        match value {
            // An update of a value to one of the same length (a balance) reuses the key and
            // the buffer: most writes of a block update accounts that already exist. Other
            // lengths get a fresh buffer, so a shrunk value keeps no spare capacity.
            Some(v) => match map.get_mut(key.as_slice()) {
                Some(slot) if slot.len() == v.len() => slot.copy_from_slice(v),
                Some(slot) => *slot = v.clone(),
                None => {
                    map.insert(key.clone(), v.clone());
                }
            },
            None => {
                map.remove(key);
            }
        }
    }
}

impl BlockArchive for MemoryStore {
    fn head(&self) -> Option<&BlockHeader> {
        self.blocks.back().map(|b| &b.header)
    }

    fn block(&self, height: u64) -> StoreResult<Option<BlockRecord>> {
        let first = self.first_retained();
        Ok(height
            .checked_sub(first)
            .and_then(|i| self.blocks.get(i as usize))
            .cloned())
    }

    fn first_retained(&self) -> u64 {
        self.blocks.front().map_or(0, |b| b.header.height)
    }
}

impl StateStore for MemoryStore {
    fn get(&self, key: &[u8]) -> StoreResult<Option<Cow<'_, [u8]>>> {
        Ok(self.map.get(key).map(|v| Cow::Borrowed(v.as_slice())))
    }

    fn commit(&mut self, block: BlockRecord, commit: Commit) -> StoreResult<()> {
        apply_changes(&mut self.map, &block.changes);
        self.stats.commits += 1;
        self.stats.user_bytes_written += block
            .changes
            .iter()
            .map(|(k, v)| (k.len() + v.as_ref().map_or(0, Vec::len)) as u64)
            .sum::<u64>();
        let height = block.header.height;
        self.blocks.push_back(block);
        let keep_from = commit
            .retain_from
            .max((height + 1).saturating_sub(self.retain))
            .min(height);
        while self
            .blocks
            .front()
            .is_some_and(|b| b.header.height < keep_from)
        {
            self.blocks.pop_front();
        }
        Ok(())
    }

    fn entries(&self) -> StoreResult<Entries<'_>> {
        let mut all: Vec<(&Vec<u8>, &Vec<u8>)> = self.map.iter().collect();
        all.sort_unstable();
        Ok(Box::new(
            all.into_iter().map(|(k, v)| Ok((k.clone(), v.clone()))),
        ))
    }

    fn disk_bytes(&self) -> u64 {
        0
    }

    fn kind(&self) -> &'static str {
        "memory"
    }

    fn stats(&self) -> StoreStats {
        StoreStats {
            index_keys: self.map.len() as u64,
            ..self.stats.clone()
        }
    }
}
