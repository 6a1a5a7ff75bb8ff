//! The sorted run: the whole state at one block, in one file, sorted by key. It is the log
//! store's snapshot, written in the background by merging the previous run with the blocks
//! committed since ([`super::merge`]), and read by point lookups that cost one block read.
//!
//! Layout (`run-<height>.trun`, little-endian):
//!
//! ```text
//! "TALLYRUN" version:u32 head:BlockHeader(borsh)
//! block*      [len:u32][crc32:u32][entry*]   entry = [klen:u32][vlen:u32][key][value]
//! meta        [count:u32] ([klen:u32][first key][offset:u64][len:u32])*   the sparse index
//!             [hashes:u32][bits:u64][bit bytes]                           the bloom filter
//! footer      [meta offset:u64][meta len:u64][entries:u64][meta crc32:u32]"TALLYEND"
//! ```
//!
//! Blocks hold about [`BLOCK_BYTES`] of entries, so a lookup reads one block (as RocksDB's
//! default 4 KiB `block_size` does); the sparse index (each block's first key) and the bloom
//! filter stay in memory: about 10 bytes per key for the filter and 0.5% of the data for the
//! index.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::block::BlockHeader;
use crate::store::sort_prefix;

use crate::store::error::{StoreError, StoreResult};
use crate::store::log::vfs::{VFile, Vfs};

mod bloom;
mod mask;
mod seek;
mod writer;

pub(crate) use bloom::bloom_hash;
use bloom::{BLOOM_BLOCK_BITS, Bloom, BloomLayout, MAX_BLOOM_HASHES};
pub use mask::{EntryAt, RunMask};
pub use seek::SeekCost;
pub use writer::RunWriter;

const MAGIC: &[u8; 8] = b"TALLYRUN";
const END_MAGIC: &[u8; 8] = b"TALLYEND";
/// The run format's version. Version 4 blocks its bloom filter (`Bloom`); version 5's
/// header holds the block header's fees (issue 24), version 6's its snapshot (issue 25), so
/// older runs are no longer read.
pub const VERSION: u32 = 6;
/// The oldest version this code reads.
const OLDEST_VERSION: u32 = 6;
const FOOTER_LEN: u64 = 8 + 8 + 8 + 4 + 8;
/// The size the run's data blocks aim for: one page, RocksDB's default `block_size`. A
/// writer's choice (readers follow the sparse index), so it can change without a new version.
/// 1 KiB blocks were measured at 10M accounts, zipf (`tally bench --accounts 10000000 --dist
/// zipf --unsigned --threads 1`, 6 alternated rounds): 1.08 times the transfers a second
/// (0.91–1.21) for four times the sparse index (peak RSS 371 to 441 MiB), so not taken.
pub const BLOCK_BYTES: usize = 4096;
/// Keys and values are bounded well below this by the host API; a run entry claiming more is
/// damage.
const MAX_ENTRY_BYTES: u64 = 1 << 30;

/// A run block read for [`Run::position`], kept for the next call.
#[derive(Default)]
pub struct KeptBlock {
    /// [`Run::id`] of its run (0: none).
    run: u64,
    block: usize,
    buf: Vec<u8>,
    /// Where each of its entries starts.
    starts: Vec<usize>,
}

/// An open run: its sparse index and filter in memory, its blocks on disk.
pub struct Run {
    /// Different for every run opened by this process (from 1): what a thread's kept block
    /// ([`seek`]) is checked against, since a run's address may be reused once it is gone.
    id: u64,
    file: Arc<dyn VFile>,
    path: PathBuf,
    head: BlockHeader,
    /// First keys of the blocks, back to back; `blocks[i].0` is the end of block i's key.
    first_keys: Vec<u8>,
    /// Each block's first key's 16-byte prefix as an integer (`journal::sort_prefix`): a
    /// lookup's binary search compares these, and whole keys only on a tie.
    first_prefixes: Vec<u128>,
    blocks: Vec<(u32, u64, u32)>,
    bloom: Bloom,
    entries: u64,
    size: u64,
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn le_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Reads one entry of a block at `at`: `(key, value, next)`, or `None` if damaged.
fn entry_at(block: &[u8], at: usize) -> Option<(&[u8], &[u8], usize)> {
    let lens = block.get(at..at.checked_add(8)?)?;
    let (klen, vlen) = (le_u32(lens, 0) as usize, le_u32(lens, 4) as usize);
    let k = at + 8;
    let v = k.checked_add(klen)?;
    let end = v.checked_add(vlen)?;
    Some((block.get(k..v)?, block.get(v..end)?, end))
}

/// The run header's length: magic, version, borsh of a [`BlockHeader`] (fixed length).
const HEADER_LEN: u64 = 12 + super::record::BLOCK_HEADER_LEN;

impl Run {
    /// Opens the run at `path`. Any failed check is corruption of `path`.
    pub fn open(vfs: &dyn Vfs, path: &Path) -> StoreResult<Self> {
        let file = vfs.open_read(path)?;
        let size = file.len()?;
        let (head_bytes, version) = read_header(&*file, path, size)?;
        let head: BlockHeader = borsh::from_slice(&head_bytes[12..])
            .map_err(|_| corrupt(path, Some(12), "the run's block header does not decode"))?;
        let (meta_offset, meta, entries) = read_index(&*file, path, size, &head_bytes)?;
        let bad = || corrupt(path, Some(meta_offset), "the run's index does not decode");
        let (first_keys, blocks, at) = parse_blocks(&meta, path, meta_offset)?;
        let rest = meta.get(at..at + 12).ok_or_else(bad)?;
        let (hashes, nbits) = (le_u32(rest, 0), le_u64(rest, 4));
        let bits = meta.get(at + 12..).ok_or_else(bad)?.to_vec();
        let whole_blocks = version < 4 || nbits.is_multiple_of(BLOOM_BLOCK_BITS);
        if bits.len() as u64 != nbits.div_ceil(8)
            || nbits == 0
            || !(1..=MAX_BLOOM_HASHES).contains(&hashes)
            || !whole_blocks
        {
            return Err(bad());
        }
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        Ok(Self {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            file,
            path: path.to_path_buf(),
            head,
            first_prefixes: (0..blocks.len())
                .map(|i| {
                    let start = if i == 0 { 0 } else { blocks[i - 1].0 as usize };
                    sort_prefix(&first_keys[start..blocks[i].0 as usize])
                })
                .collect(),
            first_keys,
            blocks,
            bloom: Bloom {
                bits,
                layout: BloomLayout {
                    nbits,
                    hashes,
                    blocked: version >= 4,
                },
            },
            entries,
            size,
        })
    }

    /// The block the run's state is at.
    pub fn head(&self) -> &BlockHeader {
        &self.head
    }

    /// Its file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Entries in the run.
    pub fn entries(&self) -> u64 {
        self.entries
    }

    /// Its size on disk.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Bytes its index and filter hold in memory.
    pub fn heap_bytes(&self) -> usize {
        self.first_keys.capacity()
            + self.blocks.capacity() * 16
            + self.first_prefixes.capacity() * 16
            + self.bloom.bits.capacity()
    }

    fn first_key(&self, i: usize) -> &[u8] {
        let start = if i == 0 {
            0
        } else {
            self.blocks[i - 1].0 as usize
        };
        &self.first_keys[start..self.blocks[i].0 as usize]
    }

    fn read_block(&self, i: usize, buf: &mut Vec<u8>) -> StoreResult<()> {
        let (_, offset, len) = self.blocks[i];
        buf.resize(len as usize, 0);
        self.file.read_exact_at(buf, offset)?;
        let body_len = le_u32(buf, 0) as usize;
        if body_len + 8 != buf.len() || crc32fast::hash(&buf[8..]) != le_u32(buf, 4) {
            return Err(StoreError::corrupted(
                &self.path,
                Some(offset),
                "a run block fails its checksum",
            ));
        }
        Ok(())
    }

    /// Whether the run holds `key`, its value appended to `out` if it does, reading at most
    /// one block into `buf`; with how many bytes it read.
    pub fn get(
        &self,
        key: &[u8],
        buf: &mut Vec<u8>,
        out: &mut Vec<u8>,
    ) -> StoreResult<(bool, u64)> {
        let Some(block) = self.block_of(key) else {
            return Ok((false, 0));
        };
        self.read_block(block, buf)?;
        let read = buf.len() as u64;
        let prefix = sort_prefix(key);
        let mut at = 8;
        while at < buf.len() {
            let (k, v, next) = entry_at(buf, at).ok_or_else(|| self.bad_entry(block))?;
            let order = sort_prefix(k).cmp(&prefix).then_with(|| k.cmp(key));
            match order {
                std::cmp::Ordering::Equal => {
                    out.extend_from_slice(v);
                    return Ok((true, read));
                }
                std::cmp::Ordering::Greater => break,
                std::cmp::Ordering::Less => at = next,
            }
        }
        Ok((false, read))
    }

    /// Where `key`'s entry lies, if the run holds it, reading at most one block into `kept`
    /// (none if `kept` holds it already: a block's deletions are sorted, so consecutive ones
    /// mostly fall in one run block, and each then costs a binary search of its entries);
    /// with how many bytes it read.
    pub fn position(
        &self,
        key: &[u8],
        kept: &mut KeptBlock,
    ) -> StoreResult<(Option<EntryAt>, u64)> {
        let Some(block) = self.block_of(key) else {
            return Ok((None, 0));
        };
        let mut read = 0;
        if (kept.run, kept.block) != (self.id, block) {
            kept.run = 0;
            self.read_block(block, &mut kept.buf)?;
            read = kept.buf.len() as u64;
            kept.starts.clear();
            let mut at = 8;
            while at < kept.buf.len() {
                let (_, _, next) = entry_at(&kept.buf, at).ok_or_else(|| self.bad_entry(block))?;
                kept.starts.push(at);
                at = next;
            }
            (kept.run, kept.block) = (self.id, block);
        }
        let key_at = |&at: &usize| {
            let (k, _, _) = entry_at(&kept.buf, at).expect("decoded when read");
            k
        };
        let found = kept.starts.binary_search_by(|at| key_at(at).cmp(key)).ok();
        let at = found.map(|index| EntryAt {
            block,
            index,
            entries: kept.starts.len(),
        });
        Ok((at, read))
    }

    /// The block that holds `key` if the run does: the last one starting at or before it,
    /// unless the bloom filter says the run does not hold it.
    fn block_of(&self, key: &[u8]) -> Option<usize> {
        if self.blocks.is_empty() || !self.bloom.may_contain(bloom_hash(key)) {
            return None;
        }
        // The number of blocks whose first key is <= key. Prefix order never contradicts key
        // order, so only equal prefixes need the whole keys.
        let prefix = sort_prefix(key);
        let (mut lo, mut hi) = (0, self.blocks.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            let at_or_below = match self.first_prefixes[mid].cmp(&prefix) {
                std::cmp::Ordering::Less => true,
                std::cmp::Ordering::Greater => false,
                std::cmp::Ordering::Equal => self.first_key(mid) <= key,
            };
            if at_or_below {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo.checked_sub(1)
    }

    fn bad_entry(&self, block: usize) -> StoreError {
        StoreError::corrupted(
            &self.path,
            Some(self.blocks[block].1),
            "a run entry does not decode",
        )
    }

    /// Blocks in the run.
    pub fn block_count(&self) -> usize {
        self.blocks.len()
    }

    /// Every entry, in key order.
    pub fn iter(self: &Arc<Self>) -> RunIter {
        RunIter {
            run: self.clone(),
            block: 0,
            buf: Vec::new(),
            at: 0,
        }
    }
}

/// The entries of a run in key order, a block at a time.
pub struct RunIter {
    run: Arc<Run>,
    block: usize,
    buf: Vec<u8>,
    at: usize,
}

impl RunIter {
    /// The next entry, copied into `key` and `value`; `false` at the end.
    pub fn next_into(&mut self, key: &mut Vec<u8>, value: &mut Vec<u8>) -> StoreResult<bool> {
        while self.at >= self.buf.len() {
            if self.block >= self.run.blocks.len() {
                return Ok(false);
            }
            self.run.read_block(self.block, &mut self.buf)?;
            self.block += 1;
            self.at = 8;
        }
        let (k, v, next) = entry_at(&self.buf, self.at).ok_or_else(|| {
            StoreError::corrupted(&self.run.path, None, "a run entry does not decode")
        })?;
        if k.len() as u64 + v.len() as u64 > MAX_ENTRY_BYTES {
            return Err(StoreError::corrupted(
                &self.run.path,
                None,
                "a run entry is too large",
            ));
        }
        key.clear();
        key.extend_from_slice(k);
        value.clear();
        value.extend_from_slice(v);
        self.at = next;
        Ok(true)
    }
}

/// `path`'s corruption at `offset`.
fn corrupt(path: &Path, offset: Option<u64>, why: &str) -> StoreError {
    StoreError::corrupted(path, offset, why)
}

/// A run's header bytes (magic, version, block header) and its format version.
fn read_header(file: &dyn VFile, path: &Path, size: u64) -> StoreResult<(Vec<u8>, u32)> {
    let mut head_bytes = vec![0u8; HEADER_LEN.min(size) as usize];
    file.read_exact_at(&mut head_bytes, 0)
        .map_err(|_| corrupt(path, Some(0), "the run is shorter than its header"))?;
    if head_bytes.len() < HEADER_LEN as usize || &head_bytes[..8] != MAGIC {
        return Err(corrupt(path, Some(0), "not a Tally run (bad magic)"));
    }
    let version = le_u32(&head_bytes, 8);
    if !(OLDEST_VERSION..=VERSION).contains(&version) {
        return Err(StoreError::Version {
            path: path.to_path_buf(),
            found: version,
            expected: VERSION,
        });
    }
    Ok((head_bytes, version))
}

/// A run's index (the block table and bloom filter) as its footer locates it, checked
/// against the checksum the footer holds over the header and the index: its offset, its
/// bytes and the run's entry count.
fn read_index(
    file: &dyn VFile,
    path: &Path,
    size: u64,
    head_bytes: &[u8],
) -> StoreResult<(u64, Vec<u8>, u64)> {
    if size < HEADER_LEN + FOOTER_LEN {
        return Err(corrupt(path, None, "the run has no footer"));
    }
    let damaged = || corrupt(path, Some(size - FOOTER_LEN), "the run's footer is damaged");
    let mut footer = [0u8; FOOTER_LEN as usize];
    file.read_exact_at(&mut footer, size - FOOTER_LEN)?;
    if &footer[28..] != END_MAGIC {
        return Err(damaged());
    }
    let (meta_offset, meta_len, entries) =
        (le_u64(&footer, 0), le_u64(&footer, 8), le_u64(&footer, 16));
    if meta_offset.checked_add(meta_len) != Some(size - FOOTER_LEN) {
        return Err(damaged());
    }
    let mut meta = vec![0u8; meta_len as usize];
    file.read_exact_at(&mut meta, meta_offset)?;
    let mut crc = crc32fast::Hasher::new();
    crc.update(head_bytes);
    crc.update(&meta);
    if crc.finalize() != le_u32(&footer, 24) {
        return Err(corrupt(
            path,
            Some(meta_offset),
            "the run's header or index fails its checksum",
        ));
    }
    Ok((meta_offset, meta, entries))
}

/// A block of a run in its index: the end of its first key in the run's first keys, its
/// offset and its length.
type BlockEntry = (u32, u64, u32);

/// The block table at the start of a run's index `meta`: the blocks' first keys back to back,
/// each block's (end of its first key, offset, length), and where the table ends in `meta`.
fn parse_blocks(
    meta: &[u8],
    path: &Path,
    meta_offset: u64,
) -> StoreResult<(Vec<u8>, Vec<BlockEntry>, usize)> {
    let bad = || corrupt(path, Some(meta_offset), "the run's index does not decode");
    let count = le_u32(meta.get(..4).ok_or_else(bad)?, 0) as usize;
    let mut at = 4usize;
    // Every index entry takes at least 16 bytes, so a count the index cannot hold is damage,
    // not an allocation to attempt. (The checksum is no defence: a hostile file has a
    // matching one.)
    if count > meta.len() / 16 {
        return Err(bad());
    }
    let mut first_keys = Vec::new();
    let mut blocks = Vec::with_capacity(count);
    // Blocks lie in order between the header and the index, each at least its own 8-byte
    // frame: reading one then never leaves the file's data nor allocates more than it.
    let mut data_end = HEADER_LEN;
    for _ in 0..count {
        let klen = le_u32(meta.get(at..at + 4).ok_or_else(bad)?, 0) as usize;
        at += 4;
        first_keys.extend_from_slice(meta.get(at..at + klen).ok_or_else(bad)?);
        at += klen;
        let rest = meta.get(at..at + 12).ok_or_else(bad)?;
        let (offset, len) = (le_u64(rest, 0), le_u32(rest, 8));
        let end = offset.checked_add(u64::from(len)).ok_or_else(bad)?;
        if offset < data_end || len < 8 || end > meta_offset {
            return Err(corrupt(
                path,
                Some(meta_offset),
                "the run's index points outside its data",
            ));
        }
        data_end = end;
        blocks.push((first_keys.len() as u32, offset, len));
        at += 12;
    }
    Ok((first_keys, blocks, at))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::log::fault::FaultFs;

    fn header(height: u64) -> BlockHeader {
        BlockHeader {
            height,
            previous: [1; 32],
            timestamp_ms: 5,
            transactions_root: [2; 32],
            state_checksum: [3; 32],
            ..Default::default()
        }
    }

    #[test]
    fn a_run_finds_every_key_it_holds_and_none_it_does_not() {
        let fs = FaultFs::new(1);
        let path = Path::new("/d/run-7.trun");
        let mut w = RunWriter::new(fs.create(path).unwrap(), &header(7)).unwrap();
        let key = |i: u32| format!("key{:08}", i * 2).into_bytes();
        for i in 0..20_000u32 {
            let value = vec![i as u8; (i % 50) as usize];
            w.add(&key(i), &value).unwrap();
        }
        w.finish().unwrap();
        let run = Arc::new(Run::open(&fs, path).unwrap());
        assert_eq!(run.head().height, 7);
        assert_eq!(run.entries(), 20_000);
        let (mut buf, mut out) = (Vec::new(), Vec::new());
        for i in (0..20_000u32).step_by(7) {
            let k = key(i);
            out.clear();
            assert!(run.get(&k, &mut buf, &mut out).unwrap().0);
            assert_eq!(out, vec![i as u8; (i % 50) as usize]);
            let missing = format!("key{:08}", i * 2 + 1).into_bytes();
            out.clear();
            assert!(!run.get(&missing, &mut buf, &mut out).unwrap().0);
            assert!(out.is_empty());
        }
        let (mut k, mut v) = (Vec::new(), Vec::new());
        let mut it = run.iter();
        let mut n = 0;
        while it.next_into(&mut k, &mut v).unwrap() {
            assert_eq!(k, key(n));
            n += 1;
        }
        assert_eq!(n, 20_000);
    }

    /// Writes a run of 1,000 keys at `path`; returns its bytes.
    fn thousand_key_run(fs: &FaultFs, path: &Path) -> Vec<u8> {
        let mut w = RunWriter::new(fs.create(path).unwrap(), &header(1)).unwrap();
        for i in 0..1000u32 {
            w.add(&i.to_be_bytes(), b"value").unwrap();
        }
        w.finish().unwrap();
        fs.read_file(path).unwrap()
    }

    #[test]
    fn a_damaged_run_is_corruption() {
        let (fs, path) = (FaultFs::new(1), Path::new("/d/run-1.trun"));
        let good = thousand_key_run(&fs, path);
        for at in [3, 200, good.len() - 50, good.len() - 3] {
            let mut bad = good.clone();
            bad[at] ^= 1;
            fs.write_file(path, &bad);
            let result = Run::open(&fs, path).and_then(|run| {
                let run = Arc::new(run);
                let (mut k, mut v) = (Vec::new(), Vec::new());
                let mut it = run.iter();
                while it.next_into(&mut k, &mut v)? {}
                Ok(())
            });
            assert!(
                matches!(result, Err(StoreError::Corrupted { .. })),
                "byte {at}: {:?}",
                result.err()
            );
        }
    }

    /// A data directory is hostile: a run whose checksums were recomputed after its index was
    /// edited must be refused, never read past its data, allocated from or probed forever.
    #[test]
    fn a_forged_run_index_is_corruption_not_a_panic_or_a_stall() {
        let (fs, path) = (FaultFs::new(1), Path::new("/d/run-1.trun"));
        let good = thousand_key_run(&fs, path);
        let footer = good.len() - FOOTER_LEN as usize;
        let meta_offset = le_u64(&good, footer) as usize;
        // Rewrites the index with `edit`, then recomputes the checksum as a forger would.
        let forge = |edit: &dyn Fn(&mut [u8])| {
            let mut bad = good.clone();
            edit(&mut bad[meta_offset..footer]);
            let mut crc = crc32fast::Hasher::new();
            crc.update(&bad[..HEADER_LEN as usize]);
            crc.update(&bad[meta_offset..footer]);
            bad[footer + 24..footer + 28].copy_from_slice(&crc.finalize().to_le_bytes());
            fs.write_file(path, &bad);
            Run::open(&fs, path).map(|_| ())
        };
        assert!(forge(&|_| {}).is_ok(), "the forger's checksum is right");
        // The first block's entry: [count:u32][klen:u32][4-byte key][offset:u64][len:u32].
        type Edit<'a> = &'a dyn Fn(&mut [u8]);
        let cases: [(&str, Edit); 5] = [
            ("a count the index cannot hold", &|m| {
                m[..4].copy_from_slice(&u32::MAX.to_le_bytes())
            }),
            ("a block shorter than its frame", &|m| {
                m[16..20].copy_from_slice(&3u32.to_le_bytes())
            }),
            ("a block past the data", &|m| {
                m[16..20].copy_from_slice(&u32::MAX.to_le_bytes())
            }),
            ("a block inside the header", &|m| {
                m[8..16].copy_from_slice(&0u64.to_le_bytes())
            }),
            ("four billion filter probes", &|m| {
                let count = le_u32(m, 0) as usize;
                let mut at = 4;
                for _ in 0..count {
                    at += 4 + le_u32(m, at) as usize + 12;
                }
                m[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
            }),
        ];
        for (what, edit) in cases {
            let result = forge(edit);
            assert!(
                matches!(result, Err(StoreError::Corrupted { .. })),
                "{what}: {result:?}"
            );
        }
    }

    #[test]
    fn keys_out_of_order_are_an_error_not_a_panic() {
        let fs = FaultFs::new(1);
        let mut w =
            RunWriter::new(fs.create(Path::new("/d/run-2.trun")).unwrap(), &header(2)).unwrap();
        w.add(b"b", b"1").unwrap();
        let err = w.add(b"a", b"2").unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
        assert!(w.add(b"b", b"again").is_err(), "a repeated key too");
    }
}
