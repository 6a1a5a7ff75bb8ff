//! The changes of the blocks awaiting the next snapshot, on disk rather than in memory.
//!
//! Each committed block's changes (sorted by key, as every block's are) are appended to a
//! spill file; the merge reads them back as one sorted stream, a later block's change of a
//! key over an earlier one's, through a small buffer per block. At the write maximum a block
//! changes a million keys (~100 MB in memory), and an interval holds `interval` blocks: held
//! in memory they would grow with the interval, spilled they cost a buffer a block.
//!
//! A spill file is never synced and never read after a restart: the chain keeps the blocks
//! from the base up ([`super::build::Snapshotter::retain_floor`]) and spills them again.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::store::{Change, Changes};

use super::SnapshotError;

/// Bytes a reader of one block's changes buffers: 64 KiB, the largest value a contract may
/// store (`MAX_VALUE_LEN`), so most entries need one read; a larger one (a contract's code)
/// grows its buffer.
const READ_BUFFER: usize = 64 * 1024;

/// Appends blocks' changes to a spill file.
pub(crate) struct Spill {
    path: PathBuf,
    out: BufWriter<File>,
    /// Each block's height and the byte range of its changes.
    blocks: Vec<(u64, u64, u64)>,
    len: u64,
}

/// Where a [`Spill`] was before a block was added: [`Spill::undo`] goes back there.
pub(crate) struct Mark {
    blocks: usize,
    len: u64,
}

impl Spill {
    /// Starts an empty spill file at `path` (truncating what is there).
    pub(crate) fn create(path: &Path) -> Result<Self, SnapshotError> {
        let file = File::create(path).map_err(|e| SnapshotError::io(path, e))?;
        Ok(Self {
            path: path.to_path_buf(),
            out: BufWriter::with_capacity(1 << 20, file),
            blocks: Vec::new(),
            len: 0,
        })
    }

    /// Appends block `height`'s changes (sorted by key).
    pub(crate) fn add(&mut self, height: u64, changes: &Changes) -> Result<Mark, SnapshotError> {
        let mark = Mark {
            blocks: self.blocks.len(),
            len: self.len,
        };
        let start = self.len;
        for (key, value) in changes {
            let mut head = [0u8; 9];
            head[..4].copy_from_slice(&(key.len() as u32).to_le_bytes());
            head[4] = u8::from(value.is_some());
            let value = value.unwrap_or_default();
            head[5..].copy_from_slice(&(value.len() as u32).to_le_bytes());
            self.out
                .write_all(&head)
                .and_then(|()| self.out.write_all(key))
                .and_then(|()| self.out.write_all(value))
                .map_err(|e| SnapshotError::io(&self.path, e))?;
            self.len += (head.len() + key.len() + value.len()) as u64;
        }
        self.blocks.push((height, start, self.len));
        Ok(mark)
    }

    /// Drops what was added since `mark` (a block whose commit failed).
    pub(crate) fn undo(&mut self, mark: Mark) -> Result<(), SnapshotError> {
        self.out
            .flush()
            .and_then(|()| self.out.get_ref().set_len(mark.len))
            .map_err(|e| SnapshotError::io(&self.path, e))?;
        use std::io::Seek;
        self.out
            .seek(std::io::SeekFrom::Start(mark.len))
            .map_err(|e| SnapshotError::io(&self.path, e))?;
        self.blocks.truncate(mark.blocks);
        self.len = mark.len;
        Ok(())
    }

    /// The height of the last block spilled.
    pub(crate) fn last_height(&self) -> Option<u64> {
        self.blocks.last().map(|b| b.0)
    }

    /// Ends the spill: its file, to be read back.
    pub(crate) fn finish(mut self) -> Result<SpillFile, SnapshotError> {
        self.out
            .flush()
            .map_err(|e| SnapshotError::io(&self.path, e))?;
        Ok(SpillFile {
            path: self.path,
            blocks: self.blocks,
        })
    }
}

/// A finished spill: read it back with [`SpillFile::merged`], then [`SpillFile::remove`] it.
pub(crate) struct SpillFile {
    path: PathBuf,
    blocks: Vec<(u64, u64, u64)>,
}

impl SpillFile {
    /// The changes of every block, merged: each key once, in key order, with the change of the
    /// latest block that changed it.
    pub(crate) fn merged(&self) -> Result<Merged, SnapshotError> {
        let file = File::open(&self.path).map_err(|e| SnapshotError::io(&self.path, e))?;
        let mut readers = Vec::with_capacity(self.blocks.len());
        let mut heap = BinaryHeap::with_capacity(self.blocks.len());
        for (i, &(_, start, end)) in self.blocks.iter().enumerate() {
            let mut r = Reader {
                pos: start,
                end,
                buf: Vec::new(),
                at: 0,
                current: None,
            };
            r.advance(&file, &self.path)?;
            if let Some((key, _)) = &r.current {
                heap.push(Reverse((key.clone(), Reverse(i))));
            }
            readers.push(r);
        }
        Ok(Merged {
            file,
            path: self.path.clone(),
            readers,
            heap,
        })
    }

    /// Deletes the file.
    pub(crate) fn remove(self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// One block's changes, read back a buffer at a time.
struct Reader {
    pos: u64,
    end: u64,
    buf: Vec<u8>,
    at: usize,
    current: Option<Change>,
}

impl Reader {
    /// Makes sure `n` bytes past `at` are in the buffer.
    fn fill(&mut self, file: &File, path: &Path, n: usize) -> Result<(), SnapshotError> {
        let have = self.buf.len() - self.at;
        if have >= n {
            return Ok(());
        }
        self.buf.drain(..self.at);
        self.at = 0;
        let want = (n - have)
            .max(READ_BUFFER)
            .min((self.end - self.pos) as usize);
        if want < n - have {
            return Err(SnapshotError::corrupt(path, "a change runs past its block"));
        }
        let old = self.buf.len();
        self.buf.resize(old + want, 0);
        file.read_exact_at(&mut self.buf[old..], self.pos)
            .map_err(|e| SnapshotError::io(path, e))?;
        self.pos += want as u64;
        Ok(())
    }

    /// Reads the next change into `current` (`None` at the block's end).
    fn advance(&mut self, file: &File, path: &Path) -> Result<(), SnapshotError> {
        if self.at == self.buf.len() && self.pos == self.end {
            self.current = None;
            return Ok(());
        }
        self.fill(file, path, 9)?;
        let head = &self.buf[self.at..self.at + 9];
        let key_len = u32::from_le_bytes(head[..4].try_into().expect("4 bytes")) as usize;
        let present = head[4] == 1;
        let value_len = u32::from_le_bytes(head[5..9].try_into().expect("4 bytes")) as usize;
        self.fill(file, path, 9 + key_len + value_len)?;
        let key = self.buf[self.at + 9..self.at + 9 + key_len].to_vec();
        let value = present
            .then(|| self.buf[self.at + 9 + key_len..self.at + 9 + key_len + value_len].to_vec());
        self.at += 9 + key_len + value_len;
        self.current = Some((key, value));
        Ok(())
    }
}

/// The merged changes of a [`SpillFile`].
pub(crate) struct Merged {
    file: File,
    path: PathBuf,
    readers: Vec<Reader>,
    /// The next key of each block that has one, smallest key first and, for one key, the
    /// latest block first.
    heap: BinaryHeap<Reverse<(Vec<u8>, Reverse<usize>)>>,
}

impl Merged {
    /// The next key and its latest change, or `None` when every block is read.
    pub(crate) fn next_change(&mut self) -> Result<Option<Change>, SnapshotError> {
        let Some(Reverse((key, Reverse(i)))) = self.heap.pop() else {
            return Ok(None);
        };
        let (_, value) = self.readers[i].current.take().expect("in the heap");
        self.step(i)?;
        // Earlier blocks' changes of the same key are overwritten.
        while let Some(Reverse((next, Reverse(j)))) = self.heap.peek()
            && *next == key
        {
            let j = *j;
            self.heap.pop();
            self.step(j)?;
        }
        Ok(Some((key, value)))
    }

    fn step(&mut self, i: usize) -> Result<(), SnapshotError> {
        let r = &mut self.readers[i];
        r.advance(&self.file, &self.path)?;
        if let Some((key, _)) = &r.current {
            self.heap.push(Reverse((key.clone(), Reverse(i))));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// The merged stream is what applying the blocks in order to a map gives, whatever the
    /// entry sizes (some past the read buffer).
    #[test]
    fn the_merged_changes_are_the_blocks_applied_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut spill = Spill::create(&dir.path().join("s.chg")).unwrap();
        let mut expected: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
        for h in 1..=30u64 {
            let mut block: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
            for i in 0..200u64 {
                let key = ((i * 7 + h * 13) % 300).to_be_bytes().to_vec();
                let value = match (i + h) % 5 {
                    0 => None,
                    1 => Some(vec![h as u8; 70_000]),
                    _ => Some((h * i).to_le_bytes().to_vec()),
                };
                block.insert(key, value);
            }
            let changes: Changes = block.clone().into_iter().collect();
            spill.add(h, &changes).unwrap();
            expected.extend(block);
        }
        // A block added and undone leaves no trace.
        let mark = spill
            .add(
                31,
                &Changes::from(vec![(b"zz".to_vec(), Some(b"x".to_vec()))]),
            )
            .unwrap();
        spill.undo(mark).unwrap();
        let file = spill.finish().unwrap();
        let mut merged = file.merged().unwrap();
        let mut got = Vec::new();
        while let Some(change) = merged.next_change().unwrap() {
            got.push(change);
        }
        assert_eq!(got, expected.into_iter().collect::<Vec<_>>());
        file.remove();
    }
}
