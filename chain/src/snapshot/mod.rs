//! State sync without Merklization (after Vilmo): snapshots the chain commits to, built in the
//! background, served from files, and restored by a node that trusts no peer.
//!
//! - **What is committed.** Every `interval` blocks (a genesis parameter,
//!   [`SnapshotSchedule`]) each node writes the whole state at that height `S`, sorted by key,
//!   into a state file cut into chunks of about [`CHUNK_BYTES`] ([`file`](mod@file)). Its digest
//!   ([`digest`]: the height, the entry count and every chunk's BLAKE3) goes into the header of
//!   block `T = S + delay` ([`SnapshotRef`]), so consensus agrees on it: a node whose files
//!   differ computes another header and falls out of consensus instead of serving a wrong
//!   snapshot. The node's app hash is its head header's id, so CometBFT's light client, which
//!   verifies the app hash of `T`, verifies the whole header and the digest in it.
//! - **Built in the background** (`build`): the state at `S` is the previous state file
//!   merged with the changes of the blocks since, sorted; the merge runs on its own thread
//!   while blocks go on, and block `T` waits for it only if it has not finished by then. It
//!   reads files and the changes the chain handed it, never the store, so the result depends
//!   only on committed blocks, on every backend.
//! - **Served** ([`SnapshotStore`]): the snapshot CometBFT sees is at height `T`. Its first
//!   chunks are the tail: the blocks `S..=T` (bodies, and the changes of `S+1..=T`, which
//!   bring the state from `S` to `T`), back to back, in pieces of [`CHUNK_BYTES`]; then the
//!   state file's chunks, read from disk as they are asked for. The metadata is the
//!   [`Manifest`]: the chunk hashes, the headers `S..=T`, and the tail's block lengths and
//!   piece hashes. The tail comes first because its piece hashes are the manifest's word, not
//!   consensus's: a lying one is caught before any state is fetched.
//! - **Restored** ([`Restore`]): the headers must chain up to the app hash the light client
//!   verified, and the chunk hashes must give the digest in `T`'s header, before any chunk is
//!   looked at; then each chunk must match its hash before it is kept, and each block of the
//!   tail its header. A forged or damaged chunk is refused alone, and fetched again from
//!   another peer; a manifest whose tail hashes lie is refused whole once its block fails.
//!   The state streams into a fresh store as a genesis does, in bounded memory.

use borsh::{BorshDeserialize, BorshSerialize};

use crate::block::BlockHeader;
use crate::fee::{Dimension, FeeSchedule, MAX_BLOCK_BYTES, MAX_BLOCK_WRITE};
use crate::store::Changes;

mod build;
pub mod file;
mod restore;
mod spill;
mod store;

pub(crate) use build::Snapshotter;
pub use restore::{Applied, ChunkError, OfferError, Restore};
pub use store::SnapshotStore;

/// The snapshot format served to CometBFT (`Snapshot.format`).
pub const FORMAT: u32 = 1;

/// A state chunk is cut once it holds this many bytes of encoded entries: 4 MiB keeps the
/// chunk count of a 10M-account state (about 1.1 GB) near 270, and each chunk far below
/// CometBFT's limit ([`MAX_CHUNK_BYTES`]).
pub const CHUNK_BYTES: usize = 4 << 20;

/// The largest chunk a restoring node accepts: CometBFT v0.38's state sync receives chunk
/// messages of at most 16,000,000 bytes (`chunkMsgSize`), and a chunk holds at most
/// [`CHUNK_BYTES`] plus one entry (a contract's code is the largest).
pub const MAX_CHUNK_BYTES: usize = 15_000_000;

/// The most chunks a snapshot may have: with [`CHUNK_BYTES`] chunks, a state of 4 TiB.
pub const MAX_CHUNKS: u32 = 1 << 20;

/// The largest manifest (`Snapshot.metadata`) accepted: CometBFT v0.38 sends snapshot offers
/// in messages of at most 4,000,000 bytes (`snapshotMsgSize`). A manifest is 32 bytes per
/// chunk and one header per block of the delay.
pub const MAX_METADATA_BYTES: usize = 3_000_000;

/// The longest delay a schedule may have: the blocks `S..=T` travel as chunks and their
/// headers in the manifest.
pub const MAX_DELAY: u64 = 256;

/// Which state a header commits to: the digest ([`digest`]) of the whole state at `height`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, BorshSerialize, BorshDeserialize)]
pub struct SnapshotRef {
    /// The height whose state it is.
    pub height: u64,
    /// Its digest.
    pub digest: [u8; 32],
}

/// When a chain snapshots its state: a consensus parameter, fixed at genesis and written into
/// its state, so every node snapshots at the same heights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, BorshSerialize, BorshDeserialize)]
pub struct SnapshotSchedule {
    /// Every this many blocks (0: never).
    pub interval: u64,
    /// How many blocks later the digest enters a header: the time the background merge has.
    pub delay: u64,
    /// A state chunk is cut once it holds this many bytes of entries (at most
    /// [`CHUNK_BYTES`]): part of the digest, so fixed at genesis too.
    pub chunk_bytes: u32,
}

impl SnapshotSchedule {
    /// No snapshots: a chain that is never joined by state sync (a benchmark, a private
    /// chain whose nodes all replay from genesis).
    pub const NEVER: SnapshotSchedule = SnapshotSchedule {
        interval: 0,
        delay: 0,
        chunk_bytes: 0,
    };

    /// Every `interval` blocks, committed `delay` blocks later, in chunks of [`CHUNK_BYTES`].
    pub const fn every(interval: u64, delay: u64) -> Self {
        Self {
            interval,
            delay,
            chunk_bytes: CHUNK_BYTES as u32,
        }
    }

    /// The same schedule with chunks cut at `bytes` (tests use small ones to get many).
    pub const fn with_chunk_bytes(self, bytes: u32) -> Self {
        Self {
            chunk_bytes: bytes,
            ..self
        }
    }

    /// Whether snapshots are taken at all.
    pub fn is_enabled(&self) -> bool {
        self.interval > 0
    }

    /// Checks the parameters: the delay is at least one block and below the interval (one
    /// merge at a time), and at most [`MAX_DELAY`].
    pub fn validate(&self) -> Result<(), String> {
        if !self.is_enabled() {
            return Ok(());
        }
        if self.delay == 0 || self.delay >= self.interval || self.delay > MAX_DELAY {
            return Err(format!(
                "snapshot delay {} must be at least 1, below the interval {} and at most {MAX_DELAY}",
                self.delay, self.interval
            ));
        }
        if self.chunk_bytes == 0 || self.chunk_bytes as usize > CHUNK_BYTES {
            return Err(format!(
                "snapshot chunks of {} bytes: at least 1 and at most {CHUNK_BYTES}",
                self.chunk_bytes
            ));
        }
        Ok(())
    }

    /// Checks that every block a chain priced by `fees` may produce can travel in a
    /// snapshot: a restoring node refuses a block of the tail over [`MAX_TAIL_BLOCK_BYTES`]
    /// and a state chunk over [`MAX_CHUNK_BYTES`] (the largest entry is a block's transaction
    /// ids, 32 bytes a transaction), both sized for the standard maxima: 16 MiB of
    /// transactions (`fee::MAX_BLOCK_BYTES`) and 64 MB of write units (`fee::MAX_BLOCK_WRITE`).
    pub fn check_fees(&self, fees: &FeeSchedule) -> Result<(), String> {
        if !self.is_enabled() {
            return Ok(());
        }
        for (dimension, most) in [
            (Dimension::Bandwidth, MAX_BLOCK_BYTES),
            (Dimension::Write, MAX_BLOCK_WRITE),
        ] {
            let max = fees.max[dimension as usize];
            if max > most {
                return Err(format!(
                    "a chain that snapshots may let a block use at most {most} {} of {} ({max} asked): a node restoring its snapshots would refuse larger blocks; lower the fee schedule's maximum or take no snapshots",
                    dimension.unit(),
                    dimension.name()
                ));
            }
        }
        Ok(())
    }

    /// Whether the state at `height` is snapshotted.
    pub fn is_snapshot(&self, height: u64) -> bool {
        self.is_enabled() && height > 0 && height.is_multiple_of(self.interval)
    }

    /// The snapshot height whose digest block `height`'s header commits to, if any.
    pub fn committed_at(&self, height: u64) -> Option<u64> {
        let s = height.checked_sub(self.delay)?;
        self.is_snapshot(s).then_some(s)
    }
}

/// The digest a header commits to: BLAKE3 over a domain tag, the height, the entry count and
/// the BLAKE3 of each chunk of the sorted state, in order. Checking the chunk list against it
/// once lets every chunk be checked alone, as it arrives.
pub fn digest(height: u64, entries: u64, chunk_hashes: &[[u8; 32]]) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(b"tally-snapshot-v1");
    h.update(&height.to_le_bytes());
    h.update(&entries.to_le_bytes());
    h.update(&(chunk_hashes.len() as u64).to_le_bytes());
    for c in chunk_hashes {
        h.update(c);
    }
    h.finalize().into()
}

/// A snapshot's metadata (`Snapshot.metadata`, borsh): what a restoring node checks before it
/// takes any chunk.
#[derive(Debug, Clone, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct Manifest {
    /// Entries in the state at `headers[0].height`.
    pub entries: u64,
    /// The BLAKE3 of each state chunk, in order.
    pub chunk_hashes: Vec<[u8; 32]>,
    /// The headers of blocks `S..=T`: the last one's id is the app hash of `T`, and its
    /// [`BlockHeader::snapshot`] the digest of the state at `S`.
    pub headers: Vec<BlockHeader>,
    /// The length of each block of `S..=T` as the tail carries it (the borsh of its body and
    /// changes), in order.
    pub tail_lens: Vec<u64>,
    /// The BLAKE3 of each piece of the tail: the blocks back to back, cut every
    /// [`CHUNK_BYTES`] (a block may be larger than a chunk may be).
    pub tail_hashes: Vec<[u8; 32]>,
}

impl Manifest {
    /// How many chunks the snapshot has: the tail's, then the state's.
    pub fn chunks(&self) -> u64 {
        self.chunk_hashes.len() as u64 + self.tail_hashes.len() as u64
    }

    /// The length of the tail.
    pub fn tail_len(&self) -> u64 {
        self.tail_lens.iter().sum()
    }

    /// The manifest of the state `index` describes and the blocks `S..=T` (`headers`, and
    /// their tail: each block's [`TailBlock`] encoding `tail_lens` long, back to back, cut
    /// every [`CHUNK_BYTES`] into pieces hashed `tail_hashes`).
    pub(crate) fn new(
        index: &file::StateIndex,
        headers: Vec<BlockHeader>,
        tail_lens: Vec<u64>,
        tail_hashes: Vec<[u8; 32]>,
    ) -> Self {
        Self {
            entries: index.entries,
            chunk_hashes: index.chunk_hashes(),
            headers,
            tail_lens,
            tail_hashes,
        }
    }
}

/// The most bytes one block of `S..=T` may take in the tail: a block carries at most 16 MiB
/// of transactions ([`MAX_BLOCK_BYTES`]) and 64 MB of write units of changes
/// ([`MAX_BLOCK_WRITE`]), which [`SnapshotSchedule::check_fees`] holds a chain that snapshots
/// to; four times their sum leaves room for encoding and the last transaction's overshoot.
pub const MAX_TAIL_BLOCK_BYTES: u64 = 4 * (MAX_BLOCK_BYTES + MAX_BLOCK_WRITE);

/// A snapshot as CometBFT lists and offers it (its `Snapshot` message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offer {
    /// The height `T` whose app hash verifies it.
    pub height: u64,
    /// [`FORMAT`].
    pub format: u32,
    /// How many chunks.
    pub chunks: u32,
    /// BLAKE3 of the metadata: the snapshot's identity among peers.
    pub hash: [u8; 32],
    /// The [`Manifest`], borsh.
    pub metadata: Vec<u8>,
}

impl Offer {
    /// The offer of a manifest at `height`.
    pub fn of(height: u64, manifest: &Manifest) -> Self {
        let metadata = borsh::to_vec(manifest).expect("encoding into a Vec cannot fail");
        Self {
            height,
            format: FORMAT,
            chunks: manifest.chunks() as u32,
            hash: blake3::hash(&metadata).into(),
            metadata,
        }
    }
}

/// One block of `S..=T` as the tail carries it: its body, and its changes (none for `S`,
/// whose state the state chunks hold).
#[derive(Debug, Clone, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub(crate) struct TailBlock {
    /// borsh of its [`crate::BlockBody`].
    pub body: Vec<u8>,
    /// Its changes, sorted by key.
    pub changes: Changes,
}

/// A fault of the node's own snapshot files or of writing them: never a peer's.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// Reading or writing a file failed.
    #[error("snapshot file {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// What failed.
        source: std::io::Error,
    },
    /// A local file fails its checksum or does not decode: it was damaged or came from
    /// elsewhere.
    #[error(
        "snapshot file {path} is damaged ({why}); delete the node's snapshots directory and restart it: the next snapshot is rebuilt from the store"
    )]
    Corrupt {
        /// The file.
        path: String,
        /// What is wrong.
        why: String,
    },
    /// The store could not be read or written.
    #[error("state store: {0}")]
    Store(#[from] crate::store::StoreError),
    /// The chain cannot produce a snapshot it must commit to.
    #[error("{0}")]
    Missing(String),
}

impl SnapshotError {
    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        Self::Io {
            path: path.display().to_string(),
            source,
        }
    }

    pub(crate) fn corrupt(path: &std::path::Path, why: impl Into<String>) -> Self {
        Self::Corrupt {
            path: path.display().to_string(),
            why: why.into(),
        }
    }
}

/// Appends one entry's encoding to `out`: `[key len u32 LE][key][value len u32 LE][value]`,
/// as [`crate::store::digest_entries`] hashes entries.
pub(crate) fn encode_entry(out: &mut Vec<u8>, key: &[u8], value: &[u8]) {
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    out.extend_from_slice(value);
}

/// What [`decode_entries`] calls with each entry: its key and value.
pub(crate) type EntryFn<'a, E> = dyn FnMut(&[u8], &[u8]) -> Result<(), E> + 'a;

/// Decodes the entries of one chunk, in order, calling `f` with each; `Err` names what is
/// malformed (a length past the end).
pub(crate) fn decode_entries(mut chunk: &[u8], f: &mut EntryFn<'_, String>) -> Result<(), String> {
    fn take<'a>(bytes: &mut &'a [u8], n: usize) -> Result<&'a [u8], String> {
        if bytes.len() < n {
            return Err(format!(
                "an entry runs past the chunk's end ({n} bytes wanted, {} left)",
                bytes.len()
            ));
        }
        let (head, rest) = bytes.split_at(n);
        *bytes = rest;
        Ok(head)
    }
    fn len(bytes: &mut &[u8]) -> Result<usize, String> {
        let b = take(bytes, 4)?;
        Ok(u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize)
    }
    while !chunk.is_empty() {
        let n = len(&mut chunk)?;
        let key = take(&mut chunk, n)?;
        let n = len(&mut chunk)?;
        let value = take(&mut chunk, n)?;
        f(key, value)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schedule_commits_each_snapshot_delay_blocks_later() {
        let s = SnapshotSchedule::every(10, 3);
        assert!(s.validate().is_ok());
        assert!(!s.is_snapshot(0));
        assert!(s.is_snapshot(10) && s.is_snapshot(20) && !s.is_snapshot(15));
        assert_eq!(s.committed_at(13), Some(10));
        assert_eq!(s.committed_at(3), None, "no snapshot of the genesis");
        assert_eq!(s.committed_at(14), None);
        assert!(SnapshotSchedule::every(10, 10).validate().is_err());
        assert!(SnapshotSchedule::every(10, 0).validate().is_err());
        assert_eq!(SnapshotSchedule::NEVER.committed_at(5), None);
    }

    #[test]
    fn entries_decode_as_they_were_encoded_and_a_cut_chunk_is_refused() {
        let mut chunk = Vec::new();
        encode_entry(&mut chunk, b"a", b"1");
        encode_entry(&mut chunk, b"bb", b"");
        let mut seen = Vec::new();
        decode_entries(&chunk, &mut |k, v| {
            seen.push((k.to_vec(), v.to_vec()));
            Ok(())
        })
        .unwrap();
        assert_eq!(
            seen,
            vec![(b"a".to_vec(), b"1".to_vec()), (b"bb".to_vec(), vec![])]
        );
        assert!(decode_entries(&chunk[..chunk.len() - 1], &mut |_, _| Ok(())).is_err());
    }
}
