//! Guest memory, engine-free: the bounds of every pointer and length a contract passes, the
//! dirty-chunk accounting that makes an action pay for the memory it writes, and restoring the
//! chunks it wrote from a snapshot.
//!
//! The wasmtime linker, the runtime and the wasmi baseline all call these functions, so the
//! rules are written once and an engine cannot follow them differently. Nothing here knows an
//! engine: memories are byte slices, the dirty-chunk map is the byte slice of the
//! instrumentation's map memory (a byte per [`DIRTY_CHUNK_BYTES`] chunk, set by a wasm store
//! to the chunk of its first byte).

use alloc::boxed::Box;
use alloc::format;
use alloc::vec;
use alloc::vec::Vec;
use core::ops::Range;

use crate::error::{Abort, AbortCode};
use crate::limits::{DIRTY_CHUNK_BYTES, FUEL_PER_DIRTY_CHUNK, FUEL_PER_MEMORY_PAGE, PAGE_SIZE};

/// Chunk indices a wasm store can name without trapping first: the dirty-chunk map is one
/// 64 KiB page, a byte per chunk.
pub const MAP_CHUNKS: usize = PAGE_SIZE as usize;

/// Bytes restored past the end of each dirty chunk: a store is marked by the chunk of its
/// first byte, and the widest store (`v128.store`) writes 16 bytes.
pub const CHUNK_OVERLAP: usize = 16;

/// Reads a length argument: negative lengths are bad arguments, and `max` bounds it.
///
/// # Errors
/// [`AbortCode::BadPointer`] for a negative length, [`AbortCode::LimitExceeded`] past `max`.
#[inline]
pub fn length(len: i32, max: u32, what: &str) -> Result<u32, Abort> {
    if len < 0 {
        return Err(Abort::new(
            AbortCode::BadPointer,
            format!("{what} length is negative ({len})"),
        ));
    }
    let len = len as u32;
    if len > max {
        return Err(Abort::new(
            AbortCode::LimitExceeded,
            format!("{what} is {len} bytes; the limit is {max}"),
        ));
    }
    Ok(len)
}

/// The byte range `[ptr, ptr + len)` of guest memory, if it lies inside `mem_len` bytes.
/// Pointers are unsigned 32-bit offsets, as in wasm32.
///
/// # Errors
/// [`AbortCode::BadPointer`] when any byte of it is outside the memory.
#[inline]
pub fn guest_range(mem_len: usize, ptr: i32, len: u32, what: &str) -> Result<Range<usize>, Abort> {
    let start = ptr as u32 as usize;
    match start.checked_add(len as usize) {
        Some(end) if end <= mem_len => Ok(start..end),
        _ => Err(Abort::new(
            AbortCode::BadPointer,
            format!(
                "{what} [{start}, {start}+{len}) is outside the contract's {mem_len}-byte memory"
            ),
        )),
    }
}

/// The chunks that `range` of a memory of `memory_len` bytes covers (none past its end).
#[inline]
pub fn chunks_of(range: Range<u64>, memory_len: usize) -> Range<u32> {
    let end = range.end.min(memory_len as u64);
    if range.start >= end {
        return 0..0;
    }
    (range.start / DIRTY_CHUNK_BYTES) as u32..(end.div_ceil(DIRTY_CHUNK_BYTES)) as u32
}

/// Marks in `map` the chunks a bulk write of `len` bytes at `dst` is about to touch, before a
/// byte is written, and returns how many were not marked yet (the action pays
/// [`FUEL_PER_DIRTY_CHUNK`] for each). Chunks past the memory are not marked: the operation
/// traps before writing.
#[inline]
pub fn mark_bulk_write(map: &mut [u8], memory_len: usize, dst: i32, len: i32) -> u64 {
    let (dst, len) = (u64::from(dst as u32), u64::from(len as u32));
    let chunks = chunks_of(dst..dst + len, memory_len);
    let map = &mut map[chunks.start as usize..chunks.end as usize];
    let newly = map.iter().filter(|&&b| b == 0).count() as u64;
    map.fill(1);
    newly
}

/// Chunks of the contract's memory the host wrote during an action (wasm marks its own in the
/// instance's map), and, once the action has ended, every chunk it dirtied.
pub struct DirtyChunks {
    /// One bit per chunk index below [`MAP_CHUNKS`].
    marked: Box<[u64]>,
    /// The marked chunks, in the order they were marked.
    chunks: Vec<u32>,
}

impl Default for DirtyChunks {
    fn default() -> Self {
        Self {
            marked: vec![0; MAP_CHUNKS / 64].into_boxed_slice(),
            chunks: Vec::new(),
        }
    }
}

impl DirtyChunks {
    /// Whether `chunk` is marked (a chunk past the map counts as marked: it cannot be written).
    #[inline]
    pub fn is_marked(&self, chunk: u32) -> bool {
        let chunk = chunk as usize;
        chunk >= MAP_CHUNKS || self.marked[chunk / 64] & (1 << (chunk % 64)) != 0
    }

    /// Marks `chunk`; `false` if it was already marked (or cannot be written at all).
    #[inline]
    pub fn mark(&mut self, chunk: u32) -> bool {
        if self.is_marked(chunk) {
            return false;
        }
        let index = chunk as usize;
        self.marked[index / 64] |= 1 << (index % 64);
        self.chunks.push(chunk);
        true
    }

    /// Marks every chunk of `range`, bytes the host wrote into guest memory (already checked
    /// against it). They are paid with all the others when the action ends
    /// ([`DirtyChunks::collect`]).
    #[inline]
    pub fn wrote(&mut self, range: Range<usize>) {
        for chunk in chunks_of(range.start as u64..range.end as u64, usize::MAX) {
            self.mark(chunk);
        }
    }

    /// The marked chunks.
    #[inline]
    pub fn chunks(&self) -> &[u32] {
        &self.chunks
    }

    /// Forgets every mark, keeping the allocations.
    #[inline]
    pub fn clear(&mut self) {
        for &chunk in &self.chunks {
            let chunk = chunk as usize;
            self.marked[chunk / 64] &= !(1 << (chunk % 64));
        }
        self.chunks.clear();
    }

    /// After an action: adds every chunk wasm marked in `map` to the host's own, and returns
    /// the fuel still owed: [`FUEL_PER_DIRTY_CHUNK`] for each chunk no charge point paid for
    /// yet (the `pending` ones wasm marked after its last charge point, and those only the
    /// host wrote), and [`FUEL_PER_MEMORY_PAGE`] per page of the memory's `memory_len` bytes,
    /// for reading the map.
    ///
    /// A successful action wrote only inside its memory, so only the map's first
    /// `memory length / 1 KiB` bytes can be set. A `failed` one may have marked the chunk of
    /// the out-of-bounds store that trapped, anywhere in the map, so then the whole map is
    /// read. Either way the count is the same on every node: it depends only on what the
    /// action did.
    #[inline]
    pub fn collect(&mut self, map: &[u8], memory_len: usize, failed: bool, pending: u64) -> u64 {
        // Chunks only the host wrote (wasm marks its own in the map, and paid for them).
        let host_only = self
            .chunks
            .iter()
            .filter(|&&chunk| map.get(chunk as usize).is_some_and(|&b| b == 0))
            .count() as u64;
        let scanned = if failed {
            map.len()
        } else {
            (memory_len as u64).div_ceil(DIRTY_CHUNK_BYTES) as usize
        };
        // Most of a big map is zero: skip it a block at a time, with a reduction the compiler
        // vectorises (a byte at a time cost ~35 µs for a 512-page memory's 32 KiB map).
        const BLOCK: usize = 256;
        for (block_index, block) in map[..scanned.min(map.len())].chunks(BLOCK).enumerate() {
            if or_all(block) == 0 {
                continue;
            }
            // Eight bytes at a time, and within a word only its set bytes, in order: a byte
            // at a time cost about 130 instructions an action for a two-page memory.
            let words = block.chunks_exact(8);
            let rest = words.remainder();
            for (word_index, word) in words.enumerate() {
                let mut set = u64::from_le_bytes(word.try_into().expect("8 bytes"));
                while set != 0 {
                    let byte = set.trailing_zeros() / 8;
                    set &= !(0xff << (byte * 8));
                    self.mark((block_index * BLOCK + word_index * 8) as u32 + byte);
                }
            }
            let rest_start = block_index * BLOCK + block.len() - rest.len();
            for (i, &byte) in rest.iter().enumerate() {
                if byte != 0 {
                    self.mark((rest_start + i) as u32);
                }
            }
        }
        let pages = (memory_len as u64).div_ceil(PAGE_SIZE);
        (pending + host_only) * FUEL_PER_DIRTY_CHUNK + pages * FUEL_PER_MEMORY_PAGE
    }

    /// Clears the marks of every collected chunk in the instrumentation's `map`, so the next
    /// action starts with none.
    #[inline]
    pub fn unmark(&self, map: &mut [u8]) {
        for &chunk in &self.chunks {
            if let Some(byte) = map.get_mut(chunk as usize) {
                *byte = 0;
            }
        }
    }
}

/// Every byte of `bytes` OR-ed together (zero if and only if all are zero).
#[inline]
fn or_all(bytes: &[u8]) -> u64 {
    // SAFETY: every bit pattern is a valid u64.
    let (head, words, tail) = unsafe { bytes.align_to::<u64>() };
    let edges = head.iter().chain(tail).fold(0u8, |acc, &b| acc | b);
    words.iter().fold(u64::from(edges), |acc, &w| acc | w)
}

/// Whether every byte of `bytes` is zero, a word at a time.
fn is_zero(bytes: &[u8]) -> bool {
    or_all(bytes) == 0
}

/// A contract's memory right after instantiation, kept sparse: only the pages that were not
/// all zero (its data segments).
pub struct Snapshot {
    memory_len: usize,
    /// By page index; `None` for a page that was all zero.
    pages: Vec<Option<Box<[u8]>>>,
}

impl Snapshot {
    /// Takes the snapshot of a fresh instance's `memory`.
    pub fn take(memory: &[u8]) -> Self {
        let pages = memory
            .chunks(PAGE_SIZE as usize)
            .map(|page| (!is_zero(page)).then(|| page.into()))
            .collect();
        Self {
            memory_len: memory.len(),
            pages,
        }
    }

    /// Heap bytes the snapshot holds.
    pub fn bytes(&self) -> usize {
        let pages: usize = self.pages.iter().flatten().map(|page| page.len()).sum();
        pages + self.pages.len() * core::mem::size_of::<Option<Box<[u8]>>>()
    }

    /// Copies every chunk of `dirty` (and the few bytes a store that began in it may have
    /// written past it) back into `memory`; `false`, with nothing copied, if `memory` is no
    /// longer the size it was (it grew), and cannot be restored in place.
    #[inline]
    pub fn restore(&self, memory: &mut [u8], dirty: &DirtyChunks) -> bool {
        if memory.len() != self.memory_len {
            return false;
        }
        for &chunk in dirty.chunks() {
            self.restore_chunk(memory, chunk);
        }
        true
    }

    fn restore_chunk(&self, memory: &mut [u8], chunk: u32) {
        let start = chunk as usize * DIRTY_CHUNK_BYTES as usize;
        let end = (start + DIRTY_CHUNK_BYTES as usize + CHUNK_OVERLAP).min(memory.len());
        let mut at = start;
        while at < end {
            let page = at / PAGE_SIZE as usize;
            let within = at % PAGE_SIZE as usize;
            let chunk_end = end.min((page + 1) * PAGE_SIZE as usize);
            let target = &mut memory[at..chunk_end];
            match self.pages.get(page).and_then(Option::as_deref) {
                Some(pristine) => target.copy_from_slice(&pristine[within..within + target.len()]),
                None => target.fill(0),
            }
            at = chunk_end;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_writes_mark_each_chunk_once() {
        let mut dirty = DirtyChunks::default();
        let chunk = DIRTY_CHUNK_BYTES as usize;
        dirty.wrote(10..20);
        dirty.wrote(30..40);
        dirty.wrote(chunk - 1..chunk + 1);
        dirty.wrote(5 * chunk..5 * chunk);
        dirty.wrote(8 * chunk..10 * chunk);
        assert_eq!(dirty.chunks(), [0, 1, 8, 9]);
        dirty.clear();
        assert!(!dirty.is_marked(8));
        dirty.wrote(10..20);
        assert_eq!(dirty.chunks(), [0]);
    }

    #[test]
    fn collecting_marks_every_set_byte_of_the_map() {
        let chunk = DIRTY_CHUNK_BYTES as usize;
        // A map whose length is no multiple of 8, bytes set in assorted words and blocks.
        let mut map = vec![0u8; 8 * 256 + 5];
        let set = [0usize, 7, 8, 9, 63, 255, 256, 1000, 1031, 2047, 2048, 2052];
        for (i, &at) in set.iter().enumerate() {
            map[at] = [1, 2, 0x80, 0xff][i % 4];
        }
        let memory_len = map.len() * chunk;
        let mut dirty = DirtyChunks::default();
        dirty.wrote(3 * chunk..3 * chunk + 1); // a chunk only the host wrote
        let fuel = dirty.collect(&map, memory_len, false, 2);
        let mut expected: Vec<u32> = set.iter().map(|&i| i as u32).collect();
        expected.push(3);
        expected.sort_unstable();
        let mut got = dirty.chunks().to_vec();
        got.sort_unstable();
        assert_eq!(got, expected);
        let pages = (memory_len as u64).div_ceil(PAGE_SIZE);
        assert_eq!(
            fuel,
            (2 + 1) * FUEL_PER_DIRTY_CHUNK + pages * FUEL_PER_MEMORY_PAGE
        );
        // A successful action's scan stops at its memory's length.
        let mut dirty = DirtyChunks::default();
        dirty.collect(&map, 9 * chunk, false, 0);
        assert_eq!(dirty.chunks(), [0, 7, 8]);
    }

    #[test]
    fn pointers_outside_the_memory_and_bad_lengths_are_refused() {
        assert_eq!(guest_range(100, 90, 10, "key").unwrap(), 90..100);
        assert_eq!(
            guest_range(100, 91, 10, "key").unwrap_err().code,
            AbortCode::BadPointer
        );
        // A negative pointer is a large unsigned offset, never a wrap to the start.
        assert!(guest_range(100, -1, 1, "key").is_err());
        assert_eq!(
            length(-1, 10, "key").unwrap_err().code,
            AbortCode::BadPointer
        );
        assert_eq!(
            length(11, 10, "key").unwrap_err().code,
            AbortCode::LimitExceeded
        );
    }

    #[test]
    fn a_bulk_write_pays_only_for_chunks_not_yet_marked_inside_the_memory() {
        let chunk = DIRTY_CHUNK_BYTES as usize;
        let mut map = vec![0u8; MAP_CHUNKS];
        assert_eq!(mark_bulk_write(&mut map, 4 * chunk, 0, 2 * chunk as i32), 2);
        assert_eq!(
            mark_bulk_write(&mut map, 4 * chunk, chunk as i32, 2 * chunk as i32),
            1
        );
        // Past the memory nothing is marked: the write traps first.
        assert_eq!(mark_bulk_write(&mut map, 4 * chunk, 4 * chunk as i32, 8), 0);
        assert_eq!(&map[..5], [1, 1, 1, 0, 0]);
    }

    #[test]
    fn restoring_copies_back_dirty_chunks_and_the_bytes_just_past_them() {
        let chunk = DIRTY_CHUNK_BYTES as usize;
        let mut memory = vec![0u8; 2 * PAGE_SIZE as usize];
        memory[PAGE_SIZE as usize..].fill(7);
        let snapshot = Snapshot::take(&memory);
        // Only the non-zero page is kept.
        assert!(snapshot.bytes() < 2 * PAGE_SIZE as usize);
        memory.fill(1);
        let mut dirty = DirtyChunks::default();
        dirty.mark(0);
        dirty.mark((PAGE_SIZE as usize / chunk) as u32);
        assert!(snapshot.restore(&mut memory, &dirty));
        assert!(memory[..chunk + CHUNK_OVERLAP].iter().all(|&b| b == 0));
        assert_eq!(memory[chunk + CHUNK_OVERLAP], 1);
        let page = PAGE_SIZE as usize;
        assert!(memory[page..page + chunk].iter().all(|&b| b == 7));
        assert!(!snapshot.restore(&mut vec![0; 3 * page], &dirty));
    }
}
