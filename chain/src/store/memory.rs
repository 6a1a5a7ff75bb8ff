//! The in-memory store: live state in a hash map, recent blocks in a queue. Nothing survives
//! the process; tests and benchmarks use it to compare against the disk backends.

use std::borrow::Cow;
use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

use crate::KeyedMap;
use crate::block::BlockHeader;

use super::{
    BlockArchive, BlockRecord, Changes, Commit, Direction, Entries, KeyRange, StateStore,
    StoreResult, StoreStats,
};

/// Live state in a hash map, its keys also in a sorted set; nothing survives the process.
pub struct MemoryStore {
    map: KeyedMap<Arc<[u8]>, Vec<u8>>,
    /// The map's keys in order, sharing their bytes with it, for seeks. Only creating or
    /// deleting a key touches it: an update of a balance costs what it did without it.
    order: BTreeSet<Arc<[u8]>>,
    blocks: VecDeque<BlockRecord>,
    retain: u64,
    stats: StoreStats,
}

impl MemoryStore {
    /// Retained block `height`, if it is.
    fn retained(&self, height: u64) -> Option<&BlockRecord> {
        let first = self.first_retained();
        height
            .checked_sub(first)
            .and_then(|i| self.blocks.get(i as usize))
    }

    /// An empty store keeping at most the last `retain` blocks (and fewer if commits ask).
    pub fn new(retain: u64) -> Self {
        Self {
            map: KeyedMap::default(),
            order: BTreeSet::new(),
            blocks: VecDeque::new(),
            retain: retain.max(1),
            stats: StoreStats::default(),
        }
    }

    /// Applies sorted changes to the map and the order.
    fn apply_changes(&mut self, changes: &Changes) {
        for (key, value) in changes {
            match value {
                // An update of a value to one of the same length (a balance) reuses the key
                // and the buffer: most writes of a block update accounts that already exist.
                // Other lengths get a fresh buffer, so a shrunk value keeps no spare capacity.
                Some(v) => match self.map.get_mut(key) {
                    Some(slot) if slot.len() == v.len() => slot.copy_from_slice(v),
                    Some(slot) => *slot = v.to_vec(),
                    None => {
                        let key: Arc<[u8]> = key.into();
                        self.order.insert(key.clone());
                        self.map.insert(key, v.to_vec());
                    }
                },
                None => {
                    if self.map.remove(key).is_some() {
                        self.order.remove(key);
                    }
                }
            }
        }
    }

    /// The keys of `range`, walking `dir`.
    fn keys_in<'a>(
        &'a self,
        range: KeyRange<'_>,
        dir: Direction,
    ) -> Box<dyn Iterator<Item = &'a Arc<[u8]>> + 'a> {
        if range.is_empty() {
            return Box::new(std::iter::empty());
        }
        let keys = self.order.range::<[u8], _>((range.lo, range.hi));
        match dir {
            Direction::Forward => Box::new(keys),
            Direction::Backward => Box::new(keys.rev()),
        }
    }

    fn entry(&self, key: &Arc<[u8]>) -> (Vec<u8>, Vec<u8>) {
        (key.to_vec(), self.map[key].clone())
    }
}

impl BlockArchive for MemoryStore {
    fn head(&self) -> Option<&BlockHeader> {
        self.blocks.back().map(|b| &b.header)
    }

    fn block(&self, height: u64) -> StoreResult<Option<BlockRecord>> {
        Ok(self.retained(height).cloned())
    }

    fn header(&self, height: u64) -> StoreResult<Option<BlockHeader>> {
        Ok(self.retained(height).map(|b| b.header.clone()))
    }

    fn first_retained(&self) -> u64 {
        self.blocks.front().map_or(0, |b| b.header.height)
    }
}

impl StateStore for MemoryStore {
    fn get(&self, key: &[u8]) -> StoreResult<Option<Cow<'_, [u8]>>> {
        Ok(self.map.get(key).map(|v| Cow::Borrowed(v.as_slice())))
    }

    /// Lent, never copied: the default's detour through a `Cow` cost each read about 20
    /// instructions (callgrind, `benches/callgrind/stages.sh`).
    fn get_in<'a>(&'a self, key: &[u8], _: &'a mut Vec<u8>) -> StoreResult<Option<&'a [u8]>> {
        Ok(self.map.get(key).map(Vec::as_slice))
    }

    fn commit(&mut self, block: BlockRecord, commit: Commit) -> StoreResult<()> {
        self.apply_changes(&block.changes);
        self.stats.commits += 1;
        self.stats.user_bytes_written += block.changes.byte_len() as u64;
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
        self.range(KeyRange::ALL, Direction::Forward)
    }

    fn seek(&self, range: KeyRange<'_>, dir: Direction) -> StoreResult<Option<(Vec<u8>, Vec<u8>)>> {
        Ok(self.keys_in(range, dir).next().map(|k| self.entry(k)))
    }

    fn range(&self, range: KeyRange<'_>, dir: Direction) -> StoreResult<Entries<'_>> {
        Ok(Box::new(
            self.keys_in(range, dir).map(|k| Ok(self.entry(k))),
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
