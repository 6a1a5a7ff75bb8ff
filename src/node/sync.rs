//! State sync, the node's side: what ABCI's four snapshot calls do with the chain's
//! snapshots (`tally_chain::snapshot`).
//!
//! - **Serving** ([`Serving`]): ListSnapshots and LoadSnapshotChunk read this node's
//!   snapshot files (`DIR/snapshots/`) through an `Arc<SnapshotStore>` shared with the chain,
//!   without the consensus lock: a peer fetching chunks never stops block execution, and a
//!   chunk is read from its file when asked for, never held.
//! - **Restoring** ([`Restoring`]): OfferSnapshot starts a [`Restore`] in `DIR/restore/`
//!   against the app hash CometBFT's light client verified; ApplySnapshotChunk feeds it the
//!   chunks in order. A chunk that fails its check is refused whole and refetched from
//!   another peer, and its sender is reported to CometBFT, so one bad peer costs one chunk,
//!   not the sync. The last chunk ends in [`super::ledger::Ledger::install`].
//! - **Hostile serving, for tests** ([`BadSnapshots`]): `tally node
//!   --test-serve-bad-snapshots` makes a real node serve wrong chunks, so the tests exercise
//!   a misbehaving process rather than a mock.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use prost::bytes::Bytes;
use tally_chain::snapshot::{
    Applied, ChunkError, FORMAT, Manifest, Offer, OfferError, Restore, SnapshotStore,
};
use tendermint_proto::v0_38::abci::{
    RequestApplySnapshotChunk, RequestLoadSnapshotChunk, RequestOfferSnapshot,
    ResponseApplySnapshotChunk, ResponseListSnapshots, ResponseLoadSnapshotChunk,
    ResponseOfferSnapshot, Snapshot, response_apply_snapshot_chunk, response_offer_snapshot,
};

/// How many snapshots a node keeps by default (`tally node --snapshot-keep`): the newest
/// and the one before, so a peer that started fetching the older one when the newer
/// appeared can still finish it.
pub const DEFAULT_SNAPSHOT_KEEP: usize = 2;

/// Where a node keeps its snapshots.
pub fn snapshots_dir(dir: &Path) -> PathBuf {
    dir.join("snapshots")
}

/// Where a restore in progress keeps what it received.
pub fn restore_dir(dir: &Path) -> PathBuf {
    dir.join("restore")
}

/// Removes what a restore interrupted by a crash left (`DIR/restore/`,
/// `DIR/restore-store/`) and finishes or undoes an interrupted install
/// ([`super::ledger::recover_install`]), so the node starts with a whole store or none.
/// Returns what it removed or repaired, for the log.
pub fn clean_leftovers(dir: &Path) -> anyhow::Result<Vec<String>> {
    let mut cleaned = Vec::new();
    for leftover in [restore_dir(dir), super::ledger::restore_store_dir(dir)] {
        if leftover.exists() {
            std::fs::remove_dir_all(&leftover).map_err(|e| {
                anyhow::anyhow!(
                    "cannot remove {} (left by an interrupted restore): {e}",
                    leftover.display()
                )
            })?;
            cleaned.push(leftover.display().to_string());
        }
    }
    if super::ledger::recover_install(dir)? {
        cleaned.push(format!(
            "{} (an interrupted install)",
            dir.join("store.replaced").display()
        ));
    }
    Ok(cleaned)
}

/// What a hostile test node serves instead of its snapshots' true chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BadSnapshots {
    /// Chunks whose framing is valid and whose contents are not the snapshot's.
    Forged,
    /// Chunks with bytes flipped.
    Damaged,
    /// The chunk of the same index of another snapshot (another height) this node holds.
    OtherHeight,
    /// Chunks cut short.
    Truncated,
}

impl BadSnapshots {
    /// Its command-line spelling.
    pub fn label(self) -> &'static str {
        match self {
            Self::Forged => "forged",
            Self::Damaged => "damaged",
            Self::OtherHeight => "other-height",
            Self::Truncated => "truncated",
        }
    }
}

/// The serving side: this node's snapshots as ListSnapshots and LoadSnapshotChunk answer.
pub struct Serving {
    snapshots: Arc<SnapshotStore>,
    /// For tests: the ways to corrupt served chunks, used in turn, chunk after chunk.
    bad: Vec<BadSnapshots>,
    /// Chunks served so far (picks the next way in `bad`).
    served: AtomicU64,
}

/// The ABCI form of an offer.
pub fn to_abci(offer: &Offer) -> Snapshot {
    Snapshot {
        height: offer.height,
        format: offer.format,
        chunks: offer.chunks,
        hash: Bytes::copy_from_slice(&offer.hash),
        metadata: Bytes::copy_from_slice(&offer.metadata),
    }
}

impl Serving {
    /// Serves the snapshots of `snapshots`; with `bad` not empty, wrong chunks instead.
    pub fn new(snapshots: Arc<SnapshotStore>, bad: Vec<BadSnapshots>) -> Self {
        Self {
            snapshots,
            bad,
            served: AtomicU64::new(0),
        }
    }

    /// The snapshot store the chain writes into.
    pub fn store(&self) -> &Arc<SnapshotStore> {
        &self.snapshots
    }

    /// ListSnapshots: every snapshot this node holds, newest first.
    pub fn list(&self) -> ResponseListSnapshots {
        ResponseListSnapshots {
            snapshots: self.snapshots.list().iter().map(to_abci).collect(),
        }
    }

    /// LoadSnapshotChunk: the chunk read from its file, or an empty chunk when this node no
    /// longer has it (deleted by retention since it was listed): CometBFT then asks another
    /// peer.
    pub fn load(&self, req: &RequestLoadSnapshotChunk) -> ResponseLoadSnapshotChunk {
        let chunk = match self.snapshots.load_chunk(req.height, req.format, req.chunk) {
            Ok(Some(chunk)) => chunk,
            Ok(None) => Vec::new(),
            Err(e) => {
                eprintln!(
                    "tally node: cannot serve chunk {} of the snapshot at height {}: {e}",
                    req.chunk, req.height
                );
                Vec::new()
            }
        };
        let chunk = match self.bad.as_slice() {
            [] => chunk,
            bad => {
                let n = self.served.fetch_add(1, Ordering::Relaxed);
                let how = bad[(n % bad.len() as u64) as usize];
                let served = self.corrupt(how, req, chunk);
                eprintln!(
                    "tally node: test: serving a {} chunk {} of the snapshot at height {} ({} bytes)",
                    how.label(),
                    req.chunk,
                    req.height,
                    served.len()
                );
                served
            }
        };
        ResponseLoadSnapshotChunk {
            chunk: chunk.into(),
        }
    }

    /// `chunk` (the true one) with its framing kept and one byte of its contents changed. The
    /// tail comes first (the blocks `S..=T` back to back, each the borsh of its body then its
    /// changes, cut into pieces): in its first piece, the first block's first body byte (its
    /// length prefix kept); in a later piece, the middle byte. In a state chunk (`[key len
    /// u32][key][value len u32][value]`…): the first entry's last value byte.
    fn forge(&self, req: &RequestLoadSnapshotChunk, mut chunk: Vec<u8>) -> Vec<u8> {
        let tail_pieces = self
            .snapshots
            .list()
            .into_iter()
            .find(|o| o.height == req.height)
            .and_then(|o| borsh::from_slice::<Manifest>(&o.metadata).ok())
            .map_or(0, |m| m.tail_hashes.len());
        let len_at = |c: &[u8], at: usize| {
            c.get(at..at + 4)
                .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize)
        };
        let index = req.chunk as usize;
        let at = if index == 0 && tail_pieces > 0 {
            // A body is never empty: it holds its transaction count.
            len_at(&chunk, 0).filter(|&n| n > 0).map(|_| 4)
        } else if index < tail_pieces {
            Some(chunk.len() / 2)
        } else {
            len_at(&chunk, 0).and_then(|key| {
                let value = len_at(&chunk, 4 + key)?;
                Some(if value > 0 { 8 + key + value - 1 } else { 4 })
            })
        };
        if let Some(b) = at.and_then(|at| chunk.get_mut(at)) {
            *b ^= 0x01;
        }
        chunk
    }

    /// `chunk` (the true one) made wrong in the way `how` says.
    fn corrupt(
        &self,
        how: BadSnapshots,
        req: &RequestLoadSnapshotChunk,
        chunk: Vec<u8>,
    ) -> Vec<u8> {
        match how {
            BadSnapshots::Forged => self.forge(req, chunk),
            BadSnapshots::Damaged => {
                let mut chunk = chunk;
                // Flip bits through the whole chunk, not only at one end, so whatever is
                // checked first sees a change.
                let step = (chunk.len() / 8).max(1);
                for i in (0..chunk.len()).step_by(step) {
                    chunk[i] ^= 0x5a;
                }
                chunk
            }
            BadSnapshots::OtherHeight => {
                let other = self
                    .snapshots
                    .list()
                    .into_iter()
                    .find(|o| o.height != req.height);
                match other {
                    Some(o) => {
                        let index = req.chunk.min(o.chunks.saturating_sub(1));
                        self.snapshots
                            .load_chunk(o.height, o.format, index)
                            .ok()
                            .flatten()
                            .unwrap_or_default()
                    }
                    // With one snapshot there is no other height to serve: a forged chunk
                    // then stands in.
                    None => self.forge(req, chunk),
                }
            }
            BadSnapshots::Truncated => {
                let mut chunk = chunk;
                chunk.truncate(chunk.len() / 2);
                chunk
            }
        }
    }
}

/// A restore in progress: the snapshot CometBFT offered and the chunks applied so far.
pub struct Restoring {
    /// The snapshot.
    pub offer: Offer,
    restore: Restore,
    /// Chunks applied so far.
    pub applied: u32,
    /// When it began.
    pub started: std::time::Instant,
}

/// What ApplySnapshotChunk did.
pub enum ChunkOutcome {
    /// Applied; more chunks to come.
    More(ResponseApplySnapshotChunk),
    /// The last chunk: the restore is verified and must now be finished.
    Done(Box<Restoring>),
    /// Refused or failed: the answer to give.
    Answer(ResponseApplySnapshotChunk),
}

fn offer_answer(result: response_offer_snapshot::Result) -> ResponseOfferSnapshot {
    ResponseOfferSnapshot {
        result: result as i32,
    }
}

/// An ApplySnapshotChunk answer of `result` and nothing else.
pub fn chunk_answer(result: response_apply_snapshot_chunk::Result) -> ResponseApplySnapshotChunk {
    ResponseApplySnapshotChunk {
        result: result as i32,
        ..Default::default()
    }
}

impl Restoring {
    /// OfferSnapshot: starts restoring the offered snapshot in `work` (which the restore
    /// empties first), or
    /// says why not: a format this node cannot read (REJECT_FORMAT), a snapshot that does not
    /// fit the app hash (REJECT: CometBFT tries another), or a local fault (ABORT).
    pub fn offer(work: &Path, req: &RequestOfferSnapshot) -> Result<Self, ResponseOfferSnapshot> {
        use response_offer_snapshot::Result as R;
        let Some(s) = req.snapshot.as_ref() else {
            return Err(offer_answer(R::Reject));
        };
        let Ok(hash) = <[u8; 32]>::try_from(s.hash.as_ref()) else {
            eprintln!(
                "tally node: rejecting the snapshot at height {}: its hash is {} bytes, not 32",
                s.height,
                s.hash.len()
            );
            return Err(offer_answer(R::Reject));
        };
        if s.format != FORMAT {
            eprintln!(
                "tally node: rejecting snapshot format {} (this node reads format {FORMAT})",
                s.format
            );
            return Err(offer_answer(R::RejectFormat));
        }
        let offer = Offer {
            height: s.height,
            format: s.format,
            chunks: s.chunks,
            hash,
            metadata: s.metadata.to_vec(),
        };
        match Restore::offer(work, &offer, &req.app_hash) {
            Ok(restore) => {
                eprintln!(
                    "tally node: restoring the snapshot at height {} ({} chunks, app hash {})",
                    offer.height,
                    offer.chunks,
                    hex::encode(&req.app_hash)
                );
                Ok(Self {
                    offer,
                    restore,
                    applied: 0,
                    started: std::time::Instant::now(),
                })
            }
            Err(OfferError::Format(_)) => {
                eprintln!(
                    "tally node: rejecting the snapshot at height {}: format {} unreadable",
                    offer.height, offer.format
                );
                Err(offer_answer(R::RejectFormat))
            }
            Err(OfferError::Invalid(why)) => {
                eprintln!(
                    "tally node: rejecting the snapshot at height {}: {why}",
                    offer.height
                );
                Err(offer_answer(R::Reject))
            }
            Err(e) => {
                eprintln!(
                    "tally node: cannot restore the snapshot at height {}: {e}",
                    offer.height
                );
                Err(offer_answer(R::Abort))
            }
        }
    }

    /// ApplySnapshotChunk: checks and applies chunk `req.index`. A refused chunk leaves
    /// nothing behind; CometBFT is asked to fetch it again and to stop asking its sender.
    pub fn apply(mut self, req: &RequestApplySnapshotChunk) -> (Option<Self>, ChunkOutcome) {
        use response_apply_snapshot_chunk::Result as R;
        match self.restore.apply(req.index, &req.chunk) {
            Ok(Applied::More) => {
                self.applied += 1;
                (Some(self), ChunkOutcome::More(chunk_answer(R::Accept)))
            }
            Ok(Applied::Done) => {
                self.applied += 1;
                (None, ChunkOutcome::Done(Box::new(self)))
            }
            Err(e) => {
                let what = match &e {
                    ChunkError::Refused(_) => "refused chunk",
                    ChunkError::Snapshot(_) => "refused the whole snapshot at chunk",
                    ChunkError::Io(_) => "cannot restore: failed at chunk",
                };
                eprintln!(
                    "tally node: {what} {} of the snapshot at height {} from peer {:?}: {e}",
                    req.index, self.offer.height, req.sender
                );
                let (keep, answer) = refusal_answer(&e, req.index, &req.sender);
                (keep.then_some(self), ChunkOutcome::Answer(answer))
            }
        }
    }

    /// The verified restore, to be finished into a store.
    pub fn into_restore(self) -> Restore {
        self.restore
    }
}

/// ApplySnapshotChunk's answer to a chunk that failed `e`, and whether the restore goes on.
/// A chunk that does not match the manifest is fetched again from another peer (`RETRY`,
/// rejecting its sender). A manifest whose tail hashes lie (the chunk matched them, a block did
/// not) condemns the snapshot, not the node: `REJECT_SNAPSHOT`, rejecting its sender, so that
/// CometBFT offers another. `ABORT`, which ends state sync for good, is only for this node's
/// own failure (its work directory): answered to a lying peer, it let one peer keep a joining
/// node from ever syncing.
fn refusal_answer(e: &ChunkError, index: u32, sender: &str) -> (bool, ResponseApplySnapshotChunk) {
    use response_apply_snapshot_chunk::Result as R;
    let reject_senders = if sender.is_empty() {
        Vec::new()
    } else {
        vec![sender.to_string()]
    };
    match e {
        ChunkError::Refused(_) => (
            true,
            ResponseApplySnapshotChunk {
                result: R::Retry as i32,
                refetch_chunks: vec![index],
                reject_senders,
            },
        ),
        ChunkError::Snapshot(_) => (
            false,
            ResponseApplySnapshotChunk {
                result: R::RejectSnapshot as i32,
                refetch_chunks: Vec::new(),
                reject_senders,
            },
        ),
        ChunkError::Io(_) => (false, chunk_answer(R::Abort)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use response_apply_snapshot_chunk::Result as R;

    /// helper-44's review: a snapshot whose manifest lies about its tail was answered `ABORT`,
    /// which ends CometBFT's state sync; it is `REJECT_SNAPSHOT` now, and its sender rejected.
    #[test]
    fn a_lying_snapshot_is_rejected_and_only_the_nodes_own_failure_aborts() {
        let (keep, a) = refusal_answer(&ChunkError::Refused("bad hash".into()), 3, "peer");
        assert!(keep);
        assert_eq!(a.result, R::Retry as i32);
        assert_eq!(
            (a.refetch_chunks, a.reject_senders),
            (vec![3], vec!["peer".to_string()])
        );
        let (keep, a) = refusal_answer(&ChunkError::Snapshot("block 10".into()), 0, "peer");
        assert!(!keep);
        assert_eq!(a.result, R::RejectSnapshot as i32);
        assert_eq!(a.reject_senders, vec!["peer".to_string()]);
        let io = ChunkError::Io(tally_chain::snapshot::SnapshotError::Io {
            path: "work".into(),
            source: std::io::Error::other("disk full"),
        });
        let (keep, a) = refusal_answer(&io, 0, "peer");
        assert!(!keep);
        assert_eq!(a.result, R::Abort as i32);
    }
}
