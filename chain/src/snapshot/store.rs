//! A node's snapshot directory: state files (the bases of the next snapshot) and the
//! snapshots it serves.
//!
//! - `state-<S>.snap` and `.idx`: the state at `S` ([`super::file`]).
//! - `snap-<T>.meta`: a served snapshot: the borsh of its manifest, with a BLAKE3 after it;
//!   `snap-<T>.tail`, its tail (the blocks `S..=T`). The meta file is written last, so a
//!   snapshot is listed only once all its files are whole. Chunks are served tail first (its
//!   4 MiB pieces), then the state file's chunks.
//! - `pending-<h>.chg`: the changes of the blocks from `h` up awaiting the next snapshot
//!   ([`super::spill`]), rebuilt from the block archive when the chain opens.
//!
//! Serving reads files only: it never waits for block execution, and holds no snapshot in
//! memory beyond the manifests.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use borsh::BorshDeserialize;

use super::file::{
    StateIndex, checked, flush_synced, index_path, read_at, read_chunk, rename_synced, tmp_path,
    write_synced,
};
use super::{CHUNK_BYTES, FORMAT, Manifest, Offer, SnapshotError, TailBlock};

struct Snapshot {
    offer: Offer,
    base: u64,
    /// Bytes of the tail.
    tail_len: u64,
}

#[derive(Default)]
struct Inner {
    /// Complete state files by height.
    states: BTreeMap<u64, Arc<StateIndex>>,
    /// Served snapshots by height `T`.
    snapshots: BTreeMap<u64, Arc<Snapshot>>,
}

/// A node's snapshot directory, shared by the chain (which writes snapshots) and the threads
/// that serve them.
pub struct SnapshotStore {
    dir: PathBuf,
    keep: usize,
    inner: RwLock<Inner>,
}

fn state_path(dir: &Path, height: u64) -> PathBuf {
    dir.join(format!("state-{height:020}.snap"))
}

fn meta_path(dir: &Path, height: u64) -> PathBuf {
    dir.join(format!("snap-{height:020}.meta"))
}

fn tail_path(dir: &Path, height: u64) -> PathBuf {
    dir.join(format!("snap-{height:020}.tail"))
}

/// The height in a file name `<prefix><20 digits>.<ext>`.
fn height_of(name: &str, prefix: &str, ext: &str) -> Option<u64> {
    let digits = name.strip_prefix(prefix)?.strip_suffix(ext)?;
    (digits.len() == 20).then(|| digits.parse().ok()).flatten()
}

impl SnapshotStore {
    /// Opens (creating) the snapshot directory `dir`, serving the newest `keep` snapshots
    /// (at least one). Unfinished files a crash left are deleted; a damaged one is reported.
    pub fn open(dir: &Path, keep: usize) -> Result<Self, SnapshotError> {
        std::fs::create_dir_all(dir).map_err(|e| SnapshotError::io(dir, e))?;
        let mut inner = Inner::default();
        let mut names: Vec<String> = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(|e| SnapshotError::io(dir, e))? {
            let entry = entry.map_err(|e| SnapshotError::io(dir, e))?;
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        for name in &names {
            let path = dir.join(name);
            if name.ends_with(".tmp") {
                std::fs::remove_file(&path).map_err(|e| SnapshotError::io(&path, e))?;
            } else if let Some(h) = height_of(name, "state-", ".idx") {
                let index = StateIndex::read(&path)?;
                if index.height != h {
                    return Err(SnapshotError::corrupt(&path, "it names another height"));
                }
                inner.states.insert(h, Arc::new(index));
            }
        }
        for name in &names {
            if let Some(h) = height_of(name, "state-", ".snap")
                && !inner.states.contains_key(&h)
            {
                // Written, but its index never was: an export a crash cut short.
                let path = dir.join(name);
                std::fs::remove_file(&path).map_err(|e| SnapshotError::io(&path, e))?;
            }
        }
        for name in &names {
            if let Some(t) = height_of(name, "snap-", ".meta") {
                let snapshot = read_meta(dir, t)?;
                inner.snapshots.insert(t, Arc::new(snapshot));
            }
        }
        // A snapshot whose state file is gone cannot be served.
        let states = &inner.states;
        inner.snapshots.retain(|_, s| states.contains_key(&s.base));
        let store = Self {
            dir: dir.to_path_buf(),
            keep: keep.max(1),
            inner: RwLock::new(inner),
        };
        Ok(store)
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The snapshots this node serves, newest first.
    pub fn list(&self) -> Vec<Offer> {
        let inner = self.inner.read().expect("no panics under the lock");
        inner
            .snapshots
            .values()
            .rev()
            .map(|s| s.offer.clone())
            .collect()
    }

    /// Chunk `index` of the snapshot at `height` in `format`, or `None` if this node has no
    /// such snapshot or chunk (it may have been pruned since it was listed).
    pub fn load_chunk(
        &self,
        height: u64,
        format: u32,
        index: u32,
    ) -> Result<Option<Vec<u8>>, SnapshotError> {
        if format != FORMAT {
            return Ok(None);
        }
        let (snapshot, state) = {
            let inner = self.inner.read().expect("no panics under the lock");
            let Some(s) = inner.snapshots.get(&height).cloned() else {
                return Ok(None);
            };
            let Some(state) = inner.states.get(&s.base).cloned() else {
                return Ok(None);
            };
            (s, state)
        };
        // The tail's pieces first, then the state's chunks.
        let offset = u64::from(index) * CHUNK_BYTES as u64;
        let read = if offset < snapshot.tail_len {
            let len = (snapshot.tail_len - offset).min(CHUNK_BYTES as u64);
            read_at(&tail_path(&self.dir, height), offset, len)
        } else {
            let pieces = snapshot.tail_len.div_ceil(CHUNK_BYTES as u64) as usize;
            match state.chunks.get(index as usize - pieces) {
                Some(info) => read_chunk(&state_path(&self.dir, snapshot.base), info),
                None => return Ok(None),
            }
        };
        match read {
            Ok(bytes) => Ok(Some(bytes)),
            // Pruned between the lookup and the read.
            Err(SnapshotError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// The newest complete state file at or below `height`.
    pub(crate) fn latest_state(&self, height: u64) -> Option<Arc<StateIndex>> {
        let inner = self.inner.read().expect("no panics under the lock");
        inner
            .states
            .range(..=height)
            .next_back()
            .map(|(_, s)| s.clone())
    }

    /// The state file of exactly `height`.
    pub(crate) fn state(&self, height: u64) -> Option<Arc<StateIndex>> {
        let inner = self.inner.read().expect("no panics under the lock");
        inner.states.get(&height).cloned()
    }

    /// Where the state file of `height` is (or is to be) written.
    pub(crate) fn state_path(&self, height: u64) -> PathBuf {
        state_path(&self.dir, height)
    }

    /// Where the changes of the blocks from `height` up are spilled ([`super::spill`]).
    pub(crate) fn spill_path(&self, height: u64) -> PathBuf {
        self.dir.join(format!("pending-{height:020}.chg"))
    }

    /// Deletes the spill files a chain left: the chain that opens spills its blocks again.
    pub(crate) fn remove_spills(&self) -> Result<(), SnapshotError> {
        for entry in std::fs::read_dir(&self.dir).map_err(|e| SnapshotError::io(&self.dir, e))? {
            let entry = entry.map_err(|e| SnapshotError::io(&self.dir, e))?;
            if entry.file_name().to_string_lossy().ends_with(".chg") {
                remove(&entry.path())?;
            }
        }
        Ok(())
    }

    /// Deletes the state files and snapshots above `height`: a chain at `height` has not
    /// written them (see [`super::build::Snapshotter`]).
    pub(crate) fn forget_above(&self, height: u64) -> Result<(), SnapshotError> {
        let above = height.saturating_add(1);
        let (snapshots, states) = {
            let mut inner = self.inner.write().expect("no panics under the lock");
            let snapshots = inner.snapshots.split_off(&above);
            let states = inner.states.split_off(&above);
            (snapshots, states)
        };
        for &t in snapshots.keys() {
            remove(&meta_path(&self.dir, t))?;
            remove(&tail_path(&self.dir, t))?;
        }
        for &h in states.keys() {
            let path = state_path(&self.dir, h);
            remove(&index_path(&path))?;
            remove(&path)?;
        }
        Ok(())
    }

    /// Takes a state file just written (its index too) into the store.
    pub(crate) fn add_state(&self, index: StateIndex) {
        let mut inner = self.inner.write().expect("no panics under the lock");
        inner.states.insert(index.height, Arc::new(index));
    }

    /// Whether the snapshot at `height` is served.
    pub(crate) fn has_snapshot(&self, height: u64) -> bool {
        let inner = self.inner.read().expect("no panics under the lock");
        inner.snapshots.contains_key(&height)
    }

    /// Starts writing the tail of the snapshot at `height` (under a temporary name, until
    /// [`SnapshotStore::publish`]).
    pub(crate) fn tail_writer(&self, height: u64) -> Result<TailWriter, SnapshotError> {
        let tmp = tmp_path(&tail_path(&self.dir, height));
        let file = File::create(&tmp).map_err(|e| SnapshotError::io(&tmp, e))?;
        Ok(TailWriter {
            out: BufWriter::with_capacity(1 << 20, file),
            tmp,
            piece: blake3::Hasher::new(),
            in_piece: 0,
            hashes: Vec::new(),
        })
    }

    /// Publishes the snapshot at `height` (`T`): its manifest and its tail (the blocks
    /// `S..=T`, back to back), written at `tail` by a [`TailWriter`]. Then drops what is no
    /// longer served.
    pub(crate) fn publish(
        &self,
        height: u64,
        manifest: &Manifest,
        tail: &Path,
    ) -> Result<(), SnapshotError> {
        rename_synced(tail, &tail_path(&self.dir, height))?;
        self.install(height, manifest)
    }

    /// Takes in a snapshot a node restored: its checked state file at `state` (with `index`)
    /// and its tail file at `tail`. The node serves it from now on, and builds its next
    /// snapshot from the state file.
    pub(crate) fn adopt(
        &self,
        state: &Path,
        index: StateIndex,
        height: u64,
        manifest: &Manifest,
        tail: &Path,
    ) -> Result<(), SnapshotError> {
        let to = state_path(&self.dir, index.height);
        rename_synced(state, &to)?;
        index.write(&index_path(&to))?;
        self.add_state(index);
        rename_synced(tail, &tail_path(&self.dir, height))?;
        self.install(height, manifest)
    }

    /// Writes the meta file of the snapshot at `height`, whose tail file is in place, and
    /// lists it.
    fn install(&self, height: u64, manifest: &Manifest) -> Result<(), SnapshotError> {
        let mut meta = borsh::to_vec(manifest).expect("encoding into a Vec cannot fail");
        meta.extend_from_slice(blake3::hash(&meta).as_bytes());
        write_synced(&meta_path(&self.dir, height), &meta)?;
        self.inner
            .write()
            .expect("no panics under the lock")
            .snapshots
            .insert(height, Arc::new(Snapshot::of(height, manifest)));
        self.prune()
    }

    /// Drops all but the newest `keep` snapshots, and every state file that is neither the
    /// base of one kept nor the newest (the base of the next snapshot).
    fn prune(&self) -> Result<(), SnapshotError> {
        let (drop_snapshots, drop_states) = {
            let mut inner = self.inner.write().expect("no panics under the lock");
            let excess = inner.snapshots.len().saturating_sub(self.keep);
            let old: Vec<u64> = inner.snapshots.keys().take(excess).copied().collect();
            for t in &old {
                inner.snapshots.remove(t);
            }
            let newest_state = inner.states.keys().next_back().copied();
            let needed: Vec<u64> = inner.snapshots.values().map(|s| s.base).collect();
            let states: Vec<u64> = inner
                .states
                .keys()
                .copied()
                .filter(|h| Some(*h) != newest_state && !needed.contains(h))
                .collect();
            for h in &states {
                inner.states.remove(h);
            }
            (old, states)
        };
        for t in drop_snapshots {
            for path in [meta_path(&self.dir, t), tail_path(&self.dir, t)] {
                remove(&path)?;
            }
        }
        for h in drop_states {
            let path = state_path(&self.dir, h);
            remove(&index_path(&path))?;
            remove(&path)?;
        }
        Ok(())
    }
}

/// A snapshot's tail being written: blocks appended one at a time, cut every [`CHUNK_BYTES`]
/// into pieces hashed as they pass, so no more than one block is ever held.
pub(crate) struct TailWriter {
    out: BufWriter<File>,
    tmp: PathBuf,
    piece: blake3::Hasher,
    /// Bytes of the current piece hashed so far.
    in_piece: usize,
    hashes: Vec<[u8; 32]>,
}

impl TailWriter {
    /// Appends one block; returns its length in the tail.
    pub(crate) fn add(&mut self, block: &TailBlock) -> Result<u64, SnapshotError> {
        let bytes = borsh::to_vec(block).expect("encoding into a Vec cannot fail");
        self.out
            .write_all(&bytes)
            .map_err(|e| SnapshotError::io(&self.tmp, e))?;
        let mut rest = &bytes[..];
        while !rest.is_empty() {
            let take = rest.len().min(CHUNK_BYTES - self.in_piece);
            self.piece.update(&rest[..take]);
            self.in_piece += take;
            rest = &rest[take..];
            if self.in_piece == CHUNK_BYTES {
                self.cut();
            }
        }
        Ok(bytes.len() as u64)
    }

    fn cut(&mut self) {
        self.hashes.push(self.piece.finalize().into());
        self.piece.reset();
        self.in_piece = 0;
    }

    /// Syncs the file; returns where it is and the hash of each piece.
    pub(crate) fn finish(mut self) -> Result<(PathBuf, Vec<[u8; 32]>), SnapshotError> {
        if self.in_piece > 0 {
            self.cut();
        }
        flush_synced(self.out, &self.tmp)?;
        Ok((self.tmp, self.hashes))
    }
}

fn remove(path: &Path) -> Result<(), SnapshotError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(SnapshotError::io(path, e)),
        _ => Ok(()),
    }
}

impl Snapshot {
    fn of(height: u64, manifest: &Manifest) -> Self {
        Self {
            offer: Offer::of(height, manifest),
            base: manifest.headers[0].height,
            tail_len: manifest.tail_len(),
        }
    }
}

fn read_meta(dir: &Path, t: u64) -> Result<Snapshot, SnapshotError> {
    let path = meta_path(dir, t);
    let bytes = std::fs::read(&path).map_err(|e| SnapshotError::io(&path, e))?;
    let manifest = Manifest::try_from_slice(checked(&path, &bytes)?)
        .map_err(|e| SnapshotError::corrupt(&path, e.to_string()))?;
    if manifest.headers.is_empty() {
        return Err(SnapshotError::corrupt(&path, "a manifest without headers"));
    }
    Ok(Snapshot::of(t, &manifest))
}
