//! Opening the log store: the newest run, then every segment's records replayed into the index,
//! with the crash model's one repair (a torn last record cut off, by a writer only) and every
//! other failed check refused as corruption.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::block::BlockHeader;
use crate::store::{DroppedTail, Poison, StoreError, StoreResult};

use super::index::Loc;
use super::merge::run_path;
use super::record::{self, ChangeCursor, FileReader, RECORD_HEADER_LEN, parse_header, read_prefix};
use super::run::Run;
use super::vfs::VFile;
use super::{
    BlockPos, FILE_HEADER_LEN, FORMAT_VERSION, LOG_MAGIC, LogStore, Segment, segment_path,
};

/// Files in `names` called `<prefix><number><suffix>` exactly as the store names them
/// (`path_of`), sorted by number. Any other spelling of a number (`log-7.tlog`, `log-+7.tlog`)
/// is not the store's file: read as one, it would name a file that does not exist, or the same
/// segment twice (issue 10, found by fuzzing).
fn numbered(
    names: &[String],
    prefix: &str,
    suffix: &str,
    path_of: fn(&Path, u64) -> PathBuf,
) -> Vec<u64> {
    let mut found: Vec<u64> = names
        .iter()
        .filter_map(|name| {
            let number = name
                .strip_prefix(prefix)?
                .strip_suffix(suffix)?
                .parse()
                .ok()?;
            (path_of(Path::new(""), number).as_os_str() == name.as_str()).then_some(number)
        })
        .collect();
    found.sort_unstable();
    found
}

/// What reading the record at some offset of a segment found.
enum Scan {
    /// A whole record: its payload length, retain_from and header (boxed: a header is 296
    /// bytes, the other variants a few).
    Record(u64, u64, Box<BlockHeader>),
    End,
    Torn(&'static str),
    BadHeader,
    Corrupt(String),
}

/// Reads the record at `offset` of `file` (`file_len` bytes), checking its checksums.
fn scan_record(file: &(dyn VFile + 'static), offset: u64, file_len: u64) -> io::Result<Scan> {
    let rest = file_len.saturating_sub(offset);
    if rest == 0 {
        return Ok(Scan::End);
    }
    if rest < RECORD_HEADER_LEN {
        return Ok(Scan::Torn("the log ends inside a record header"));
    }
    let mut header = [0u8; RECORD_HEADER_LEN as usize];
    file.read_exact_at(&mut header, offset)?;
    let Some(header) = parse_header(&header) else {
        return Ok(Scan::BadHeader);
    };
    if header.len > rest - RECORD_HEADER_LEN {
        return Ok(Scan::Torn("the log ends inside a record"));
    }
    let start = offset + RECORD_HEADER_LEN;
    let end = start + header.len;
    if !record::payload_crc_ok(file, start, header.len, header.payload_crc)? {
        return Ok(if end == file_len {
            Scan::Torn("the last record fails its checksum")
        } else {
            Scan::Corrupt(format!(
                "record checksum mismatch, with {} more bytes of log after the record",
                file_len - end
            ))
        });
    }
    let mut reader = FileReader::new(file, start, end, 256);
    match read_prefix(&mut reader) {
        Ok(Some(prefix)) => Ok(Scan::Record(
            header.len,
            prefix.retain_from,
            Box::new(prefix.header),
        )),
        Ok(None) => Ok(Scan::Corrupt("a record of an unknown kind".into())),
        Err(e) => Ok(Scan::Corrupt(format!("the record does not decode: {e}"))),
    }
}

/// What follows a damaged record header in the last segment.
enum After {
    /// A whole, checksummed record starts at this offset: the damage is not a torn tail.
    Good(u64),
    /// No good record follows: the damaged record may be a torn tail.
    Nothing,
    /// Too many record-like headers follow to check them all (each costs a checksum of the
    /// rest of the file, so a crafted file could make this quadratic): not a torn tail either.
    TooMany,
}

/// The first whole, checksummed record that starts after `from` in `file`. A damaged record
/// header hides where its record ends; if a good record follows somewhere, the damage is not a
/// torn tail.
fn good_record_after(file: &(dyn VFile + 'static), from: u64, file_len: u64) -> io::Result<After> {
    const WINDOW: u64 = 1 << 20;
    // A random 12 bytes pass the header checksum once in 2^32, so an honest torn tail
    // checksums next to nothing; this allows every byte of the file twice over.
    let mut budget = 2 * file_len + WINDOW;
    let mut buf = Vec::new();
    let mut pos = from;
    while pos + RECORD_HEADER_LEN <= file_len {
        let n = (WINDOW + RECORD_HEADER_LEN).min(file_len - pos);
        buf.resize(n as usize, 0);
        file.read_exact_at(&mut buf, pos)?;
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
            let Some(left) = budget.checked_sub(header.len) else {
                return Ok(After::TooMany);
            };
            budget = left;
            if record::payload_crc_ok(file, start, header.len, header.payload_crc)? {
                return Ok(After::Good(pos + i));
            }
        }
        pos += candidates;
    }
    Ok(After::Nothing)
}

/// A write that failed while opening: the open fails with it (there is no store to stop yet).
pub(super) fn open_error(failure: Poison) -> StoreError {
    StoreError::Io(io::Error::other(format!(
        "{} {} failed: {}",
        failure.step,
        failure.path.display(),
        failure.cause
    )))
}

impl LogStore {
    /// Loads the newest run and replays the log above it.
    pub(super) fn load(&mut self) -> StoreResult<()> {
        let names = self.vfs.list(&self.dir)?;
        if !self.read_only {
            // Leftovers of a merge that a crash interrupted.
            for name in names.iter().filter(|n| n.ends_with(".tmp")) {
                self.vfs.remove(&self.dir.join(name))?;
            }
        }
        let runs = numbered(&names, "run-", ".trun", run_path);
        if let Some(&height) = runs.last() {
            let run = Run::open(&*self.vfs, &run_path(&self.dir, height))?;
            if run.head().height != height {
                return Err(StoreError::corrupted(
                    run_path(&self.dir, height),
                    None,
                    format!("the run holds block {} instead", run.head().height),
                ));
            }
            // Nothing is deleted since it yet: the replay below masks what is.
            self.set_run(Arc::new(run))?;
            if !self.read_only {
                for &old in &runs[..runs.len() - 1] {
                    self.vfs.remove(&run_path(&self.dir, old))?;
                }
            }
        }
        let seqs = numbered(&names, "log-", ".tlog", segment_path);
        // The index addresses a change by segment number; the store never numbers a segment
        // past what it can address, so such a file is not one it wrote (issue 10, found by
        // fuzzing: it used to panic in `Loc::new`).
        if let Some(&seq) = seqs.last()
            && seq > Loc::MAX_SEQ
        {
            return Err(StoreError::corrupted(
                segment_path(&self.dir, seq),
                None,
                format!(
                    "segment number {seq} is past the largest a store can have ({})",
                    Loc::MAX_SEQ
                ),
            ));
        }
        for (i, &seq) in seqs.iter().enumerate() {
            self.replay_segment(seq, i + 1 == seqs.len())?;
        }
        self.head = match (self.blocks.back(), &self.run) {
            (Some(_), _) => self.head.take(),
            (None, Some(run)) => Some(run.head().clone()),
            (None, None) => None,
        };
        if let (Some(run), Some(last)) = (&self.run, self.blocks.back())
            && last.height < run.head().height
        {
            return Err(StoreError::corrupted(
                segment_path(&self.dir, last.seq),
                Some(last.offset),
                format!(
                    "the log ends at block {} but the run holds the state after block {}",
                    last.height,
                    run.head().height
                ),
            ));
        }
        if let (Some(run), Some(first)) = (&self.run, self.blocks.front())
            && first.height > run.head().height + 1
        {
            return Err(StoreError::corrupted(
                segment_path(&self.dir, first.seq),
                Some(first.offset),
                format!(
                    "the log starts at block {} but the run ends at block {}",
                    first.height,
                    run.head().height
                ),
            ));
        }
        if !self.read_only {
            self.delete_dead_segments().map_err(open_error)?;
        }
        self.stats.index_keys = self.index.len() as u64;
        Ok(())
    }

    pub(super) fn replay_segment(&mut self, seq: u64, last: bool) -> StoreResult<()> {
        let path = segment_path(&self.dir, seq);
        let file = if self.read_only {
            self.vfs.open_read(&path)?
        } else {
            self.vfs.open_append(&path)?
        };
        let file_len = file.len()?;
        let segment = Segment {
            seq,
            file: file.clone(),
            size: FILE_HEADER_LEN,
            max_height: None,
        };
        if !segment_header_valid(&path, &*file, file_len, last)? {
            // A crash while creating it: start it again.
            if !self.read_only {
                file.set_len(0)?;
                file.append(&Self::segment_header())?;
                file.sync()?;
            }
            self.segments.push_back(segment);
            return Ok(());
        }
        // In the list before its records replay: the index confirms keys by reading them back.
        self.segments.push_back(segment);
        self.replay_records(&path, &file, seq, file_len, last)
    }

    /// Replays the records of segment `seq` (the last segment if `last`), whose header was
    /// checked; cuts a torn tail off the last one.
    fn replay_records(
        &mut self,
        path: &Path,
        file: &Arc<dyn VFile>,
        seq: u64,
        file_len: u64,
        last: bool,
    ) -> StoreResult<()> {
        loop {
            let offset = self.segments.back().expect("pushed").size;
            let torn = match scan_record(&**file, offset, file_len)? {
                Scan::End => return Ok(()),
                Scan::Record(len, retain_from, header) => {
                    self.replay_record(path, file, seq, offset, len, retain_from, *header)?;
                    let segment = self.segments.back_mut().expect("pushed");
                    segment.max_height = self.blocks.back().map(|b| b.height);
                    segment.size += RECORD_HEADER_LEN + len;
                    continue;
                }
                Scan::Corrupt(why) => {
                    return Err(StoreError::corrupted(path.to_path_buf(), Some(offset), why));
                }
                Scan::Torn(why) if !last => {
                    return Err(StoreError::corrupted(
                        path.to_path_buf(),
                        Some(offset),
                        format!("{why}, in a sealed segment (not the last one)"),
                    ));
                }
                Scan::Torn(why) => why,
                Scan::BadHeader => match bad_header_damage(&**file, offset, file_len, last)? {
                    Some(why) => {
                        return Err(StoreError::corrupted(path.to_path_buf(), Some(offset), why));
                    }
                    None => "the last record's header is damaged and no record follows it",
                },
            };
            // A record the run already holds was synced before the run was written, so this is
            // damage, not a crash's torn tail: cutting it would leave the head below the state
            // the run holds (found by helper-44's review). Nothing is cut.
            if let (Some(run_height), Some(last_whole)) =
                (self.run_height(), self.blocks.back().map(|b| b.height))
                && last_whole < run_height
            {
                return Err(StoreError::corrupted(
                    path.to_path_buf(),
                    Some(offset),
                    format!(
                        "{torn}, but the run holds the state after block {run_height} and the \
                         last whole record is block {last_whole}: the log was damaged after it \
                         was synced; restore this node from a snapshot or a copy"
                    ),
                ));
            }
            // A record that never finished: a crash before its sync returned, so its block
            // never counted as committed. Reported, since damage to the last block looks
            // the same.
            self.dropped_tail = Some(DroppedTail {
                file: path.into(),
                offset,
                bytes: file_len - offset,
                why: torn,
                cut: !self.read_only,
            });
            if !self.read_only {
                file.set_len(offset)?;
                file.sync()?;
            }
            return Ok(());
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn replay_record(
        &mut self,
        path: &Path,
        file: &Arc<dyn VFile>,
        seq: u64,
        offset: u64,
        len: u64,
        retain_from: u64,
        header: BlockHeader,
    ) -> StoreResult<()> {
        let height = header.height;
        let run_height = self.run_height();
        let expected = match (self.blocks.back(), run_height) {
            (Some(b), _) => Some(b.height + 1),
            (None, Some(_)) => None, // the log may start anywhere at or below the run
            (None, None) => Some(0),
        };
        if expected.is_some_and(|e| e != height) {
            return Err(StoreError::corrupted(
                path,
                Some(offset),
                format!(
                    "a record of block {height} where block {} was expected",
                    expected.expect("some")
                ),
            ));
        }
        // A record at the run's height is the run's block: heights alone let a run from
        // another store replay with this store's log into a mix of two states (helper-44's
        // review).
        if let Some(run) = &self.run
            && height == run.head().height
            && header.id() != run.head().id()
        {
            return Err(StoreError::corrupted(
                path,
                Some(offset),
                format!(
                    "block {height} is not the block the run holds at that height: a run or a \
                     segment from another store"
                ),
            ));
        }
        if run_height.is_none_or(|r| height > r) {
            let (_, mut cursor) = ChangeCursor::new(&**file, offset, len, 1 << 20)
                .map_err(|e| StoreError::corrupted(path, Some(offset), e.to_string()))?;
            let (mut key, mut value, mut previous) = (Vec::new(), Vec::new(), Vec::new());
            let mut first = true;
            while let Some((at, present)) = cursor
                .next_into(&mut key, &mut value)
                .map_err(|e| StoreError::corrupted(path, Some(offset), e.to_string()))?
            {
                if !first && previous >= key {
                    return Err(StoreError::corrupted(
                        path,
                        Some(offset),
                        "changes out of order",
                    ));
                }
                first = false;
                self.index_change(&key, present.then_some(value.as_slice()), Loc::new(seq, at))?;
                std::mem::swap(&mut previous, &mut key);
            }
            self.order.flush();
        }
        self.blocks.push_back(BlockPos {
            height,
            seq,
            offset,
            len,
        });
        self.retain_from = retain_from;
        self.head = Some(header);
        Ok(())
    }
}

/// Whether segment `path` starts with a log header of this format version. `Ok(false)` for the
/// last segment when it is no longer than a header (a crash while creating it); damage or
/// another version is an error.
fn segment_header_valid(
    path: &Path,
    file: &(dyn VFile + 'static),
    file_len: u64,
    last: bool,
) -> StoreResult<bool> {
    let mut magic = [0u8; FILE_HEADER_LEN as usize];
    let whole = file_len >= FILE_HEADER_LEN && file.read_exact_at(&mut magic, 0).is_ok();
    if !whole || &magic[..8] != LOG_MAGIC {
        // Its header was synced before any record went in, so this is damage, unless the file
        // is no longer than a header.
        if !(last && file_len <= FILE_HEADER_LEN) {
            return Err(StoreError::corrupted(
                path.to_path_buf(),
                Some(0),
                "not a Tally log segment (bad or missing header)",
            ));
        }
        return Ok(false);
    }
    let version = u32::from_le_bytes(magic[8..].try_into().expect("4 bytes"));
    if version != FORMAT_VERSION {
        return Err(StoreError::Version {
            path: path.into(),
            found: version,
            expected: FORMAT_VERSION,
        });
    }
    Ok(true)
}

/// Why a record header at `offset` whose checksum fails is damage, or `None` when it is the
/// torn tail of the last segment: nothing record-like follows it.
fn bad_header_damage(
    file: &(dyn VFile + 'static),
    offset: u64,
    file_len: u64,
    last: bool,
) -> StoreResult<Option<String>> {
    if !last {
        return Ok(Some(
            "record header checksum mismatch, in a sealed segment (not the last one)".into(),
        ));
    }
    Ok(match good_record_after(file, offset + 1, file_len)? {
        After::Good(at) => Some(format!(
            "record header checksum mismatch, with a good record after it at byte {at}"
        )),
        After::TooMany => Some(
            "record header checksum mismatch, followed by more record-like headers than can be \
             checked"
                .to_string(),
        ),
        After::Nothing => None,
    })
}
