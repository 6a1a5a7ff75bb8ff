//! State files: the whole state at one height, sorted by key, cut into chunks, with an index
//! of the chunks beside it.
//!
//! `state-<height>.snap` holds the chunks back to back; each chunk is entries encoded as
//! `super::encode_entry` does, cut once it holds [`CHUNK_BYTES`]. `state-<height>.idx` is
//! the borsh of a [`StateIndex`] followed by its BLAKE3: where each chunk lies and its hash.
//! Both are written to a temporary name, synced and renamed, the index last: a state file
//! without its index is an unfinished one, deleted on open.

use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use borsh::{BorshDeserialize, BorshSerialize};

use super::{
    CHUNK_BYTES, EntryFn, MAX_CHUNK_BYTES, SnapshotError, decode_entries, digest, encode_entry,
};

/// Where one chunk lies in a state file, and its hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct ChunkInfo {
    /// Its first byte.
    pub offset: u64,
    /// Its length.
    pub len: u32,
    /// BLAKE3 of its bytes.
    pub hash: [u8; 32],
}

/// The index of a state file.
#[derive(Debug, Clone, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct StateIndex {
    /// The height whose state it is.
    pub height: u64,
    /// The id of block `height`: binds the file to its chain, so a file another chain (or
    /// another branch of a store put back from a backup) left in the directory is never taken
    /// for this chain's state. Not part of the digest.
    pub block: [u8; 32],
    /// Entries in it.
    pub entries: u64,
    /// Its chunks, in order.
    pub chunks: Vec<ChunkInfo>,
}

impl StateIndex {
    /// The digest a header commits to ([`super::digest`]).
    pub fn digest(&self) -> [u8; 32] {
        digest(self.height, self.entries, &self.chunk_hashes())
    }

    /// The hash of each chunk, in order.
    pub fn chunk_hashes(&self) -> Vec<[u8; 32]> {
        self.chunks.iter().map(|c| c.hash).collect()
    }

    /// Writes the index to `path` (through a temporary file, synced, then renamed).
    pub fn write(&self, path: &Path) -> Result<(), SnapshotError> {
        let mut bytes = borsh::to_vec(self).expect("encoding into a Vec cannot fail");
        let check = blake3::hash(&bytes);
        bytes.extend_from_slice(check.as_bytes());
        write_synced(path, &bytes)
    }

    /// Reads the index at `path`, checking its checksum.
    pub fn read(path: &Path) -> Result<Self, SnapshotError> {
        let bytes = std::fs::read(path).map_err(|e| SnapshotError::io(path, e))?;
        let body = checked(path, &bytes)?;
        Self::try_from_slice(body).map_err(|e| SnapshotError::corrupt(path, e.to_string()))
    }
}

/// `bytes` without its trailing BLAKE3, if it matches.
pub(crate) fn checked<'a>(path: &Path, bytes: &'a [u8]) -> Result<&'a [u8], SnapshotError> {
    let Some(split) = bytes.len().checked_sub(32) else {
        return Err(SnapshotError::corrupt(path, "shorter than its checksum"));
    };
    let (body, check) = bytes.split_at(split);
    if blake3::hash(body).as_bytes() != check {
        return Err(SnapshotError::corrupt(path, "its checksum does not match"));
    }
    Ok(body)
}

/// Writes `bytes` to `path` whole or not at all: a temporary file, synced, renamed, and the
/// directory synced.
pub(crate) fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), SnapshotError> {
    let tmp = tmp_path(path);
    let mut f = File::create(&tmp).map_err(|e| SnapshotError::io(&tmp, e))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_data())
        .map_err(|e| SnapshotError::io(&tmp, e))?;
    rename_synced(&tmp, path)
}

/// Flushes `out` (writing the file at `path`) and syncs the file's data.
pub(crate) fn flush_synced(out: BufWriter<File>, path: &Path) -> Result<File, SnapshotError> {
    let file = out
        .into_inner()
        .map_err(|e| SnapshotError::io(path, e.into_error()))?;
    file.sync_data().map_err(|e| SnapshotError::io(path, e))?;
    Ok(file)
}

/// Renames `from` to `to` and syncs `to`'s directory, so the new name survives a power cut.
pub(crate) fn rename_synced(from: &Path, to: &Path) -> Result<(), SnapshotError> {
    std::fs::rename(from, to).map_err(|e| SnapshotError::io(from, e))?;
    let dir = to.parent().unwrap_or(Path::new("."));
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| SnapshotError::io(dir, e))
}

/// The temporary name `path` is written under.
pub(crate) fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Writes a state file as sorted entries stream past, cutting and hashing chunks.
pub struct StateWriter {
    path: PathBuf,
    tmp: PathBuf,
    out: BufWriter<File>,
    chunk: Vec<u8>,
    index: StateIndex,
    offset: u64,
    chunk_bytes: usize,
}

impl StateWriter {
    /// Starts the state file of `height` (block id `block`) at `path` (written under a
    /// temporary name until [`StateWriter::finish`]), cutting chunks at `chunk_bytes` (at most
    /// [`CHUNK_BYTES`]).
    pub fn create(
        path: &Path,
        height: u64,
        block: [u8; 32],
        chunk_bytes: u32,
    ) -> Result<Self, SnapshotError> {
        let tmp = tmp_path(path);
        let file = File::create(&tmp).map_err(|e| SnapshotError::io(&tmp, e))?;
        Ok(Self {
            path: path.to_path_buf(),
            tmp,
            out: BufWriter::with_capacity(1 << 20, file),
            chunk: Vec::with_capacity(chunk_bytes as usize + 4096),
            index: StateIndex {
                height,
                block,
                entries: 0,
                chunks: Vec::new(),
            },
            offset: 0,
            chunk_bytes: chunk_bytes as usize,
        })
    }

    /// Adds the next entry (keys strictly increasing).
    pub fn add(&mut self, key: &[u8], value: &[u8]) -> Result<(), SnapshotError> {
        encode_entry(&mut self.chunk, key, value);
        self.index.entries += 1;
        if self.chunk.len() >= self.chunk_bytes {
            self.cut()?;
        }
        Ok(())
    }

    /// Adds a whole chunk that was already checked (a restoring node's verified chunk).
    pub(crate) fn add_chunk(&mut self, chunk: &[u8], entries: u64) -> Result<(), SnapshotError> {
        debug_assert!(self.chunk.is_empty());
        self.write_chunk(chunk)?;
        self.index.entries += entries;
        Ok(())
    }

    fn cut(&mut self) -> Result<(), SnapshotError> {
        let chunk = std::mem::take(&mut self.chunk);
        self.write_chunk(&chunk)?;
        self.chunk = chunk;
        self.chunk.clear();
        Ok(())
    }

    fn write_chunk(&mut self, chunk: &[u8]) -> Result<(), SnapshotError> {
        self.out
            .write_all(chunk)
            .map_err(|e| SnapshotError::io(&self.tmp, e))?;
        self.index.chunks.push(ChunkInfo {
            offset: self.offset,
            len: chunk.len() as u32,
            hash: blake3::hash(chunk).into(),
        });
        self.offset += chunk.len() as u64;
        Ok(())
    }

    /// Cuts the last chunk, syncs the file, renames it into place and writes its index.
    pub fn finish(mut self) -> Result<StateIndex, SnapshotError> {
        if !self.chunk.is_empty() {
            self.cut()?;
        }
        flush_synced(self.out, &self.tmp)?;
        rename_synced(&self.tmp, &self.path)?;
        self.index.write(&index_path(&self.path))?;
        Ok(self.index)
    }
}

/// The index file beside the state file at `path`.
pub fn index_path(path: &Path) -> PathBuf {
    path.with_extension("idx")
}

/// Reads chunk `info` of the state file at `path`.
pub fn read_chunk(path: &Path, info: &ChunkInfo) -> Result<Vec<u8>, SnapshotError> {
    read_at(path, info.offset, u64::from(info.len))
}

/// Reads `len` bytes at `offset` of the file at `path` (a chunk, a piece or a block of a
/// tail); `len` is bounded by the caller (a block of the tail by `MAX_TAIL_BLOCK_BYTES`).
pub(crate) fn read_at(path: &Path, offset: u64, len: u64) -> Result<Vec<u8>, SnapshotError> {
    let len = usize::try_from(len).map_err(|_| SnapshotError::corrupt(path, "a read too large"))?;
    let mut f = File::open(path).map_err(|e| SnapshotError::io(path, e))?;
    let mut bytes = vec![0; len];
    f.seek(SeekFrom::Start(offset))
        .and_then(|_| f.read_exact(&mut bytes))
        .map_err(|e| SnapshotError::io(path, e))?;
    Ok(bytes)
}

/// Calls `f` with every entry of the state file at `path`, in order, checking each chunk
/// against its hash in `index` first: a damaged file is reported, never read as state.
pub fn for_each_entry(
    path: &Path,
    index: &StateIndex,
    f: &mut EntryFn<'_, SnapshotError>,
) -> Result<(), SnapshotError> {
    let mut file = std::io::BufReader::with_capacity(
        1 << 20,
        File::open(path).map_err(|e| SnapshotError::io(path, e))?,
    );
    let mut chunk = Vec::with_capacity(CHUNK_BYTES + 4096);
    let mut entries = 0u64;
    for (i, info) in index.chunks.iter().enumerate() {
        if info.len as usize > MAX_CHUNK_BYTES {
            return Err(SnapshotError::corrupt(
                path,
                format!("chunk {i} is too large"),
            ));
        }
        chunk.resize(info.len as usize, 0);
        file.read_exact(&mut chunk)
            .map_err(|e| SnapshotError::io(path, e))?;
        if blake3::hash(&chunk).as_bytes() != &info.hash {
            return Err(SnapshotError::corrupt(
                path,
                format!("chunk {i} does not match its hash"),
            ));
        }
        let mut failed = None;
        decode_entries(&chunk, &mut |k, v| {
            entries += 1;
            f(k, v).map_err(|e| {
                let why = e.to_string();
                failed = Some(e);
                why
            })
        })
        .map_err(|why| {
            failed
                .take()
                .unwrap_or_else(|| SnapshotError::corrupt(path, why))
        })?;
    }
    if entries != index.entries {
        return Err(SnapshotError::corrupt(
            path,
            format!("{entries} entries where its index says {}", index.entries),
        ));
    }
    Ok(())
}
