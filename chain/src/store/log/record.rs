//! Log records: framing, the block record's payload, and reading one change or a block's
//! changes in order straight from a segment file, without decoding the whole block.
//!
//! A record is `[payload length:u32][crc32 of payload:u32][crc32 of the previous 8 bytes:u32]`
//! then the payload. The header has its own checksum so that a damaged length is caught as
//! damage, never mistaken for a record cut short by a crash.
//!
//! A block record's payload is `[kind = 1][retain_from:u64]` then the borsh of the
//! [`BlockRecord`]: its 112-byte header, its body as `[len:u32][bytes]`, and its changes as
//! `[count:u32]` then `[klen:u32][key][0 | 1 [vlen:u32][value]]` each, sorted by key. The
//! index points at the `klen` of a key's change.

use std::io::{self, Read, Write};
use std::ops::Deref;

use crate::block::BlockHeader;
use crate::store::{BlockRecord, ChangeFn, ChangeSource};

use super::vfs::VFile;
use crate::store::error::{StoreError, StoreResult};

/// Bytes of a record header.
pub const RECORD_HEADER_LEN: u64 = 12;
/// Bytes of a borsh-encoded [`BlockHeader`]: height, previous id, time, transactions root,
/// proposer, five prices, five usages, state checksum, snapshot (height and digest).
pub const BLOCK_HEADER_LEN: u64 = 8 + 32 + 8 + 32 + 8 + 40 + 40 + 32 + 40;
/// The payload's kind byte for a block record.
pub const KIND_BLOCK: u8 = 1;
/// Bytes before the borsh of the block: kind and `retain_from`.
pub const PREFIX_LEN: u64 = 9;
/// Longest key a change may have when read back: far above the host API's key limit, so only
/// damage trips it.
const MAX_KEY: u64 = 1 << 20;
/// Longest value, likewise (the largest value is contract code).
const MAX_VALUE: u64 = 1 << 30;

/// A record header that passed its own checksum.
#[derive(Debug, Clone, Copy)]
pub struct RecordHeader {
    /// Payload length.
    pub len: u64,
    /// crc32 of the payload.
    pub payload_crc: u32,
}

/// Parses a record header; `None` if its checksum fails.
pub fn parse_header(bytes: &[u8; RECORD_HEADER_LEN as usize]) -> Option<RecordHeader> {
    let word = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().expect("4 bytes"));
    (crc32fast::hash(&bytes[..8]) == word(8)).then(|| RecordHeader {
        len: word(0) as u64,
        payload_crc: word(4),
    })
}

/// The 12-byte header of a payload of `len` bytes with checksum `crc`.
pub fn header_bytes(len: u32, crc: u32) -> [u8; RECORD_HEADER_LEN as usize] {
    let mut h = [0u8; RECORD_HEADER_LEN as usize];
    h[..4].copy_from_slice(&len.to_le_bytes());
    h[4..8].copy_from_slice(&crc.to_le_bytes());
    let hc = crc32fast::hash(&h[..8]);
    h[8..].copy_from_slice(&hc.to_le_bytes());
    h
}

/// A record's payload length as its header stores it.
fn record_len(block: &BlockRecord, len: u64) -> io::Result<u32> {
    u32::try_from(len).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "block {} has a record of {len} bytes; a record holds at most 4 GiB",
                block.header.height
            ),
        )
    })
}

/// A sink that only counts and checksums (the first pass over a large record).
struct Measure {
    len: u64,
    crc: crc32fast::Hasher,
}

impl Write for Measure {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.len += buf.len() as u64;
        self.crc.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Writes the payload of `block`'s record: the borsh of `[KIND_BLOCK][retain_from]` and the
/// [`BlockRecord`], written field by field, not by a pass of borsh's generic serializer (which
/// the record used to be: 1,515 instructions a transfer of a block's commit at 10,000 accounts,
/// against 583 with five appends a change; callgrind of `tally bench --unsigned --threads 1`).
/// The changes are one append: [`crate::store::Changes`] holds them in this encoding.
fn write_payload(block: &BlockRecord, retain_from: u64, out: &mut impl Write) -> io::Result<()> {
    // The changes are held in the record's encoding: one copy.
    write_prefix(block, retain_from, block.changes.len(), out)?;
    out.write_all(block.changes.encoded())
}

/// What a block record's payload holds before its changes: kind, `retain_from`, header, body,
/// and the number of changes that follow.
fn write_prefix(
    block: &BlockRecord,
    retain_from: u64,
    changes: usize,
    out: &mut impl Write,
) -> io::Result<()> {
    out.write_all(&[KIND_BLOCK])?;
    out.write_all(&retain_from.to_le_bytes())?;
    borsh::BorshSerialize::serialize(&block.header, out)?;
    out.write_all(&len_u32(block.body.len())?)?;
    out.write_all(&block.body)?;
    out.write_all(&len_u32(changes)?)
}

/// One change as a record holds it: `[klen:u32][key][0 | 1 [vlen:u32][value]]`.
fn write_change(key: &[u8], value: Option<&[u8]>, out: &mut impl Write) -> io::Result<()> {
    out.write_all(&len_u32(key.len())?)?;
    out.write_all(key)?;
    match value {
        Some(value) => {
            out.write_all(&[1])?;
            out.write_all(&len_u32(value.len())?)?;
            out.write_all(value)
        }
        None => out.write_all(&[0]),
    }
}

/// Payloads up to this many bytes are encoded once, into memory, and checksummed in one pass
/// over their bytes; longer ones are written twice, measured and then written, keeping no copy.
/// A block of 5,000 transfers has a payload of about 1.6 MB; a block's transactions are at
/// most 16 MiB (the bandwidth maximum).
const ONE_PASS_MAX: u64 = 32 << 20;

/// The largest record buffer a store keeps between blocks: a block of 5,000 transfers needs
/// about 1.6 MB; one that needed more (a flood of new keys) gives its buffer back.
const KEEP_SCRATCH_BYTES: usize = 4 << 20;

/// The exact length of `block`'s payload.
fn payload_len(block: &BlockRecord) -> u64 {
    let changes = block.changes.encoded().len() as u64;
    PREFIX_LEN + BLOCK_HEADER_LEN + 4 + block.body.len() as u64 + 4 + changes
}

/// A length as the payload stores it (borsh's `u32`), refused past that as borsh refuses it.
fn len_u32(len: usize) -> io::Result<[u8; 4]> {
    u32::try_from(len).map(u32::to_le_bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "a length past u32 in a block record",
        )
    })
}

/// `block`'s record, framed: the payload's length and checksum, then the payload. A payload
/// of at most `ONE_PASS_MAX` (32 MiB) is encoded once, after room for the header, into
/// `scratch` (cleared first; its allocation is kept for the next block up to
/// `KEEP_SCRATCH_BYTES`, 4 MiB), and the framed record written with one call; a longer one is measured by a first pass that
/// stores nothing, so that a block of any size costs no second copy in memory. Returns the
/// payload length.
pub fn write_block_record(
    block: &BlockRecord,
    retain_from: u64,
    out: &mut impl Write,
    scratch: &mut Vec<u8>,
) -> StoreResult<u64> {
    let len = payload_len(block);
    if len <= ONE_PASS_MAX {
        const HEADER: usize = RECORD_HEADER_LEN as usize;
        scratch.clear();
        scratch.reserve(HEADER + len as usize);
        scratch.resize(HEADER, 0);
        write_payload(block, retain_from, scratch)?;
        debug_assert_eq!((scratch.len() - HEADER) as u64, len, "payload_len is exact");
        let len = (scratch.len() - HEADER) as u64;
        let header = header_bytes(record_len(block, len)?, crc32fast::hash(&scratch[HEADER..]));
        scratch[..HEADER].copy_from_slice(&header);
        let written = out.write_all(scratch);
        if scratch.capacity() > KEEP_SCRATCH_BYTES {
            *scratch = Vec::new();
        }
        written?;
        return Ok(len);
    }
    let mut measure = Measure {
        len: 0,
        crc: crc32fast::Hasher::new(),
    };
    write_payload(block, retain_from, &mut measure)?;
    let len = record_len(block, measure.len)?;
    out.write_all(&header_bytes(len, measure.crc.finalize()))?;
    write_payload(block, retain_from, out)?;
    Ok(measure.len)
}

/// The record of a block whose changes come from `changes` (`block.changes` is ignored), the
/// bytes [`write_block_record`] writes for the same block with those changes. Two passes
/// over `changes`, neither holding them: the first measures the payload, the second writes it
/// and calls `each` with every change as it goes by. Returns the payload length.
pub fn write_streamed_block_record(
    block: &BlockRecord,
    changes: &dyn ChangeSource,
    retain_from: u64,
    out: &mut impl Write,
    each: &mut ChangeFn<'_>,
) -> StoreResult<u64> {
    let count = u32::try_from(changes.len()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("a block record holds at most {} changes", u32::MAX),
        )
    })?;
    let mut measure = Measure {
        len: 0,
        crc: crc32fast::Hasher::new(),
    };
    write_prefix(block, retain_from, count as usize, &mut measure)?;
    let mut seen = 0u64;
    changes.for_each(&mut |k, v| {
        seen += 1;
        write_change(k, v, &mut measure)
    })?;
    if seen != count as u64 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("a change source said {count} changes and gave {seen}"),
        )
        .into());
    }
    let len = record_len(block, measure.len)?;
    let crc = measure.crc.finalize();
    out.write_all(&header_bytes(len, crc))?;
    // The second pass must write what the first measured: check it as it goes, so a source
    // that changed between passes is an error, not a record that fails its checksum.
    let mut check = crc32fast::Hasher::new();
    let mut tee = Tee {
        out: &mut *out,
        crc: &mut check,
    };
    write_prefix(block, retain_from, count as usize, &mut tee)?;
    changes.for_each(&mut |k, v| {
        write_change(k, v, &mut tee)?;
        each(k, v)
    })?;
    if check.finalize() != crc {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a change source gave different changes on its second pass",
        )
        .into());
    }
    Ok(measure.len)
}

/// Writes to `out` and checksums what it wrote.
struct Tee<'a, W: Write> {
    out: &'a mut W,
    crc: &'a mut crc32fast::Hasher,
}

impl<W: Write> Write for Tee<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.out.write(buf)?;
        self.crc.update(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// Where each change of `block` starts, relative to the record's start, in order.
pub fn change_offsets(block: &BlockRecord) -> impl Iterator<Item = u64> + '_ {
    let at = RECORD_HEADER_LEN + PREFIX_LEN + BLOCK_HEADER_LEN + 4 + block.body.len() as u64 + 4;
    block
        .changes
        .offsets()
        .map(move |offset| at + offset as u64)
}

/// A `Read` over a [`VFile`] (borrowed or shared) from an offset, in chunks.
pub struct FileReader<F: Deref<Target = dyn VFile>> {
    file: F,
    pos: u64,
    end: u64,
    buf: Vec<u8>,
    at: usize,
    /// Bytes read from the file.
    pub read_bytes: u64,
}

impl<F: Deref<Target = dyn VFile>> FileReader<F> {
    /// Reads `file` from `pos` up to `end`, `chunk` bytes at a time.
    pub fn new(file: F, pos: u64, end: u64, chunk: usize) -> Self {
        Self {
            file,
            pos,
            end,
            buf: Vec::with_capacity(chunk),
            at: 0,
            read_bytes: 0,
        }
    }

    /// The file offset of the next byte `read` returns.
    pub fn position(&self) -> u64 {
        self.pos - (self.buf.len() - self.at) as u64
    }

    /// Skips `n` bytes.
    pub fn skip(&mut self, mut n: u64) -> io::Result<()> {
        let buffered = (self.buf.len() - self.at) as u64;
        if n <= buffered {
            self.at += n as usize;
            return Ok(());
        }
        n -= buffered;
        self.at = self.buf.len();
        if self.pos + n > self.end {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        self.pos += n;
        Ok(())
    }
}

impl<F: Deref<Target = dyn VFile>> Read for FileReader<F> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.at == self.buf.len() {
            let want = (self.buf.capacity() as u64).min(self.end - self.pos) as usize;
            if want == 0 {
                return Ok(0);
            }
            self.buf.resize(want, 0);
            let n = self.file.read_at(&mut self.buf, self.pos)?;
            if n == 0 {
                self.buf.clear();
                self.at = 0;
                return Ok(0);
            }
            self.buf.truncate(n);
            self.pos += n as u64;
            self.read_bytes += n as u64;
            self.at = 0;
        }
        let n = out.len().min(self.buf.len() - self.at);
        out[..n].copy_from_slice(&self.buf[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

fn read_u32(r: &mut impl Read) -> io::Result<u32> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b)?;
    Ok(u32::from_le_bytes(b))
}

fn read_u64(r: &mut impl Read) -> io::Result<u64> {
    let mut b = [0u8; 8];
    r.read_exact(&mut b)?;
    Ok(u64::from_le_bytes(b))
}

/// The start of a block record's payload: its `retain_from` and header.
pub struct BlockPrefix {
    /// The lowest height the committer asked to retain.
    pub retain_from: u64,
    /// The block's header.
    pub header: BlockHeader,
}

/// Reads the kind, `retain_from` and header of a block payload.
pub fn read_prefix(r: &mut impl Read) -> io::Result<Option<BlockPrefix>> {
    let mut kind = [0u8; 1];
    r.read_exact(&mut kind)?;
    if kind[0] != KIND_BLOCK {
        return Ok(None);
    }
    let retain_from = read_u64(r)?;
    let header: BlockHeader = borsh::BorshDeserialize::deserialize_reader(r)?;
    Ok(Some(BlockPrefix {
        retain_from,
        header,
    }))
}

/// The header of the block record at `offset` (its record header) in `file`, whose payload is
/// `len` bytes, reading the header only.
pub fn read_header<F: Deref<Target = dyn VFile>>(
    file: F,
    offset: u64,
    len: u64,
) -> io::Result<BlockHeader> {
    let start = offset + RECORD_HEADER_LEN;
    let mut reader = FileReader::new(file, start, start + len, 512);
    Ok(read_prefix(&mut reader)?
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "not a block record"))?
        .header)
}

/// The header and encoded body of the block record at `offset` (its record header) in `file`,
/// whose payload is `len` bytes, read without its changes: a genesis of millions of accounts
/// keeps its changes in the record, and rebuilding the replay window needs only ids.
pub fn read_header_and_body<F: Deref<Target = dyn VFile>>(
    file: F,
    offset: u64,
    len: u64,
) -> io::Result<(BlockHeader, Vec<u8>)> {
    let start = offset + RECORD_HEADER_LEN;
    let mut reader = FileReader::new(file, start, start + len, 64 * 1024);
    let prefix = read_prefix(&mut reader)?
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "not a block record"))?;
    let body_len = u64::from(read_u32(&mut reader)?);
    if body_len > len {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "the block body is longer than its record",
        ));
    }
    let mut body = vec![0u8; body_len as usize];
    reader.read_exact(&mut body)?;
    Ok((prefix.header, body))
}

/// Walks a block's changes in order, straight from the file: `key` and `value` are reused
/// buffers, and `at` is where each change starts.
pub struct ChangeCursor<F: Deref<Target = dyn VFile>> {
    reader: FileReader<F>,
    left: u32,
}

impl<F: Deref<Target = dyn VFile>> ChangeCursor<F> {
    /// A cursor over the changes of the block record at `offset` (its header) in `file`,
    /// whose payload is `len` bytes. Reads `chunk` bytes at a time.
    pub fn new(file: F, offset: u64, len: u64, chunk: usize) -> io::Result<(BlockPrefix, Self)> {
        let start = offset + RECORD_HEADER_LEN;
        let mut reader = FileReader::new(file, start, start + len, chunk);
        let prefix = read_prefix(&mut reader)?
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "not a block record"))?;
        let body = read_u32(&mut reader)? as u64;
        reader.skip(body)?;
        let left = read_u32(&mut reader)?;
        Ok((prefix, Self { reader, left }))
    }

    /// The next change into `key` and `value` (`false`: deleted); `None` after the last.
    pub fn next_into(
        &mut self,
        key: &mut Vec<u8>,
        value: &mut Vec<u8>,
    ) -> io::Result<Option<(u64, bool)>> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        let at = self.reader.position();
        let present = read_change(&mut self.reader, key, value)?;
        Ok(Some((at, present)))
    }

    /// Changes not read yet.
    pub fn remaining(&self) -> u32 {
        self.left
    }

    /// Bytes read from the file so far.
    pub fn read_bytes(&self) -> u64 {
        self.reader.read_bytes
    }
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// Values longer than this are read as they come rather than into a buffer sized first: 64
/// KiB, far above a balance or a token's record, so reading those is unchanged.
const GROW_ABOVE: u64 = 64 << 10;

/// Reads one change, key and value into the buffers; whether it sets (not deletes) the key.
fn read_change(r: &mut impl Read, key: &mut Vec<u8>, value: &mut Vec<u8>) -> io::Result<bool> {
    let klen = read_u32(r)? as u64;
    if klen > MAX_KEY {
        return Err(invalid("a change's key length is out of range"));
    }
    key.resize(klen as usize, 0);
    r.read_exact(key)?;
    let mut tag = [0u8; 1];
    r.read_exact(&mut tag)?;
    match tag[0] {
        0 => {
            value.clear();
            Ok(false)
        }
        1 => {
            let vlen = read_u32(r)? as u64;
            if vlen > MAX_VALUE {
                return Err(invalid("a change's value length is out of range"));
            }
            if vlen <= GROW_ABOVE {
                value.resize(vlen as usize, 0);
                r.read_exact(value)?;
            } else {
                // Grown as the bytes come: a damaged or crafted length (checksums pass for a
                // crafted record) must not commit up to MAX_VALUE before the record is found
                // to be shorter (helper-44's review).
                value.clear();
                if r.take(vlen).read_to_end(value)? as u64 != vlen {
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
            }
            Ok(true)
        }
        _ => Err(invalid("a change's presence tag is neither 0 nor 1")),
    }
}

/// Reads the change at `offset` of `file` into `key` and `value`; whether it sets (not
/// deletes) the key, and the bytes read. Reads 128 bytes first: most changes fit.
pub fn read_change_at(
    file: &(dyn VFile + 'static),
    offset: u64,
    key: &mut Vec<u8>,
    value: &mut Vec<u8>,
) -> io::Result<(bool, u64)> {
    let mut reader = ChunkReader {
        file,
        pos: offset,
        buf: [0; READ_CHUNK],
        len: 0,
        at: 0,
        read_bytes: 0,
    };
    let present = read_change(&mut reader, key, value)?;
    Ok((present, reader.read_bytes))
}

/// Bytes [`read_change_at`] reads at a time: most changes (a balance: 31 bytes) fit in one.
const READ_CHUNK: usize = 128;

/// [`FileReader`] with its chunk on the stack: a point read misses the value cache on every
/// few transfers at 10,000 accounts, and its buffer was an allocation each time.
struct ChunkReader<'a> {
    file: &'a (dyn VFile + 'static),
    pos: u64,
    buf: [u8; READ_CHUNK],
    /// Bytes of `buf` read from the file, and how many of them were handed out.
    len: usize,
    at: usize,
    read_bytes: u64,
}

impl Read for ChunkReader<'_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.at == self.len {
            let n = self.file.read_at(&mut self.buf, self.pos)?;
            if n == 0 {
                return Ok(0);
            }
            (self.len, self.at) = (n, 0);
            self.pos += n as u64;
            self.read_bytes += n as u64;
        }
        let n = out.len().min(self.len - self.at);
        out[..n].copy_from_slice(&self.buf[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// Checks the payload checksum of the record whose payload is `len` bytes at `start`,
/// reading it in chunks.
pub fn payload_crc_ok(
    file: &(dyn VFile + 'static),
    start: u64,
    len: u64,
    crc: u32,
) -> io::Result<bool> {
    let mut reader = FileReader::new(file, start, start + len, 1 << 20);
    let mut hasher = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut left = len;
    while left > 0 {
        let n = reader.read(&mut buf[..(left.min(1 << 20)) as usize])?;
        if n == 0 {
            return Ok(false);
        }
        hasher.update(&buf[..n]);
        left -= n as u64;
    }
    Ok(hasher.finalize() == crc)
}

/// Decodes a whole block record payload (for [`crate::store::BlockArchive::block`]).
pub fn decode_block(payload: &[u8]) -> Result<(u64, BlockRecord), String> {
    if payload.first() != Some(&KIND_BLOCK) || payload.len() < PREFIX_LEN as usize {
        return Err("not a block record".into());
    }
    let retain_from = u64::from_le_bytes(payload[1..9].try_into().expect("8 bytes"));
    let record = borsh::from_slice::<BlockRecord>(&payload[PREFIX_LEN as usize..])
        .map_err(|e| format!("the block record does not decode: {e}"))?;
    Ok((retain_from, record))
}

/// A corruption error for `path` at `offset`.
pub fn corrupt(path: &std::path::Path, offset: u64, why: impl Into<String>) -> StoreError {
    StoreError::corrupted(path, Some(offset), why)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A change claiming a value of nearly MAX_VALUE bytes, in a record that holds a few, is
    /// refused without a buffer of the claimed length (helper-44's review).
    #[test]
    fn a_change_longer_than_its_record_is_refused_before_its_length_is_allocated() {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&3u32.to_le_bytes());
        bytes.extend_from_slice(b"key");
        bytes.push(1);
        bytes.extend_from_slice(&((MAX_VALUE - 1) as u32).to_le_bytes());
        bytes.extend_from_slice(b"short");
        let (mut key, mut value) = (Vec::new(), Vec::new());
        let read = read_change(&mut bytes.as_slice(), &mut key, &mut value);
        assert_eq!(read.unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
        assert!(value.capacity() < 1 << 20, "{} bytes", value.capacity());
    }
    use crate::store::Changes;
    use crate::store::log::fault::FaultFs;
    use crate::store::log::vfs::Vfs;
    use std::path::Path;

    fn block() -> BlockRecord {
        BlockRecord {
            header: BlockHeader {
                height: 9,
                previous: [1; 32],
                timestamp_ms: 2,
                transactions_root: [3; 32],
                state_checksum: [4; 32],
                ..Default::default()
            },
            body: vec![7; 33],
            changes: vec![
                (b"a".to_vec(), Some(vec![1; 300])),
                (b"bb".to_vec(), None),
                (b"ccc".to_vec(), Some(b"x".to_vec())),
            ]
            .into(),
        }
    }

    #[test]
    fn a_block_record_reads_back_whole_by_change_and_in_order() {
        let fs = FaultFs::new(1);
        let file = fs.create(Path::new("/d/f")).unwrap();
        file.append(b"0123456789").unwrap();
        let mut bytes = Vec::new();
        let b = block();
        let len = write_block_record(&b, 5, &mut bytes, &mut Vec::new()).unwrap();
        file.append(&bytes).unwrap();
        let header = parse_header(bytes[..12].try_into().unwrap()).unwrap();
        assert_eq!(header.len, len);
        assert!(payload_crc_ok(&*file, 10 + 12, len, header.payload_crc).unwrap());
        assert_eq!(decode_block(&bytes[12..]).unwrap(), (5, b.clone()));
        let (mut k, mut v) = (Vec::new(), Vec::new());
        for (offset, (key, value)) in change_offsets(&b).zip(&b.changes) {
            let (present, _) = read_change_at(&*file, 10 + offset, &mut k, &mut v).unwrap();
            assert_eq!(k.as_slice(), key);
            assert_eq!(present.then_some(v.as_slice()), value);
        }
        let (prefix, mut cursor) = ChangeCursor::new(&*file, 10, len, 64).unwrap();
        assert_eq!((prefix.retain_from, prefix.header.height), (5, 9));
        let mut offsets = change_offsets(&b);
        for (key, value) in &b.changes {
            let (at, present) = cursor.next_into(&mut k, &mut v).unwrap().unwrap();
            assert_eq!(at, 10 + offsets.next().unwrap());
            assert_eq!(
                (k.as_slice(), present.then_some(v.as_slice())),
                (key, value)
            );
        }
        assert!(cursor.next_into(&mut k, &mut v).unwrap().is_none());
    }

    /// The payload as earlier versions wrote it: borsh of the kind, `retain_from` and the
    /// whole [`BlockRecord`].
    fn borsh_payload(b: &BlockRecord, retain_from: u64) -> Vec<u8> {
        let mut payload = vec![KIND_BLOCK];
        payload.extend_from_slice(&retain_from.to_le_bytes());
        borsh::BorshSerialize::serialize(b, &mut payload).unwrap();
        payload
    }

    /// The one-pass encoding is byte for byte the borsh payload the records of earlier
    /// versions hold, for blocks of every shape: empty keys and bodies, deletions, values of
    /// many lengths.
    #[test]
    fn the_one_pass_payload_is_the_borsh_payload() {
        let mut next = crate::test_rng::xorshift(7);
        let mut scratch = Vec::new();
        for case in 0..200 {
            let mut b = block();
            b.header.height = next();
            b.header.prices = [next(), 1, 2, 3, next()];
            b.body = vec![case as u8; (next() % 3_000) as usize * (case % 2)];
            b.changes = (0..next() % 300)
                .map(|i| {
                    let key = (0..next() % 40).map(|_| next() as u8).collect::<Vec<u8>>();
                    let value = match next() % 4 {
                        0 => None,
                        1 => Some(Vec::new()),
                        _ => Some(vec![i as u8; (next() % 5_000) as usize]),
                    };
                    (key, value)
                })
                .collect();
            let retain_from = next();
            let borsh_payload = borsh_payload(&b, retain_from);
            assert_eq!(payload_len(&b), borsh_payload.len() as u64, "case {case}");
            let mut framed = Vec::new();
            let len = write_block_record(&b, retain_from, &mut framed, &mut scratch).unwrap();
            assert_eq!(len, borsh_payload.len() as u64, "case {case}");
            assert_eq!(&framed[12..], &borsh_payload[..], "case {case}");
            let header = parse_header(framed[..12].try_into().unwrap()).unwrap();
            assert_eq!(header.len, len);
            assert_eq!(header.payload_crc, crc32fast::hash(&borsh_payload));
        }
    }

    /// A payload past [`ONE_PASS_MAX`] takes the two passes, and frames the same bytes.
    #[test]
    fn a_payload_past_the_one_pass_bound_is_measured_first() {
        let mut b = block();
        b.changes = vec![(b"big".to_vec(), Some(vec![5; ONE_PASS_MAX as usize]))].into();
        let mut framed = Vec::new();
        let mut scratch = Vec::new();
        let len = write_block_record(&b, 3, &mut framed, &mut scratch).unwrap();
        assert!(scratch.is_empty(), "no copy was kept");
        let borsh_payload = borsh_payload(&b, 3);
        assert_eq!((len, &framed[12..]), (payload_len(&b), &borsh_payload[..]));
        let header = parse_header(framed[..12].try_into().unwrap()).unwrap();
        assert_eq!(header.payload_crc, crc32fast::hash(&borsh_payload));
    }

    #[test]
    fn a_streamed_record_is_the_record_of_the_same_block() {
        let b = block();
        let mut whole = Vec::new();
        write_block_record(&b, 5, &mut whole, &mut Vec::new()).unwrap();
        let mut streamed = Vec::new();
        let mut seen = Vec::new();
        let empty = BlockRecord {
            changes: Changes::new(),
            ..b.clone()
        };
        let len = write_streamed_block_record(&empty, &b.changes, 5, &mut streamed, &mut |k, v| {
            seen.push((k.to_vec(), v.map(<[u8]>::to_vec)));
            Ok(())
        })
        .unwrap();
        assert_eq!(streamed, whole);
        assert_eq!(len as usize, whole.len() - 12);
        assert_eq!(seen, b.changes.to_vec());
    }
}
