//! The `log` store: all live state in RAM, one checksummed append per block, `fdatasync`
//! before the block counts as committed, periodic snapshots to bound replay.
//!
//! After Vilmo and GriffinDB: random small writes become sequential appends, and reads never
//! touch the disk. Files in the store's directory:
//!
//! - `log-<seq>.tlog`: a 12-byte header (`TALLYLOG`, format version u32 LE), then records
//!   `[payload length u32 LE][crc32 of payload u32 LE][payload]`, where the payload is the
//!   borsh of a [`BlockRecord`] (header, body, sorted changes). A new segment starts once one
//!   passes [`LogOptions::segment_bytes`].
//! - `snapshot-<height>.tsnap`: the whole state at a block: `TALLYSNP`, version, then borsh of
//!   the header, the entry count and the entries, and a trailing crc32 of everything before.
//!
//! Opening loads the newest snapshot that checks out, replays the log records above it, and
//! truncates the last segment at the first torn or corrupt record (a crash mid-append). A bad
//! record in an earlier segment is not a torn write but damage, and opening fails rather than
//! silently dropping committed blocks.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use rustc_hash::FxHashMap;

use crate::block::BlockHeader;
use crate::state::{BlockRecord, StateStore, SyncJob, apply_changes, sorted_entries};

/// Live state: key to value.
type StateMap = FxHashMap<Vec<u8>, Vec<u8>>;

const LOG_MAGIC: &[u8; 8] = b"TALLYLOG";
const SNAP_MAGIC: &[u8; 8] = b"TALLYSNP";
const FORMAT_VERSION: u32 = 1;
const FILE_HEADER_LEN: u64 = 12;
const RECORD_HEADER_LEN: u64 = 8;

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
    active: File,
    index: VecDeque<BlockPos>,
    snapshot_height: Option<u64>,
    logged_since_snapshot: u64,
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
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

/// What reading one record found.
enum Read1 {
    Record(BlockRecord, u64),
    End,
    Bad(String),
}

fn read_record(reader: &mut impl Read) -> io::Result<Read1> {
    let mut header = [0u8; RECORD_HEADER_LEN as usize];
    let mut got = 0;
    while got < header.len() {
        match reader.read(&mut header[got..])? {
            0 if got == 0 => return Ok(Read1::End),
            0 => return Ok(Read1::Bad("torn record header".into())),
            n => got += n,
        }
    }
    let len = u32::from_le_bytes(header[..4].try_into().expect("4 bytes")) as u64;
    let crc = u32::from_le_bytes(header[4..].try_into().expect("4 bytes"));
    let mut payload = Vec::new();
    reader.take(len).read_to_end(&mut payload)?;
    if (payload.len() as u64) < len {
        return Ok(Read1::Bad("torn record".into()));
    }
    if crc32fast::hash(&payload) != crc {
        return Ok(Read1::Bad("record checksum mismatch".into()));
    }
    match borsh::from_slice::<BlockRecord>(&payload) {
        Ok(record) => Ok(Read1::Record(record, RECORD_HEADER_LEN + len)),
        Err(e) => Ok(Read1::Bad(format!("undecodable record: {e}"))),
    }
}

impl LogStore {
    /// Appends `block` and applies it. With `sync` the record is on disk when this returns;
    /// otherwise the caller must `sync_data` the returned handle of its segment before the
    /// next append (a crash of the process alone loses nothing: the bytes are in the page
    /// cache).
    fn append(&mut self, block: &BlockRecord, sync: bool) -> io::Result<File> {
        let payload = borsh::to_vec(block)?;
        let len = u32::try_from(payload.len()).map_err(|_| {
            invalid(format!(
                "block record of {} bytes is too large",
                payload.len()
            ))
        })?;
        let mut framed = Vec::with_capacity(payload.len() + RECORD_HEADER_LEN as usize);
        framed.extend_from_slice(&len.to_le_bytes());
        framed.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
        framed.extend_from_slice(&payload);
        // The block counts as committed only once its record is on disk. If the append or the
        // sync fails (a full disk), cut the partial record off again: left in place, it would
        // read as a torn tail on the next open and hide every block appended after it.
        let mut appended = self.active.write_all(&framed);
        if sync {
            appended = appended.and_then(|()| self.active.sync_data());
        }
        if let Err(e) = appended {
            let size = self.segments.last().expect("an active segment").size;
            let _ = self.active.set_len(size);
            return Err(e);
        }
        let written = self.active.try_clone()?;

        let segment = self.segments.last_mut().expect("an active segment");
        let (seq, offset) = (segment.seq, segment.size);
        segment.size += framed.len() as u64;
        segment.max_height = Some(block.header.height);
        let full = segment.size >= self.options.segment_bytes;
        self.apply(block);
        self.index_block(block.header.height, seq, offset);
        self.logged_since_snapshot += framed.len() as u64;

        if full {
            let next = self.new_segment(seq + 1)?;
            self.active = OpenOptions::new()
                .append(true)
                .open(segment_path(&self.dir, next))?;
        }
        if self.logged_since_snapshot >= self.options.snapshot_min_bytes.max(self.state_bytes) {
            self.snapshot()?;
        }
        Ok(written)
    }

    /// Opens (or creates) the store in `dir`.
    pub fn open(dir: impl AsRef<Path>, options: LogOptions) -> io::Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        fs::create_dir_all(&dir)?;
        let mut store = Self {
            active: File::open(&dir)?, // replaced below
            dir,
            options,
            map: FxHashMap::default(),
            state_bytes: 0,
            head: None,
            segments: Vec::new(),
            index: VecDeque::new(),
            snapshot_height: None,
            logged_since_snapshot: 0,
        };
        store.load_snapshot()?;
        store.replay()?;
        let seq = match store.segments.last() {
            Some(s) => s.seq,
            None => store.new_segment(0)?,
        };
        store.active = OpenOptions::new()
            .append(true)
            .open(segment_path(&store.dir, seq))?;
        Ok(store)
    }

    fn load_snapshot(&mut self) -> io::Result<()> {
        for height in numbered(&self.dir, "snapshot-", ".tsnap")?
            .into_iter()
            .rev()
        {
            let bytes = fs::read(snapshot_path(&self.dir, height))?;
            if let Some((head, map)) = Self::parse_snapshot(&bytes) {
                self.state_bytes = map.iter().map(|(k, v)| (k.len() + v.len()) as u64).sum();
                self.map = map;
                self.head = Some(head);
                self.snapshot_height = Some(height);
                return Ok(());
            }
        }
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

    fn replay(&mut self) -> io::Result<()> {
        let seqs = numbered(&self.dir, "log-", ".tlog")?;
        for (i, &seq) in seqs.iter().enumerate() {
            let last = i + 1 == seqs.len();
            let path = segment_path(&self.dir, seq);
            let mut reader = BufReader::with_capacity(1 << 20, File::open(&path)?);
            let mut magic = [0u8; FILE_HEADER_LEN as usize];
            let header_ok = reader.read_exact(&mut magic).is_ok()
                && &magic[..8] == LOG_MAGIC
                && u32::from_le_bytes(magic[8..].try_into().expect("4 bytes")) == FORMAT_VERSION;
            let mut segment = Segment {
                seq,
                size: FILE_HEADER_LEN,
                max_height: None,
            };
            if !header_ok {
                if !last {
                    return Err(invalid(format!(
                        "{}: not a Tally log segment",
                        path.display()
                    )));
                }
                // A crash while creating the segment: start it again.
                drop(reader);
                self.write_segment_header(seq)?;
                self.segments.push(segment);
                continue;
            }
            loop {
                match read_record(&mut reader)? {
                    Read1::End => break,
                    Read1::Record(record, len) => {
                        self.replay_record(record, seq, segment.size, &mut segment)?;
                        segment.size += len;
                    }
                    Read1::Bad(why) if last => {
                        // A torn or corrupt tail: the crash happened before this block's
                        // fdatasync returned, so it never counted as committed.
                        drop(reader);
                        let file = OpenOptions::new().write(true).open(&path)?;
                        file.set_len(segment.size)?;
                        file.sync_all()?;
                        let _ = why;
                        break;
                    }
                    Read1::Bad(why) => {
                        return Err(invalid(format!(
                            "{} at byte {}: {why} (not the last segment: the log is damaged)",
                            path.display(),
                            segment.size
                        )));
                    }
                }
            }
            self.segments.push(segment);
        }
        Ok(())
    }

    fn replay_record(
        &mut self,
        record: BlockRecord,
        seq: u64,
        offset: u64,
        segment: &mut Segment,
    ) -> io::Result<()> {
        let height = record.header.height;
        segment.max_height = Some(height);
        let applied = self.snapshot_height.is_some_and(|s| height <= s);
        if !applied {
            let expected = self.head.as_ref().map_or(0, |h| h.height + 1);
            if height != expected {
                return Err(invalid(format!(
                    "log record for block {height} where block {expected} was expected"
                )));
            }
            self.apply(&record);
        }
        self.index_block(height, seq, offset);
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
    pub fn snapshot(&mut self) -> io::Result<()> {
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
    fn get(&self, key: &[u8]) -> io::Result<Option<Cow<'_, [u8]>>> {
        Ok(self.map.get(key).map(|v| Cow::Borrowed(v.as_slice())))
    }

    fn commit(&mut self, block: &BlockRecord) -> io::Result<()> {
        self.append(block, true).map(|_| ())
    }

    fn commit_deferred(&mut self, block: &BlockRecord) -> io::Result<Option<SyncJob>> {
        let file = self.append(block, false)?;
        Ok(Some(Box::new(move || file.sync_data())))
    }

    fn head(&self) -> Option<&BlockHeader> {
        self.head.as_ref()
    }

    fn block(&self, height: u64) -> io::Result<Option<BlockRecord>> {
        let Some(pos) = self.index.iter().find(|p| p.height == height) else {
            return Ok(None);
        };
        let mut file = File::open(segment_path(&self.dir, pos.seq))?;
        file.seek(SeekFrom::Start(pos.offset))?;
        match read_record(&mut BufReader::new(file))? {
            Read1::Record(record, _) if record.header.height == height => Ok(Some(record)),
            Read1::Record(..) => Err(invalid(format!("block {height} is not where indexed"))),
            Read1::End => Err(invalid(format!("block {height} is missing from the log"))),
            Read1::Bad(why) => Err(invalid(format!("block {height}: {why}"))),
        }
    }

    fn first_retained(&self) -> u64 {
        self.index.front().map_or(0, |p| p.height)
    }

    fn entries(&self) -> io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
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
