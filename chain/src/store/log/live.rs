//! Which positions of an immutable sorted sequence are live: a bitmap with a summary level per
//! 64 words, so that the next (or previous) live position is found in O(log₆₄ n) word reads
//! however many dead positions lie between (issue 23: a seek must not step over deleted keys
//! one by one).
//!
//! The order's tiers ([`super::order`]) keep one per tier, the run's mask ([`super::run`]) one
//! over the run's blocks. The words are atomics so that a commit (which holds the store
//! mutably, so never beside a reader) can flip a bit of a tier that merges share through an
//! `Arc`; readers load them relaxed, which costs what a plain load does.

use std::sync::atomic::{AtomicU64, Ordering};

/// Live positions `0..len`, in levels: level 0 a bit per position (set: live), each level
/// above a bit per word of the one below (set: the word has a live bit), up to one word.
pub struct LiveBits {
    levels: Vec<Box<[AtomicU64]>>,
    len: usize,
}

impl LiveBits {
    /// `len` positions, each live as `live(i)` says.
    pub fn from_fn(len: usize, mut live: impl FnMut(usize) -> bool) -> Self {
        let mut words: Vec<u64> = vec![0; len.div_ceil(64).max(1)];
        for (i, word) in words.iter_mut().enumerate() {
            for b in 0..64 {
                let at = i * 64 + b;
                if at < len && live(at) {
                    *word |= 1 << b;
                }
            }
        }
        Self::from_words(words, len)
    }

    /// `len` positions, all live.
    pub fn all_live(len: usize) -> Self {
        Self::from_fn(len, |_| true)
    }

    /// Level 0 as `words` (bits past `len` clear), with the levels above built over it.
    pub fn from_words(words: Vec<u64>, len: usize) -> Self {
        let mut levels = Vec::new();
        let mut level = words;
        loop {
            let above: Vec<u64> = level.chunks(64).fold(Vec::new(), |mut out, chunk| {
                let bits = chunk
                    .iter()
                    .enumerate()
                    .fold(0u64, |acc, (b, &w)| acc | (u64::from(w != 0) << b));
                out.push(bits);
                out
            });
            let top = level.len() == 1;
            levels.push(level.into_iter().map(AtomicU64::new).collect());
            if top {
                break;
            }
            level = above;
        }
        Self { levels, len }
    }

    fn word(&self, level: usize, i: usize) -> u64 {
        self.levels[level][i].load(Ordering::Relaxed)
    }

    /// Whether position `i` is live.
    pub fn is_live(&self, i: usize) -> bool {
        self.word(0, i / 64) & (1 << (i % 64)) != 0
    }

    /// Makes position `i` live or dead; whether that changed it. Only one thread may set bits
    /// at a time (the store's committing thread, which holds it mutably).
    pub fn set(&self, mut i: usize, live: bool) -> bool {
        for level in &self.levels {
            let slot = &level[i / 64];
            let old = slot.load(Ordering::Relaxed);
            let bit = 1u64 << (i % 64);
            let new = if live { old | bit } else { old & !bit };
            if new == old {
                return false;
            }
            slot.store(new, Ordering::Relaxed);
            // The level above changes only if this word went from or to empty.
            if (old == 0) == (new == 0) {
                return true;
            }
            i /= 64;
        }
        true
    }

    /// The first live position at or after `i`.
    pub fn next_live(&self, i: usize) -> Option<usize> {
        if i >= self.len {
            return None;
        }
        self.next_at(0, i)
    }

    fn next_at(&self, level: usize, i: usize) -> Option<usize> {
        let words = &self.levels[level];
        let w = i / 64;
        if w >= words.len() {
            return None;
        }
        let bits = self.word(level, w) & (!0u64 << (i % 64));
        if bits != 0 {
            return Some(w * 64 + bits.trailing_zeros() as usize);
        }
        if level + 1 == self.levels.len() {
            return None;
        }
        // The next word of this level with a live bit, from the level above.
        let next = self.next_at(level + 1, w + 1)?;
        Some(next * 64 + self.word(level, next).trailing_zeros() as usize)
    }

    /// The last live position at or before `i`.
    pub fn prev_live(&self, i: usize) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        self.prev_at(0, i.min(self.len - 1))
    }

    fn prev_at(&self, level: usize, i: usize) -> Option<usize> {
        let w = i / 64;
        let keep = if i % 64 == 63 {
            !0u64
        } else {
            (1u64 << (i % 64 + 1)) - 1
        };
        let bits = self.word(level, w) & keep;
        if bits != 0 {
            return Some(w * 64 + 63 - bits.leading_zeros() as usize);
        }
        if w == 0 || level + 1 == self.levels.len() {
            return None;
        }
        let prev = self.prev_at(level + 1, w - 1)?;
        Some(prev * 64 + 63 - self.word(level, prev).leading_zeros() as usize)
    }

    /// Every dead position, ascending (a scan of level 0: for rebuilding what depends on
    /// them, not for seeks).
    pub fn dead(&self) -> impl Iterator<Item = usize> + '_ {
        let len = self.len;
        self.levels[0]
            .iter()
            .enumerate()
            .flat_map(move |(w, word)| {
                let mut dead = !word.load(Ordering::Relaxed);
                std::iter::from_fn(move || {
                    if dead == 0 {
                        return None;
                    }
                    let b = dead.trailing_zeros() as usize;
                    dead &= dead - 1;
                    Some(w * 64 + b)
                })
            })
            .take_while(move |&i| i < len)
    }

    /// Bytes it holds on the heap.
    pub fn heap_bytes(&self) -> usize {
        self.levels.iter().map(|l| l.len() * 8).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_and_previous_live_positions_agree_with_a_scan_across_levels() {
        // Sizes across one, two and three levels, with runs of dead positions longer than a
        // word and than a summary word's reach.
        for len in [0, 1, 63, 64, 65, 4095, 4096, 4097, 300_000] {
            let bits = LiveBits::all_live(len);
            let mut model = vec![true; len];
            let mut s = len as u64 + 1;
            let mut next = || {
                s = s.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                (s >> 33) as usize
            };
            for round in 0..40 {
                if len == 0 {
                    break;
                }
                // Kill or revive a stretch.
                let start = next() % len;
                let end = (start + next() % (len / 3 + 2)).min(len);
                let live = round % 3 == 2;
                for (i, m) in model.iter_mut().enumerate().take(end).skip(start) {
                    assert_eq!(bits.set(i, live), *m != live);
                    *m = live;
                }
                for _ in 0..50 {
                    let i = next() % (len + 2);
                    let want_next = (i..len).find(|&j| model[j]);
                    assert_eq!(bits.next_live(i), want_next, "len {len} next {i}");
                    let want_prev = (0..=i.min(len - 1)).rev().find(|&j| model[j]);
                    assert_eq!(bits.prev_live(i), want_prev, "len {len} prev {i}");
                }
                let dead: Vec<usize> = (0..len).filter(|&j| !model[j]).collect();
                assert_eq!(bits.dead().collect::<Vec<_>>(), dead);
            }
        }
    }
}
