//! Block headers and the chained state checksum.

use borsh::{BorshDeserialize, BorshSerialize};

/// A block id: the BLAKE3 hash of the header's borsh encoding.
pub type BlockId = [u8; 32];

/// What a block commits to.
#[derive(Debug, Clone, Default, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
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
    /// The account that proposed the block, which its tips paid.
    pub proposer: tally_host_api::Name,
    /// The price per unit of each fee dimension its transactions paid
    /// ([`crate::fee::Dimension`] order, in [`crate::fee::PRICE_SCALE`]ths of a coin unit).
    pub prices: crate::fee::Prices,
    /// What its transactions used of each dimension: with `prices`, what the next block's
    /// prices are computed from.
    pub usage: crate::fee::Usage,
    /// BLAKE3(previous block's checksum ‖ BLAKE3(this block's state changes, sorted by key)).
    /// It depends only on the logical changes, never on how a store lays them out.
    pub state_checksum: [u8; 32],
    /// The digest of the whole state at an earlier block, on the blocks that commit to a
    /// snapshot ([`crate::snapshot`]): what a node restoring it checks every chunk against.
    /// Height 0 (no snapshot is ever of the genesis) on the others, so that every header has
    /// one length, as the log store's records expect.
    pub snapshot: crate::snapshot::SnapshotRef,
}

impl BlockHeader {
    /// The snapshot this block commits to, if any.
    pub fn committed_snapshot(&self) -> Option<crate::snapshot::SnapshotRef> {
        (self.snapshot.height > 0).then_some(self.snapshot)
    }
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
pub fn chain_checksum<'a>(
    previous: &[u8; 32],
    changes: impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)>,
) -> [u8; 32] {
    let mut hasher = ChangeHasher::new();
    for (key, value) in changes {
        hasher.add(key, value);
    }
    hasher.finish(previous)
}

/// [`chain_checksum`] fed one change at a time, for changes that stream past (a genesis of
/// millions of accounts): the same digest, in bounded memory.
///
/// Changes are encoded into a buffer that is hashed a large piece at a time, which lets
/// BLAKE3 hash many chunks in parallel SIMD lanes instead of one 64-byte block at a time.
pub struct ChangeHasher {
    encoded: Vec<u8>,
    inner: blake3::Hasher,
}

impl ChangeHasher {
    /// Bytes of encoded changes buffered before they are hashed.
    const BUFFER: usize = 64 * 1024;

    /// A hasher of no changes yet.
    pub fn new() -> Self {
        Self {
            encoded: Vec::with_capacity(Self::BUFFER + 1024),
            inner: blake3::Hasher::new(),
        }
    }

    /// Adds the next change (keys strictly increasing; `None` = deleted).
    pub fn add(&mut self, key: &[u8], value: Option<&[u8]>) {
        let encoded = &mut self.encoded;
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
        if encoded.len() >= Self::BUFFER {
            self.inner.update(encoded);
            encoded.clear();
        }
    }

    /// The checksum of the changes added, chained onto `previous`: BLAKE3(previous ‖
    /// BLAKE3(encoded changes)).
    pub fn finish(mut self, previous: &[u8; 32]) -> [u8; 32] {
        self.inner.update(&self.encoded);
        chain_digest(previous, &self.inner.finalize())
    }
}

/// [`chain_checksum`] of changes already encoded as [`ChangeHasher`] encodes them, back to
/// back: a block's [`crate::store::Changes`], hashed in one call.
pub(crate) fn chain_encoded(previous: &[u8; 32], encoded: &[u8]) -> [u8; 32] {
    chain_digest(previous, &blake3::hash(encoded))
}

/// BLAKE3(previous ‖ digest of the changes).
fn chain_digest(previous: &[u8; 32], changes: &blake3::Hash) -> [u8; 32] {
    let mut outer = blake3::Hasher::new();
    outer.update(previous);
    outer.update(changes.as_bytes());
    outer.finalize().into()
}

impl Default for ChangeHasher {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The digest does not depend on where the buffer is cut: one big change, many small
    /// ones, and a mix cross the buffer boundary at different places.
    #[test]
    fn the_streamed_checksum_is_the_one_of_the_whole_encoding() {
        let mut changes: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
        for i in 0u32..20_000 {
            let value = match i % 7 {
                0 => None,
                3 => Some(vec![i as u8; 70_000]),
                _ => Some(i.to_le_bytes().repeat(i as usize % 5)),
            };
            changes.push((i.to_be_bytes().to_vec(), value));
        }
        let previous = [9u8; 32];
        let mut encoded = Vec::new();
        for (k, v) in &changes {
            encoded.extend_from_slice(&(k.len() as u32).to_le_bytes());
            encoded.extend_from_slice(k);
            match v {
                Some(v) => {
                    encoded.push(1);
                    encoded.extend_from_slice(&(v.len() as u32).to_le_bytes());
                    encoded.extend_from_slice(v);
                }
                None => encoded.push(0),
            }
        }
        let mut outer = blake3::Hasher::new();
        outer.update(&previous);
        outer.update(blake3::hash(&encoded).as_bytes());
        let whole: [u8; 32] = outer.finalize().into();
        let streamed = chain_checksum(
            &previous,
            changes.iter().map(|(k, v)| (k.as_slice(), v.as_deref())),
        );
        assert_eq!(streamed, whole);
    }
}
