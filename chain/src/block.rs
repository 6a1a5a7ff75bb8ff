//! Block headers and the chained state checksum.

use borsh::{BorshDeserialize, BorshSerialize};

/// A block id: the BLAKE3 hash of the header's borsh encoding.
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
    /// BLAKE3 over the signed bytes and outcomes of the block's transactions, in order
    /// ([`crate::BlockBody::transactions_root`]).
    pub transactions_root: [u8; 32],
    /// BLAKE3(previous block's checksum ‖ BLAKE3(this block's state changes, sorted by key)).
    /// It depends only on the logical changes, never on how a store lays them out.
    pub state_checksum: [u8; 32],
}

impl BlockHeader {
    /// The block's id.
    pub fn id(&self) -> BlockId {
        blake3::hash(&borsh::to_vec(self).expect("encoding into a Vec cannot fail")).into()
    }
}

/// The TaPoS prefix of a block (bytes 8..12 of its id, little-endian).
pub fn ref_prefix(id: &BlockId) -> u32 {
    u32::from_le_bytes([id[8], id[9], id[10], id[11]])
}

/// Chains `changes` (sorted by key, `None` = deleted) onto `previous`.
///
/// The changes are encoded into one buffer and hashed at once, which lets BLAKE3 hash many
/// chunks in parallel SIMD lanes instead of one 64-byte block at a time.
pub fn chain_checksum<'a>(
    previous: &[u8; 32],
    changes: impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)>,
) -> [u8; 32] {
    let mut encoded = Vec::new();
    for (key, value) in changes {
        encoded.extend_from_slice(&(key.len() as u32).to_le_bytes());
        encoded.extend_from_slice(key);
        match value {
            Some(v) => {
                encoded.push(1);
                encoded.extend_from_slice(&(v.len() as u32).to_le_bytes());
                encoded.extend_from_slice(v);
            }
            None => encoded.push(0),
        }
    }
    let mut outer = blake3::Hasher::new();
    outer.update(previous);
    outer.update(blake3::hash(&encoded).as_bytes());
    outer.finalize().into()
}
