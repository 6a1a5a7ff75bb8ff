//! Restoring a snapshot from peers, trusting none of them.
//!
//! [`Restore::offer`] believes nothing but the app hash CometBFT's light client verified for
//! the snapshot's height `T`: the manifest's last header must hash to it, the headers before
//! must chain to it, and the manifest's chunk hashes must give the digest that header commits
//! to. [`Restore::apply`] then checks each chunk before it keeps any of it: a state chunk
//! against its hash, a block of `S..=T` against its header (its body against the
//! transactions root, its changes against the chained state checksum). A chunk that fails is
//! refused alone; the caller asks another peer for it. [`Restore::finish`] streams the
//! checked state into an empty store as a genesis streams, then commits the blocks above it.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use borsh::BorshDeserialize;

use crate::block::BlockHeader;
use crate::store::{BlockRecord, ChangeFn, ChangeSource, Changes, Commit, Durability, StateStore};
use crate::tx::BlockBody;

use super::file::{StateIndex, StateWriter, for_each_entry, read_at};
use super::{
    CHUNK_BYTES, FORMAT, MAX_CHUNK_BYTES, MAX_CHUNKS, MAX_DELAY, MAX_METADATA_BYTES,
    MAX_TAIL_BLOCK_BYTES, Manifest, Offer, SnapshotError, SnapshotStore, TailBlock, decode_entries,
    digest,
};

/// Why an offered snapshot is refused.
#[derive(Debug, thiserror::Error)]
pub enum OfferError {
    /// A format this node does not restore (CometBFT: `REJECT_FORMAT`).
    #[error("snapshot format {0} is not {FORMAT}")]
    Format(u32),
    /// The snapshot does not match what consensus committed (CometBFT: `REJECT`).
    #[error("snapshot refused: {0}")]
    Invalid(String),
    /// The node cannot write its work directory (CometBFT: `ABORT`).
    #[error(transparent)]
    Io(#[from] SnapshotError),
}

/// Why a chunk is refused.
#[derive(Debug, thiserror::Error)]
pub enum ChunkError {
    /// The chunk does not match the manifest: forged, damaged, of another snapshot or cut
    /// short. Nothing of it was kept; ask another peer for it (CometBFT: `RETRY`, rejecting the
    /// sender).
    #[error("chunk refused: {0}")]
    Refused(String),
    /// The chunk matches the manifest, but a block of the tail it completes does not match
    /// its header: the manifest's tail hashes lie, so the whole snapshot is refused
    /// (CometBFT: `REJECT_SNAPSHOT`), and another is restored instead.
    #[error("snapshot refused: {0}")]
    Snapshot(String),
    /// The node cannot write its work directory (CometBFT: `ABORT`).
    #[error(transparent)]
    Io(#[from] SnapshotError),
}

/// What applying a chunk left to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// More chunks to come.
    More,
    /// Every chunk is in: call [`Restore::finish`].
    Done,
}

/// A snapshot being restored.
pub struct Restore {
    dir: PathBuf,
    manifest: Manifest,
    next: u64,
    state: Option<StateWriter>,
    index: Option<StateIndex>,
    last_key: Option<Vec<u8>>,
    tail: BufWriter<File>,
    /// Bytes of the tail written.
    tail_written: u64,
    /// Blocks of the tail checked against their headers, and where the next one starts.
    blocks_checked: usize,
    block_start: u64,
}

fn invalid(why: impl Into<String>) -> OfferError {
    OfferError::Invalid(why.into())
}

fn refused(why: impl Into<String>) -> ChunkError {
    ChunkError::Refused(why.into())
}

impl Restore {
    /// Checks an offered snapshot against `app_hash` (the one the light client verified for
    /// `offer.height`) and starts restoring it in `work_dir`, which is emptied first.
    pub fn offer(work_dir: &Path, offer: &Offer, app_hash: &[u8]) -> Result<Self, OfferError> {
        if offer.format != FORMAT {
            return Err(OfferError::Format(offer.format));
        }
        if offer.metadata.len() > MAX_METADATA_BYTES {
            return Err(invalid(format!(
                "its metadata has {} bytes, more than {MAX_METADATA_BYTES}",
                offer.metadata.len()
            )));
        }
        if blake3::hash(&offer.metadata).as_bytes() != &offer.hash {
            return Err(invalid("its hash is not the hash of its metadata"));
        }
        let manifest = Manifest::try_from_slice(&offer.metadata)
            .map_err(|e| invalid(format!("its metadata does not decode: {e}")))?;
        check_manifest(&manifest, offer, app_hash)?;
        match std::fs::remove_dir_all(work_dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(SnapshotError::io(work_dir, e).into());
            }
            _ => {}
        }
        std::fs::create_dir_all(work_dir).map_err(|e| SnapshotError::io(work_dir, e))?;
        let base = &manifest.headers[0];
        // Chunks arrive whole: the writer never cuts one (the size is the largest allowed).
        let state = StateWriter::create(
            &work_dir.join("state.snap"),
            base.height,
            base.id(),
            super::CHUNK_BYTES as u32,
        )?;
        let tail_path = work_dir.join("tail");
        let tail = File::create(&tail_path).map_err(|e| SnapshotError::io(&tail_path, e))?;
        let mut restore = Self {
            dir: work_dir.to_path_buf(),
            manifest,
            next: 0,
            state: Some(state),
            index: None,
            last_key: None,
            tail: BufWriter::new(tail),
            tail_written: 0,
            blocks_checked: 0,
            block_start: 0,
        };
        if restore.manifest.chunk_hashes.is_empty() {
            restore.end_state().map_err(|e| match e {
                ChunkError::Refused(why) | ChunkError::Snapshot(why) => OfferError::Invalid(why),
                ChunkError::Io(e) => OfferError::Io(e),
            })?;
        }
        Ok(restore)
    }

    /// The height of the base state (`S`).
    pub fn base(&self) -> u64 {
        self.manifest.headers[0].height
    }

    /// The index of the chunk expected next.
    pub fn next_chunk(&self) -> u32 {
        self.next as u32
    }

    /// Checks chunk `index` (chunks come in order) and keeps it if it matches.
    pub fn apply(&mut self, index: u32, chunk: &[u8]) -> Result<Applied, ChunkError> {
        if self.next == self.manifest.chunks() {
            return Err(refused(format!(
                "chunk {index} arrived after the last, {}",
                self.next - 1
            )));
        }
        if u64::from(index) != self.next {
            return Err(refused(format!(
                "chunk {index} arrived where chunk {} was expected",
                self.next
            )));
        }
        if chunk.len() > MAX_CHUNK_BYTES {
            return Err(refused(format!(
                "chunk {index} has {} bytes, more than {MAX_CHUNK_BYTES}",
                chunk.len()
            )));
        }
        // The tail first: its blocks are checked against the headers as they complete, so a
        // manifest whose tail lies is refused before any of the state is fetched.
        let pieces = self.manifest.tail_hashes.len() as u64;
        if self.next < pieces {
            self.apply_tail(self.next as usize, chunk)?;
        } else {
            self.apply_state((self.next - pieces) as u32, chunk)?;
        }
        self.next += 1;
        if self.next == self.manifest.chunks() {
            self.tail
                .flush()
                .and_then(|()| self.tail.get_ref().sync_data())
                .map_err(|e| SnapshotError::io(&self.dir.join("tail"), e))?;
            return Ok(Applied::Done);
        }
        Ok(Applied::More)
    }

    /// State chunk `index` (of the state's chunks, after the tail's pieces).
    fn apply_state(&mut self, index: u32, chunk: &[u8]) -> Result<(), ChunkError> {
        if blake3::hash(chunk).as_bytes() != &self.manifest.chunk_hashes[index as usize] {
            return Err(refused(format!(
                "state chunk {index} does not match its hash in the manifest"
            )));
        }
        // The hash is the one consensus committed: what follows holds for every honest
        // snapshot, and is checked so that nothing else can ever reach the store.
        let mut entries = 0u64;
        let mut last = self.last_key.take();
        decode_entries(chunk, &mut |k, _| {
            if last.as_deref().is_some_and(|l| l >= k) {
                return Err("keys out of order".into());
            }
            last = Some(k.to_vec());
            entries += 1;
            Ok(())
        })
        .map_err(|why| refused(format!("state chunk {index}: {why}")))?;
        self.last_key = last;
        self.state
            .as_mut()
            .expect("the state is open until its last chunk")
            .add_chunk(chunk, entries)?;
        if index as usize + 1 == self.manifest.chunk_hashes.len() {
            self.end_state()?;
        }
        Ok(())
    }

    fn end_state(&mut self) -> Result<(), ChunkError> {
        let index = self.state.take().expect("once").finish()?;
        if index.entries != self.manifest.entries {
            return Err(refused(format!(
                "the state holds {} entries where the manifest says {}",
                index.entries, self.manifest.entries
            )));
        }
        self.index = Some(index);
        Ok(())
    }

    fn apply_tail(&mut self, k: usize, piece: &[u8]) -> Result<(), ChunkError> {
        let offset = (k * CHUNK_BYTES) as u64;
        let expected = (self.manifest.tail_len() - offset).min(CHUNK_BYTES as u64);
        if piece.len() as u64 != expected {
            return Err(refused(format!(
                "tail piece {k} has {} bytes where the manifest says {expected}",
                piece.len()
            )));
        }
        if blake3::hash(piece).as_bytes() != &self.manifest.tail_hashes[k] {
            return Err(refused(format!(
                "tail piece {k} does not match its hash in the manifest"
            )));
        }
        let path = self.dir.join("tail");
        self.tail
            .write_all(piece)
            .and_then(|()| self.tail.flush())
            .map_err(|e| SnapshotError::io(&path, e))?;
        self.tail_written += piece.len() as u64;
        // Check every block this piece completes against its header.
        while let Some(&len) = self.manifest.tail_lens.get(self.blocks_checked)
            && self.block_start + len <= self.tail_written
        {
            let bytes = read_at(&path, self.block_start, len)?;
            self.check_block(self.blocks_checked, &bytes)
                .map_err(ChunkError::Snapshot)?;
            self.blocks_checked += 1;
            self.block_start += len;
        }
        Ok(())
    }

    /// Checks block `j` of `S..=T` (`bytes`, its [`TailBlock`]) against its header.
    fn check_block(&self, j: usize, bytes: &[u8]) -> Result<(), String> {
        let header = &self.manifest.headers[j];
        let height = header.height;
        let block = TailBlock::try_from_slice(bytes)
            .map_err(|e| format!("block {height} does not decode: {e}"))?;
        if BlockBody::transactions_root(&block.body) != header.transactions_root {
            return Err(format!(
                "block {height}'s body does not match its header's transactions root"
            ));
        }
        if j == 0 {
            if !block.changes.is_empty() {
                return Err(format!(
                    "block {height} is the base: its changes are the state chunks'"
                ));
            }
            return Ok(());
        }
        if !block.changes.is_strictly_sorted() {
            return Err(format!("block {height}'s changes are not sorted"));
        }
        let previous = &self.manifest.headers[j - 1].state_checksum;
        let checksum = block.changes.checksum(previous);
        if checksum != header.state_checksum {
            return Err(format!(
                "block {height}'s changes do not give its header's state checksum"
            ));
        }
        Ok(())
    }

    /// Writes the restored state and the blocks above it into `store` (empty; the caller
    /// opened it in a fresh directory and makes it the node's only once this returns), and
    /// hands the snapshot to `snapshots`, which serves it from now on and builds the next one
    /// from it. Returns the head: block `T`.
    pub fn finish(
        self,
        store: &mut dyn StateStore,
        snapshots: &SnapshotStore,
    ) -> Result<BlockHeader, SnapshotError> {
        if self.next != self.manifest.chunks() {
            return Err(SnapshotError::Missing(format!(
                "the restore has {} of {} chunks",
                self.next,
                self.manifest.chunks()
            )));
        }
        let index = self.index.expect("every state chunk is in");
        let state_path = self.dir.join("state.snap");
        let tail_path = self.dir.join("tail");
        let base = self.manifest.headers[0].clone();
        let retain_from = base.height;
        let commit = Commit {
            durability: Durability::Immediate,
            retain_from,
        };
        let mut offsets = Vec::with_capacity(self.manifest.tail_lens.len());
        let mut at = 0;
        for &len in &self.manifest.tail_lens {
            offsets.push((at, len));
            at += len;
        }
        let block = |j: usize| -> Result<TailBlock, SnapshotError> {
            let (offset, len) = offsets[j];
            let bytes = read_at(&tail_path, offset, len)?;
            TailBlock::try_from_slice(&bytes)
                .map_err(|e| SnapshotError::corrupt(&tail_path, e.to_string()))
        };
        let source = StateFile {
            path: state_path.clone(),
            index: index.clone(),
        };
        store.commit_genesis(
            BlockRecord {
                header: base,
                body: block(0)?.body,
                changes: Changes::new(),
            },
            &source,
            commit,
        )?;
        for (j, header) in self.manifest.headers.iter().enumerate().skip(1) {
            let b = block(j)?;
            store.commit(
                BlockRecord {
                    header: header.clone(),
                    body: b.body,
                    changes: b.changes,
                },
                commit,
            )?;
        }
        let head = self.manifest.headers.last().expect("checked").clone();
        snapshots.adopt(&state_path, index, head.height, &self.manifest, &tail_path)?;
        let _ = std::fs::remove_dir_all(&self.dir);
        Ok(head)
    }
}

/// Checks a manifest against the offer and the verified app hash.
fn check_manifest(manifest: &Manifest, offer: &Offer, app_hash: &[u8]) -> Result<(), OfferError> {
    let headers = &manifest.headers;
    let (Some(first), Some(last)) = (headers.first(), headers.last()) else {
        return Err(invalid("its manifest has no headers"));
    };
    if headers.len() as u64 > MAX_DELAY + 1 {
        return Err(invalid(format!(
            "its manifest has {} headers, more than {}",
            headers.len(),
            MAX_DELAY + 1
        )));
    }
    if last.height != offer.height {
        return Err(invalid(format!(
            "its last header is block {} where the snapshot is at block {}",
            last.height, offer.height
        )));
    }
    if last.id().as_slice() != app_hash {
        return Err(invalid(format!(
            "its block {}'s header does not hash to the app hash consensus committed",
            last.height
        )));
    }
    for w in headers.windows(2) {
        // The heights are the peer's: `checked_add`, so that u64::MAX is a lie, not a panic.
        if w[0].height.checked_add(1) != Some(w[1].height) || w[1].previous != w[0].id() {
            return Err(invalid(format!(
                "its headers do not chain at block {}",
                w[1].height
            )));
        }
    }
    let Some(r) = last.committed_snapshot() else {
        return Err(invalid(format!(
            "block {} commits to no snapshot",
            last.height
        )));
    };
    if r.height != first.height {
        return Err(invalid(format!(
            "block {} commits to the state of block {}, not {}",
            last.height, r.height, first.height
        )));
    }
    if manifest.chunk_hashes.len() as u64 > u64::from(MAX_CHUNKS) {
        return Err(invalid("too many chunks"));
    }
    if digest(r.height, manifest.entries, &manifest.chunk_hashes) != r.digest {
        return Err(invalid(format!(
            "its chunk hashes do not give the digest block {} commits to",
            last.height
        )));
    }
    if manifest.tail_lens.len() != headers.len()
        || manifest
            .tail_lens
            .iter()
            .any(|&len| len == 0 || len > MAX_TAIL_BLOCK_BYTES)
    {
        return Err(invalid(
            "its tail does not give each block of its headers a length it may have",
        ));
    }
    if manifest.tail_hashes.len() as u64 != manifest.tail_len().div_ceil(CHUNK_BYTES as u64) {
        return Err(invalid(format!(
            "its tail of {} bytes has {} pieces",
            manifest.tail_len(),
            manifest.tail_hashes.len()
        )));
    }
    if u64::from(offer.chunks) != manifest.chunks() {
        return Err(invalid(format!(
            "it offers {} chunks where its manifest has {}",
            offer.chunks,
            manifest.chunks()
        )));
    }
    Ok(())
}

/// A checked state file, read as a genesis streams.
struct StateFile {
    path: PathBuf,
    index: StateIndex,
}

impl ChangeSource for StateFile {
    fn len(&self) -> u64 {
        self.index.entries
    }

    fn for_each(&self, f: &mut ChangeFn<'_>) -> std::io::Result<()> {
        let mut io_error = None;
        let result = for_each_entry(&self.path, &self.index, &mut |k, v| {
            f(k, Some(v)).map_err(|e| {
                let wrapped =
                    SnapshotError::io(&self.path, std::io::Error::new(e.kind(), e.to_string()));
                io_error = Some(e);
                wrapped
            })
        });
        match (result, io_error) {
            (Ok(()), _) => Ok(()),
            (Err(_), Some(e)) => Err(e),
            (Err(e), None) => Err(std::io::Error::other(e.to_string())),
        }
    }
}
