//! Ordered reads of a run: the first entry of a key range, either way, from one block.
//!
//! A next-key host call seeks once per key it returns, each time just past the last one, so
//! most seeks land in the block the previous one read. Each thread keeps the last block it
//! read of a run ([`SeekBlock`]): a walk over a contract's keys reads each 4 KiB block once
//! (about 40 entries of a token's balances), not once per key. A run never changes once
//! written, and each open run has its own [`Run::id`], so a kept block cannot go stale.

use std::cell::RefCell;
use std::ops::Bound;

use super::{BLOCK_BYTES, Run, RunMask, entry_at};
use crate::store::error::{StoreError, StoreResult};
use crate::store::{Direction, KeyRange, starting_before};

/// The last run block a thread's seeks read, checked against its checksum then.
struct SeekBlock {
    /// [`Run::id`] of its run (0: none; ids start at 1).
    run: u64,
    /// Its index in the run.
    block: usize,
    buf: Vec<u8>,
}

thread_local! {
    static SEEK_BLOCK: RefCell<SeekBlock> = const {
        RefCell::new(SeekBlock { run: 0, block: 0, buf: Vec::new() })
    };
}

impl Run {
    /// How many blocks start at or before `key` (`inclusive`) or before it.
    fn blocks_starting_before(&self, key: &[u8], inclusive: bool) -> usize {
        starting_before(&self.first_prefixes, key, inclusive, |i| self.first_key(i))
    }

    /// Calls `found` with the first entry of `range` walking `dir` that `mask` does not mask
    /// (`None` if the range holds none here), read from at most two blocks however many
    /// masked entries lie between, and returns what it returns with what the seek cost.
    pub fn seek_with<R>(
        &self,
        range: KeyRange<'_>,
        dir: Direction,
        mask: &RunMask,
        found: impl FnOnce(Option<(&[u8], &[u8])>) -> R,
    ) -> StoreResult<(R, SeekCost)> {
        let mut cost = SeekCost::default();
        if self.blocks.is_empty() {
            return Ok((found(None), cost));
        }
        SEEK_BLOCK.with_borrow_mut(|kept| {
            let hit = match dir {
                Direction::Forward => self.forward(range, mask, kept, &mut cost)?,
                Direction::Backward => self.backward(range, mask, kept, &mut cost)?,
            };
            let entry = hit.map(|(k, v)| (&kept.buf[k.0..k.1], &kept.buf[v.0..v.1]));
            let result = found(entry.filter(|(k, _)| range.contains(k)));
            // A block that held a large value (contract code) is not kept for the thread's
            // lifetime.
            if kept.buf.capacity() > 16 * BLOCK_BYTES {
                *kept = SeekBlock {
                    run: 0,
                    block: 0,
                    buf: Vec::new(),
                };
            }
            Ok((result, cost))
        })
    }

    /// Makes block `i` the thread's kept block, reading it unless it is already.
    fn keep(&self, i: usize, kept: &mut SeekBlock, cost: &mut SeekCost) -> StoreResult<()> {
        if kept.run == self.id && kept.block == i {
            return Ok(());
        }
        kept.run = 0;
        self.read_block(i, &mut kept.buf)?;
        cost.read += kept.buf.len() as u64;
        (kept.run, kept.block) = (self.id, i);
        Ok(())
    }

    /// The entries of the kept block `i`: each one's key and value as ranges of the buffer.
    fn entries_of(&self, i: usize, buf: &[u8]) -> impl Iterator<Item = StoreResult<(Span, Span)>> {
        let mut at = 8;
        std::iter::from_fn(move || {
            if at >= buf.len() {
                return None;
            }
            let Some((k, v, next)) = entry_at(buf, at) else {
                at = buf.len();
                return Some(Err(StoreError::corrupted(
                    &self.path,
                    Some(self.blocks[i].1),
                    "a run entry does not decode",
                )));
            };
            let key = (at + 8, at + 8 + k.len());
            let value = (key.1, key.1 + v.len());
            at = next;
            Some(Ok((key, value)))
        })
    }

    /// The smallest entry above `range.lo` not masked (its upper bound checked by the
    /// caller).
    fn forward(
        &self,
        range: KeyRange<'_>,
        mask: &RunMask,
        kept: &mut SeekBlock,
        cost: &mut SeekCost,
    ) -> StoreResult<Option<(Span, Span)>> {
        // The block that may hold `lo`: the last one starting at or before it.
        let mut i = match range.lo {
            Bound::Unbounded => 0,
            Bound::Included(lo) | Bound::Excluded(lo) => {
                self.blocks_starting_before(lo, true).saturating_sub(1)
            }
        };
        loop {
            self.keep(i, kept, cost)?;
            for (index, entry) in self.entries_of(i, &kept.buf).enumerate() {
                let (k, v) = entry?;
                if range.above_lo(&kept.buf[k.0..k.1]) {
                    if mask.is_masked(i, index) {
                        cost.skipped += 1;
                        continue;
                    }
                    return Ok(Some((k, v)));
                }
            }
            // Every entry of a later block is above `lo`: the next block with an entry not
            // masked holds the one sought.
            match mask.next_block(i + 1) {
                Some(next) => i = next,
                None => return Ok(None),
            }
        }
    }

    /// The largest entry below `range.hi` not masked (its lower bound checked by the
    /// caller).
    fn backward(
        &self,
        range: KeyRange<'_>,
        mask: &RunMask,
        kept: &mut SeekBlock,
        cost: &mut SeekCost,
    ) -> StoreResult<Option<(Span, Span)>> {
        // The last block that starts below `hi`: the entry sought is in it, or before it.
        let starting_below = match range.hi {
            Bound::Unbounded => self.blocks.len(),
            Bound::Included(hi) => self.blocks_starting_before(hi, true),
            Bound::Excluded(hi) => self.blocks_starting_before(hi, false),
        };
        let Some(mut i) = starting_below.checked_sub(1) else {
            return Ok(None);
        };
        loop {
            self.keep(i, kept, cost)?;
            let mut last = None;
            for (index, entry) in self.entries_of(i, &kept.buf).enumerate() {
                let (k, v) = entry?;
                if !range.below_hi(&kept.buf[k.0..k.1]) {
                    break;
                }
                if mask.is_masked(i, index) {
                    cost.skipped += 1;
                } else {
                    last = Some((k, v));
                }
            }
            if last.is_some() {
                return Ok(last);
            }
            // Every entry of an earlier block is below `hi`.
            match i.checked_sub(1).and_then(|before| mask.prev_block(before)) {
                Some(prev) => i = prev,
                None => return Ok(None),
            }
        }
    }
}

/// What a run seek cost.
#[derive(Default, Clone, Copy)]
pub struct SeekCost {
    /// Bytes read from the file (0 when the thread's kept block served).
    pub read: u64,
    /// Masked entries it passed over (at most two blocks' worth).
    pub skipped: u64,
}

/// A byte range of the kept block: start and end.
type Span = (usize, usize);

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;
    use std::sync::Arc;

    use super::*;
    use crate::block::BlockHeader;
    use crate::store::log::fault::FaultFs;
    use crate::store::log::run::RunWriter;
    use crate::store::log::vfs::Vfs;

    fn rng(seed: u64) -> impl FnMut() -> u64 {
        let mut s = seed;
        move || {
            s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }
    }

    /// Keys that share their first 20 bytes (so blocks tie on the 16-byte prefix the binary
    /// search compares first), then 0 to 3 bytes of a small alphabet: prefixes of each other.
    fn key(next: &mut impl FnMut() -> u64) -> Vec<u8> {
        let mut k = vec![0x10; 20];
        for _ in 0..next() % 4 {
            k.push([0u8, 1, 0x80, 0xff][(next() % 4) as usize]);
        }
        k
    }

    #[test]
    fn a_run_seeks_as_a_btree_map_does_either_way_across_blocks() {
        let mut next = rng(3);
        let mut model = BTreeMap::new();
        // Long keys of many shapes, and now and then a value larger than a block.
        while model.len() < 3_000 {
            let mut k = key(&mut next);
            k.extend_from_slice(&(next() % 1_000_000).to_be_bytes());
            let len = if next().is_multiple_of(100) {
                9_000
            } else {
                20
            };
            model.insert(k, vec![next() as u8; len]);
        }
        let fs = FaultFs::new(1);
        let path = Path::new("/d/run-1.trun");
        let header = BlockHeader {
            height: 1,
            previous: [0; 32],
            timestamp_ms: 0,
            transactions_root: [0; 32],
            state_checksum: [0; 32],
            ..Default::default()
        };
        let mut w = RunWriter::new(fs.create(path).unwrap(), &header).unwrap();
        for (k, v) in &model {
            w.add(k, v).unwrap();
        }
        w.finish().unwrap();
        let run = Arc::new(Run::open(&fs, path).unwrap());
        assert!(run.blocks.len() > 20, "{} blocks", run.blocks.len());
        for _ in 0..5_000 {
            let (a, b) = (key(&mut next), key(&mut next));
            let bound = |k: &Vec<u8>, n: u64| match n % 3 {
                0 => Bound::Unbounded,
                1 => Bound::Included(k.clone()),
                _ => Bound::Excluded(k.clone()),
            };
            let (lo, hi) = (bound(&a, next()), bound(&b, next()));
            let range = KeyRange::new(
                lo.as_ref().map(Vec::as_slice),
                hi.as_ref().map(Vec::as_slice),
            );
            for dir in [Direction::Forward, Direction::Backward] {
                let mut all = model.iter().filter(|(k, _)| range.contains(k));
                let want = match dir {
                    Direction::Forward => all.next(),
                    Direction::Backward => all.next_back(),
                };
                let (got, _) = run
                    .seek_with(range, dir, &RunMask::new(run.block_count()), |e| {
                        e.map(|(k, v)| (k.to_vec(), v.to_vec()))
                    })
                    .unwrap();
                let want = want.map(|(k, v)| (k.clone(), v.clone()));
                assert_eq!(got, want, "{range:?} {dir:?}");
            }
        }
    }

    #[test]
    fn a_seek_just_past_the_last_reads_no_block_again() {
        let fs = FaultFs::new(1);
        let path = Path::new("/d/run-2.trun");
        let header = BlockHeader {
            height: 2,
            previous: [0; 32],
            timestamp_ms: 0,
            transactions_root: [0; 32],
            state_checksum: [0; 32],
            ..Default::default()
        };
        let mut w = RunWriter::new(fs.create(path).unwrap(), &header).unwrap();
        for i in 0..10_000u32 {
            w.add(&i.to_be_bytes(), &[1; 8]).unwrap();
        }
        w.finish().unwrap();
        let run = Arc::new(Run::open(&fs, path).unwrap());
        let mask = RunMask::new(run.block_count());
        // A walk over every key, one seek per key just past the last.
        let (mut last, mut keys, mut read) = (None::<Vec<u8>>, 0u32, 0);
        loop {
            let range = match &last {
                Some(k) => KeyRange::ALL.past(k, Direction::Forward),
                None => KeyRange::ALL,
            };
            let (found, cost) = run
                .seek_with(range, Direction::Forward, &mask, |e| {
                    e.map(|(k, _)| k.to_vec())
                })
                .unwrap();
            read += cost.read;
            let Some(key) = found else { break };
            assert_eq!(key, keys.to_be_bytes());
            keys += 1;
            last = Some(key);
        }
        assert_eq!(keys, 10_000);
        // Each block once (and the block after the last key's, checked for a next key).
        let blocks: u64 = run.blocks.iter().map(|b| u64::from(b.2)).sum();
        assert!(
            read <= blocks + 2 * BLOCK_BYTES as u64,
            "{read} bytes for {blocks}"
        );
    }
}
