//! Block headers and the chained state checksum.

use borsh::{BorshDeserialize, BorshSerialize};
use sha2::{Digest, Sha256};

/// A block id: sha256 of the header's borsh encoding.
pub type BlockId = [u8; 32];

/// What a block commits to.
#[derive(Debug, Clone, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct BlockHeader {
    /// Height; genesis is 0.
    pub height: u64,
    /// The previous block's id (zeros for genesis).
    pub previous: BlockId,
    /// Block time, milliseconds since the Unix epoch. Set by the producer, never read from a
    /// local clock during execution.
    pub timestamp_ms: u64,
    /// sha256 over the ids and outcomes of the block's transactions, in order.
    pub transactions_root: [u8; 32],
    /// sha256(previous block's checksum ‖ sha256(this block's state changes, sorted by key)).
    /// It depends only on the logical changes, never on how a store lays them out.
    pub state_checksum: [u8; 32],
}

impl BlockHeader {
    /// The block's id.
    pub fn id(&self) -> BlockId {
        Sha256::digest(borsh::to_vec(self).expect("encoding into a Vec cannot fail")).into()
    }
}

/// The TaPoS prefix of a block (bytes 8..12 of its id, little-endian).
pub fn ref_prefix(id: &BlockId) -> u32 {
    u32::from_le_bytes([id[8], id[9], id[10], id[11]])
}

/// Chains `changes` (sorted by key, `None` = deleted) onto `previous`.
pub fn chain_checksum<'a>(
    previous: &[u8; 32],
    changes: impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)>,
) -> [u8; 32] {
    let mut inner = Sha256::new();
    for (key, value) in changes {
        inner.update((key.len() as u32).to_le_bytes());
        inner.update(key);
        match value {
            Some(v) => {
                inner.update([1]);
                inner.update((v.len() as u32).to_le_bytes());
                inner.update(v);
            }
            None => inner.update([0]),
        }
    }
    let mut outer = Sha256::new();
    outer.update(previous);
    outer.update(inner.finalize());
    outer.finalize().into()
}
