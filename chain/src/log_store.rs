//! The `log` store: all live state in RAM, one checksummed append per block, `fdatasync`
//! before the block counts as committed, periodic snapshots to bound replay.
//!
//! After Vilmo and GriffinDB: random small writes become sequential appends, and reads never
//! touch the disk. Files in the store's directory:
//!
//! - `LOCK`: held with `flock` by the process that has the store open, exclusively by a
//!   writer and shared by readers ([`crate::store::lock`]).
//! - `log-<seq>.tlog`: a 12-byte header (`TALLYLOG`, format version u32 LE), then records
//!   `[payload length u32][crc32 of payload u32][crc32 of the previous 8 bytes u32][payload]`
//!   (little-endian), where the payload is the borsh of a [`BlockRecord`] (header, body,
//!   sorted changes). A new segment starts once one passes [`LogOptions::segment_bytes`].
//! - `snapshot-<height>.tsnap`: the whole state at a block: `TALLYSNP`, version, then borsh of
//!   the header, the entry count and the entries, and a trailing crc32 of everything before.
//!
//! Opening loads the newest snapshot and replays the log records above it. Every block is
//! fsync'd before the next one is written, so after a crash only the very end of the last
//! segment can hold a record that was never committed: a record cut short, or one whose
//! checksum fails with nothing after it (power lost after the file grew but before its
//! bytes reached the disk). Only that is cut off, and only by a writer. Anything else that
//! fails a check is [`StoreError::Corrupted`], naming the file and the byte offset, and
//! nothing is changed: a bad record with data after it, a damaged sealed segment, a damaged
//! snapshot. The record header has its own checksum so that a damaged length cannot make
//! an early record look like a torn tail.
//!
//! [`LogStore::open_read_only`] reads without writing anything: it ignores a torn tail
//! instead of cutting it.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use rustc_hash::FxHashMap;

use crate::block::BlockHeader;
use crate::state::{BlockRecord, StateStore, SyncJob, apply_changes, sorted_entries};
use crate::store::{DirLock, StoreError, StoreResult};

/// Live state: key to value.
type StateMap = FxHashMap<Vec<u8>, Vec<u8>>;

const LOG_MAGIC: &[u8; 8] = b"TALLYLOG";
const SNAP_MAGIC: &[u8; 8] = b"TALLYSNP";
/// Version 2 added the record header's own checksum.
const FORMAT_VERSION: u32 = 2;
const FILE_HEADER_LEN: u64 = 12;
const RECORD_HEADER_LEN: u64 = 12;

/// Tuning of the log store.
#[derive(Debug, Clone)]
pub struct LogOptions {
    /// Blocks kept below the head.
    pub retain_blocks: u64,
    /// A new log segment starts after this many bytes.
    pub segment_bytes: u64,
    /// A snapshot is written once the log since the last one exceeds both this and the size
    /// of the live state, so replay reads at most about twice the state and snapshots cost at
    /// most one extra write of each logged byte.
    pub snapshot_min_bytes: u64,
}

impl Default for LogOptions {
    fn default() -> Self {
        Self {
            retain_blocks: 512,
            segment_bytes: 64 << 20,
            snapshot_min_bytes: 256 << 20,
        }
    }
}

#[derive(Debug)]
struct Segment {
    seq: u64,
    size: u64,
    max_height: Option<u64>,
}

/// Where a retained block's record lies.
#[derive(Debug, Clone, Copy)]
struct BlockPos {
    height: u64,
    seq: u64,
    offset: u64,
}

/// The embedded default store. See the module docs for the format.
pub struct LogStore {
    dir: PathBuf,
    options: LogOptions,
    map: FxHashMap<Vec<u8>, Vec<u8>>,
    state_bytes: u64,
    head: Option<BlockHeader>,
    segments: Vec<Segment>,
    /// The segment appends go to; `None` when opened read-only.
    active: Option<File>,
    index: VecDeque<BlockPos>,
    snapshot_height: Option<u64>,
    logged_since_snapshot: u64,
    /// Held for as long as the store is open.
    _lock: DirLock,
}

fn segment_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("log-{seq:08}.tlog"))
}

fn snapshot_path(dir: &Path, height: u64) -> PathBuf {
    dir.join(format!("snapshot-{height:020}.tsnap"))
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Files in `dir` named `<prefix><number><suffix>`, sorted by number.
fn numbered(dir: &Path, prefix: &str, suffix: &str) -> io::Result<Vec<u64>> {
    let mut found = Vec::new();
    for entry in fs::read_dir(dir)? {
        let name = entry?.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(n) = name
            .strip_prefix(prefix)
            .and_then(|r| r.strip_suffix(suffix))
            .and_then(|n| n.parse().ok())
        {
            found.push(n);
        }
    }
    found.sort_unstable();
    Ok(found)
}

/// A writer that feeds a crc32 of everything written.
struct CrcWriter<W> {
    inner: W,
    crc: crc32fast::Hasher,
}

impl<W: Write> Write for CrcWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.crc.update(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// `payload` framed as a log record.
fn frame(payload: &[u8]) -> StoreResult<Vec<u8>> {
    let len = u32::try_from(payload.len()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("a block record of {} bytes is too large", payload.len()),
        )
    })?;
    let mut framed = Vec::with_capacity(payload.len() + RECORD_HEADER_LEN as usize);
    framed.extend_from_slice(&len.to_le_bytes());
    framed.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    let header_crc = crc32fast::hash(&framed);
    framed.extend_from_slice(&header_crc.to_le_bytes());
    framed.extend_from_slice(payload);
    Ok(framed)
}

/// A record header that passed its own checksum.
struct RecordHeader {
    len: u64,
    payload_crc: u32,
}

fn parse_header(bytes: &[u8; RECORD_HEADER_LEN as usize]) -> Option<RecordHeader> {
    let word = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().expect("4 bytes"));
    (crc32fast::hash(&bytes[..8]) == word(8)).then(|| RecordHeader {
        len: word(0) as u64,
        payload_crc: word(4),
    })
}

/// What reading the record at some offset of a segment of known length found.
enum Scan {
    /// A good record and its framed length.
    Record(BlockRecord, u64),
    /// The segment ends here.
    End,
    /// A record that never finished: cut short, or failing its checksum with nothing after
    /// it. Only the end of the last segment may hold one.
    Torn(&'static str),
    /// The record header fails its checksum, so its length cannot be trusted either.
    BadHeader,
    /// Damage that no crash explains.
    Corrupt(String),
}

/// Reads the record at `offset` of a segment `file_len` bytes long, `reader` positioned there.
fn scan_record(reader: &mut impl Read, offset: u64, file_len: u64) -> io::Result<Scan> {
    let rest = file_len.saturating_sub(offset);
    if rest == 0 {
        return Ok(Scan::End);
    }
    if rest < RECORD_HEADER_LEN {
        return Ok(Scan::Torn("the log ends inside a record header"));
    }
    let mut header = [0u8; RECORD_HEADER_LEN as usize];
    reader.read_exact(&mut header)?;
    let Some(header) = parse_header(&header) else {
        return Ok(Scan::BadHeader);
    };
    if header.len > rest - RECORD_HEADER_LEN {
        return Ok(Scan::Torn("the log ends inside a record"));
    }
    let mut payload = vec![0u8; header.len as usize];
    reader.read_exact(&mut payload)?;
    let end = offset + RECORD_HEADER_LEN + header.len;
    if crc32fast::hash(&payload) != header.payload_crc {
        return Ok(if end == file_len {
            Scan::Torn("the last record fails its checksum")
        } else {
            Scan::Corrupt(format!(
                "record checksum mismatch, with {} more bytes of log after the record",
                file_len - end
            ))
        });
    }
    match borsh::from_slice::<BlockRecord>(&payload) {
        Ok(record) => Ok(Scan::Record(record, RECORD_HEADER_LEN + header.len)),
        Err(e) => Ok(Scan::Corrupt(format!(
            "record passes its checksum but does not decode: {e}"
        ))),
    }
}

/// The offset of the first whole, checksummed record that starts after `from` in the
/// segment at `path`, if any. A damaged record header hides where its record ends; if a good
/// record follows somewhere, the damage is not a torn tail.
fn good_record_after(path: &Path, from: u64, file_len: u64) -> io::Result<Option<u64>> {
    const WINDOW: u64 = 1 << 20;
    let mut file = File::open(path)?;
    let mut buf = Vec::new();
    let mut pos = from;
    while pos + RECORD_HEADER_LEN <= file_len {
        let n = (WINDOW + RECORD_HEADER_LEN).min(file_len - pos);
        buf.resize(n as usize, 0);
        file.seek(SeekFrom::Start(pos))?;
        file.read_exact(&mut buf)?;
        let candidates = n - RECORD_HEADER_LEN + 1;
        for i in 0..candidates {
            let at = i as usize;
            let bytes: &[u8; RECORD_HEADER_LEN as usize] = buf[at..at + RECORD_HEADER_LEN as usize]
                .try_into()
                .expect("12 bytes");
            let Some(header) = parse_header(bytes) else {
                continue;
            };
            let start = pos + i + RECORD_HEADER_LEN;
            if start + header.len > file_len {
                continue;
            }
            let mut payload = vec![0u8; header.len as usize];
            let mut f = File::open(path)?;
            f.seek(SeekFrom::Start(start))?;
            f.read_exact(&mut payload)?;
            if crc32fast::hash(&payload) == header.payload_crc {
                return Ok(Some(pos + i));
            }
        }
        pos += candidates;
    }
    Ok(None)
}

impl LogStore {
    /// Appends `block` and applies it. With `sync` the record is on disk when this returns;
    /// otherwise the caller must `sync_data` the returned handle of its segment before the
    /// next append (a crash of the process alone loses nothing: the bytes are in the page
    /// cache).
    fn append(&mut self, block: &BlockRecord, sync: bool) -> StoreResult<File> {
        let Some(active) = self.active.as_mut() else {
            return Err(StoreError::ReadOnly);
        };
        let framed = frame(&borsh::to_vec(block)?)?;
        // The block counts as committed only once its record is on disk. If the append or the
        // sync fails (a full disk), cut the partial record off again: left in place, it would
        // make the next open refuse the log (a bad record with data after it).
        let mut appended = active.write_all(&framed);
        if sync {
            appended = appended.and_then(|()| active.sync_data());
        }
        if let Err(e) = appended {
            let size = self.segments.last().expect("an active segment").size;
            let _ = active.set_len(size);
            return Err(e.into());
        }
        let written = active.try_clone()?;

        let segment = self.segments.last_mut().expect("an active segment");
        let (seq, offset) = (segment.seq, segment.size);
        segment.size += framed.len() as u64;
        segment.max_height = Some(block.header.height);
        let full = segment.size >= self.options.segment_bytes;
        self.apply(block);
        self.index_block(block.header.height, seq, offset);
        self.logged_since_snapshot += framed.len() as u64;

        if full {
            // A sealed segment is durable to its last byte, so that only the end of the last
            // segment can ever hold a torn record.
            if !sync {
                written.sync_data()?;
            }
            let next = self.new_segment(seq + 1)?;
            self.active = Some(
                OpenOptions::new()
                    .append(true)
                    .open(segment_path(&self.dir, next))?,
            );
        }
        if self.logged_since_snapshot >= self.options.snapshot_min_bytes.max(self.state_bytes) {
            self.snapshot()?;
        }
        Ok(written)
    }

    /// Opens (or creates) the store in `dir` for writing. Fails with
    /// [`StoreError::Locked`] while another process has it open, and with
    /// [`StoreError::Corrupted`] if it is damaged beyond a torn last record.
    pub fn open(dir: impl AsRef<Path>, options: LogOptions) -> StoreResult<Self> {
        let dir = dir.as_ref().to_path_buf();
        fs::create_dir_all(&dir)?;
        let lock = DirLock::exclusive(&dir)?;
        let mut store = Self::empty(dir, options, lock);
        store.load_snapshot()?;
        store.replay(true)?;
        let seq = match store.segments.last() {
            Some(s) => s.seq,
            None => store.new_segment(0)?,
        };
        store.active = Some(
            OpenOptions::new()
                .append(true)
                .open(segment_path(&store.dir, seq))?,
        );
        Ok(store)
    }

    /// Opens the store in `dir` for reading only: no file in `dir` is created, changed or
    /// removed, and a torn last record is skipped rather than cut. Shares the lock with other
    /// readers; fails with [`StoreError::Locked`] while a writer has the store open.
    pub fn open_read_only(dir: impl AsRef<Path>) -> StoreResult<Self> {
        let dir = dir.as_ref().to_path_buf();
        if !dir.is_dir() {
            return Err(StoreError::Missing { dir });
        }
        let lock = DirLock::shared(&dir)?;
        let mut store = Self::empty(dir, LogOptions::default(), lock);
        store.load_snapshot()?;
        store.replay(false)?;
        Ok(store)
    }

    fn empty(dir: PathBuf, options: LogOptions, lock: DirLock) -> Self {
        Self {
            dir,
            options,
            map: FxHashMap::default(),
            state_bytes: 0,
            head: None,
            segments: Vec::new(),
            active: None,
            index: VecDeque::new(),
            snapshot_height: None,
            logged_since_snapshot: 0,
            _lock: lock,
        }
    }

    fn load_snapshot(&mut self) -> StoreResult<()> {
        // The newest snapshot holds the state; older ones are deleted once a newer one is
        // durable. A snapshot is renamed into place only once complete and synced, so one that
        // fails its check is damage, not a crash: refuse it rather than replay a log that may
        // no longer reach back far enough.
        let Some(&height) = numbered(&self.dir, "snapshot-", ".tsnap")?.last() else {
            return Ok(());
        };
        let path = snapshot_path(&self.dir, height);
        let bytes = fs::read(&path)?;
        let Some((head, map)) = Self::parse_snapshot(&bytes) else {
            return Err(StoreError::corrupted(
                path,
                None,
                "the snapshot fails its checksum or does not decode",
            ));
        };
        if head.height != height {
            return Err(StoreError::corrupted(
                path,
                None,
                format!("the snapshot holds block {} instead", head.height),
            ));
        }
        self.state_bytes = map.iter().map(|(k, v)| (k.len() + v.len()) as u64).sum();
        self.map = map;
        self.head = Some(head);
        self.snapshot_height = Some(height);
        Ok(())
    }

    fn parse_snapshot(bytes: &[u8]) -> Option<(BlockHeader, StateMap)> {
        let body_len = bytes.len().checked_sub(4)?;
        let (body, trailer) = bytes.split_at(body_len);
        if crc32fast::hash(body) != u32::from_le_bytes(trailer.try_into().ok()?)
            || body.get(..8)? != SNAP_MAGIC
            || u32::from_le_bytes(body.get(8..12)?.try_into().ok()?) != FORMAT_VERSION
        {
            return None;
        }
        let mut rest = &body[12..];
        let head: BlockHeader = borsh::BorshDeserialize::deserialize(&mut rest).ok()?;
        let count: u64 = borsh::BorshDeserialize::deserialize(&mut rest).ok()?;
        let mut map = FxHashMap::default();
        map.reserve(count.min(1 << 26) as usize);
        for _ in 0..count {
            let k: Vec<u8> = borsh::BorshDeserialize::deserialize(&mut rest).ok()?;
            let v: Vec<u8> = borsh::BorshDeserialize::deserialize(&mut rest).ok()?;
            map.insert(k, v);
        }
        rest.is_empty().then_some((head, map))
    }

    /// Replays every segment. A writer (`repair`) cuts a torn tail off the last segment and
    /// restarts a last segment whose creation was cut short; a reader only stops there.
    fn replay(&mut self, repair: bool) -> StoreResult<()> {
        let seqs = numbered(&self.dir, "log-", ".tlog")?;
        for (i, &seq) in seqs.iter().enumerate() {
            let last = i + 1 == seqs.len();
            let path = segment_path(&self.dir, seq);
            let file = File::open(&path)?;
            let file_len = file.metadata()?.len();
            let mut reader = BufReader::with_capacity(1 << 20, file);
            let mut segment = Segment {
                seq,
                size: FILE_HEADER_LEN,
                max_height: None,
            };
            let mut magic = [0u8; FILE_HEADER_LEN as usize];
            if file_len < FILE_HEADER_LEN || reader.read_exact(&mut magic).is_err() {
                if !last {
                    return Err(StoreError::corrupted(
                        path,
                        Some(0),
                        "a sealed segment is shorter than its header",
                    ));
                }
                // A crash while creating the segment, before anything was appended to it.
                if repair {
                    drop(reader);
                    self.write_segment_header(seq)?;
                }
                self.segments.push(segment);
                continue;
            }
            if &magic[..8] != LOG_MAGIC {
                // Its header was synced before any record went in, so this is damage, unless
                // the file is no longer than a header: a crash while creating it.
                if !(last && file_len == FILE_HEADER_LEN) {
                    return Err(StoreError::corrupted(
                        path,
                        Some(0),
                        "not a Tally log segment (bad magic)",
                    ));
                }
                if repair {
                    drop(reader);
                    self.write_segment_header(seq)?;
                }
                self.segments.push(segment);
                continue;
            }
            let version = u32::from_le_bytes(magic[8..].try_into().expect("4 bytes"));
            if version != FORMAT_VERSION {
                return Err(StoreError::Version {
                    path,
                    found: version,
                    expected: FORMAT_VERSION,
                });
            }
            loop {
                let offset = segment.size;
                let torn = match scan_record(&mut reader, offset, file_len)? {
                    Scan::End => break,
                    Scan::Record(record, len) => {
                        self.replay_record(record, &path, offset, &mut segment)?;
                        segment.size += len;
                        continue;
                    }
                    Scan::Corrupt(why) => {
                        return Err(StoreError::corrupted(path, Some(offset), why));
                    }
                    Scan::Torn(why) if !last => {
                        return Err(StoreError::corrupted(
                            path,
                            Some(offset),
                            format!("{why}, in a sealed segment (not the last one)"),
                        ));
                    }
                    Scan::Torn(why) => why,
                    Scan::BadHeader => {
                        let after = if last {
                            good_record_after(&path, offset + 1, file_len)?
                        } else {
                            None
                        };
                        if !last || after.is_some() {
                            return Err(StoreError::corrupted(
                                path,
                                Some(offset),
                                match after {
                                    Some(at) => format!(
                                        "record header checksum mismatch, with a good record \
                                         after it at byte {at}"
                                    ),
                                    None => "record header checksum mismatch, in a sealed \
                                             segment (not the last one)"
                                        .into(),
                                },
                            ));
                        }
                        "the last record's header is damaged and no record follows it"
                    }
                };
                // A record that never finished: the crash came before its fdatasync returned,
                // so the block never counted as committed.
                let _ = torn;
                if repair {
                    drop(reader);
                    let file = OpenOptions::new().write(true).open(&path)?;
                    file.set_len(offset)?;
                    file.sync_all()?;
                }
                break;
            }
            self.segments.push(segment);
        }
        Ok(())
    }

    fn replay_record(
        &mut self,
        record: BlockRecord,
        path: &Path,
        offset: u64,
        segment: &mut Segment,
    ) -> StoreResult<()> {
        let height = record.header.height;
        segment.max_height = Some(height);
        let applied = self.snapshot_height.is_some_and(|s| height <= s);
        if !applied {
            let expected = self.head.as_ref().map_or(0, |h| h.height + 1);
            if height != expected {
                return Err(StoreError::corrupted(
                    path,
                    Some(offset),
                    format!("a record of block {height} where block {expected} was expected"),
                ));
            }
            self.apply(&record);
        }
        self.index_block(height, segment.seq, offset);
        Ok(())
    }

    fn apply(&mut self, record: &BlockRecord) {
        for (k, v) in &record.changes {
            if let Some(old) = self.map.get(k) {
                self.state_bytes -= (k.len() + old.len()) as u64;
            }
            if let Some(v) = v {
                self.state_bytes += (k.len() + v.len()) as u64;
            }
        }
        apply_changes(&mut self.map, &record.changes);
        self.head = Some(record.header.clone());
    }

    fn index_block(&mut self, height: u64, seq: u64, offset: u64) {
        self.index.push_back(BlockPos {
            height,
            seq,
            offset,
        });
        let head = self.head.as_ref().map_or(height, |h| h.height);
        while self
            .index
            .front()
            .is_some_and(|f| f.height + self.options.retain_blocks <= head)
        {
            self.index.pop_front();
        }
    }

    fn write_segment_header(&self, seq: u64) -> io::Result<()> {
        let path = segment_path(&self.dir, seq);
        let mut file = File::create(&path)?;
        file.write_all(LOG_MAGIC)?;
        file.write_all(&FORMAT_VERSION.to_le_bytes())?;
        file.sync_all()?;
        sync_dir(&self.dir)
    }

    fn new_segment(&mut self, seq: u64) -> io::Result<u64> {
        self.write_segment_header(seq)?;
        self.segments.push(Segment {
            seq,
            size: FILE_HEADER_LEN,
            max_height: None,
        });
        Ok(seq)
    }

    /// Writes a snapshot of the whole state at the head, then drops what it makes redundant.
    pub fn snapshot(&mut self) -> StoreResult<()> {
        if self.active.is_none() {
            return Err(StoreError::ReadOnly);
        }
        let Some(head) = self.head.clone() else {
            return Ok(());
        };
        let path = snapshot_path(&self.dir, head.height);
        let tmp = path.with_extension("tmp");
        {
            let file = File::create(&tmp)?;
            let mut w = CrcWriter {
                inner: BufWriter::with_capacity(1 << 20, file),
                crc: crc32fast::Hasher::new(),
            };
            w.write_all(SNAP_MAGIC)?;
            w.write_all(&FORMAT_VERSION.to_le_bytes())?;
            borsh::BorshSerialize::serialize(&head, &mut w)?;
            borsh::BorshSerialize::serialize(&(self.map.len() as u64), &mut w)?;
            for (k, v) in &self.map {
                borsh::BorshSerialize::serialize(k, &mut w)?;
                borsh::BorshSerialize::serialize(v, &mut w)?;
            }
            let crc = w.crc.clone().finalize();
            let mut inner = w.inner;
            inner.write_all(&crc.to_le_bytes())?;
            inner.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        }
        fs::rename(&tmp, &path)?;
        sync_dir(&self.dir)?;
        self.snapshot_height = Some(head.height);
        self.logged_since_snapshot = 0;
        for old in numbered(&self.dir, "snapshot-", ".tsnap")? {
            if old < head.height {
                fs::remove_file(snapshot_path(&self.dir, old))?;
            }
        }
        // A segment can go once the snapshot covers it and it holds no retained block.
        let keep_from = self.index.front().map_or(head.height, |p| p.height);
        let active = self.segments.last().map(|s| s.seq);
        let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.segments)
            .into_iter()
            .partition(|s| Some(s.seq) != active && s.max_height.is_none_or(|m| m < keep_from));
        self.segments = kept;
        for s in gone {
            fs::remove_file(segment_path(&self.dir, s.seq))?;
        }
        Ok(())
    }
}

impl StateStore for LogStore {
    fn get(&self, key: &[u8]) -> StoreResult<Option<Cow<'_, [u8]>>> {
        Ok(self.map.get(key).map(|v| Cow::Borrowed(v.as_slice())))
    }

    fn commit(&mut self, block: &BlockRecord) -> StoreResult<()> {
        self.append(block, true).map(|_| ())
    }

    fn commit_deferred(&mut self, block: &BlockRecord) -> StoreResult<Option<SyncJob>> {
        let file = self.append(block, false)?;
        Ok(Some(Box::new(move || file.sync_data())))
    }

    fn head(&self) -> Option<&BlockHeader> {
        self.head.as_ref()
    }

    fn block(&self, height: u64) -> StoreResult<Option<BlockRecord>> {
        let Some(pos) = self.index.iter().find(|p| p.height == height) else {
            return Ok(None);
        };
        let path = segment_path(&self.dir, pos.seq);
        let mut file = File::open(&path)?;
        let file_len = file.metadata()?.len();
        file.seek(SeekFrom::Start(pos.offset))?;
        let corrupt = |why: String| StoreError::corrupted(&path, Some(pos.offset), why);
        match scan_record(&mut BufReader::new(file), pos.offset, file_len)? {
            Scan::Record(record, _) if record.header.height == height => Ok(Some(record)),
            Scan::Record(record, _) => Err(corrupt(format!(
                "block {height} was indexed here, but the record holds block {}",
                record.header.height
            ))),
            Scan::End | Scan::Torn(_) => Err(corrupt(format!(
                "block {height} was indexed here, but the log ends"
            ))),
            Scan::BadHeader => Err(corrupt(format!(
                "block {height}: record header checksum mismatch"
            ))),
            Scan::Corrupt(why) => Err(corrupt(format!("block {height}: {why}"))),
        }
    }

    fn first_retained(&self) -> u64 {
        self.index.front().map_or(0, |p| p.height)
    }

    fn entries(&self) -> StoreResult<Vec<(Vec<u8>, Vec<u8>)>> {
        Ok(sorted_entries(&self.map))
    }

    fn disk_bytes(&self) -> u64 {
        fs::read_dir(&self.dir)
            .map(|rd| {
                rd.filter_map(|e| e.ok()?.metadata().ok())
                    .map(|m| m.len())
                    .sum()
            })
            .unwrap_or(0)
    }

    fn kind(&self) -> &'static str {
        "log"
    }
}
