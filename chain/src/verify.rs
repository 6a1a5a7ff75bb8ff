//! Audits of stored blocks: linkage, transaction roots, chained checksums, and a full
//! re-execution from genesis when genesis is still retained.

use std::sync::Arc;

use sha2::{Digest, Sha256};
use tally_runtime::Runtime;

use crate::block::chain_checksum;
use crate::chain::{Chain, ChainConfig};
use crate::error::ChainError;
use crate::state::{MemoryStore, StateStore, StoreResult};
use crate::tx::BlockBody;

/// sha256 over sorted entries: a digest of a whole state.
pub fn digest_entries(
    entries: impl IntoIterator<Item = StoreResult<(Vec<u8>, Vec<u8>)>>,
) -> Result<[u8; 32], ChainError> {
    let mut h = Sha256::new();
    for entry in entries {
        let (k, v) = entry?;
        h.update((k.len() as u32).to_le_bytes());
        h.update(&k);
        h.update((v.len() as u32).to_le_bytes());
        h.update(&v);
    }
    Ok(h.finalize().into())
}

/// What [`verify`] checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    /// First block checked.
    pub from: u64,
    /// Last block checked (the head).
    pub to: u64,
    /// Whether every block was re-executed from genesis (else genesis was pruned, and the
    /// retained blocks were checked against their recorded changes).
    pub replayed: bool,
    /// Transactions re-executed.
    pub transactions: u64,
    /// Digest of the store's whole state.
    pub state_digest: [u8; 32],
}

fn corrupt(msg: String) -> ChainError {
    ChainError::Corrupt(msg)
}

/// Checks every retained block of `store`. Each block must link to the one before, its
/// transactions root must match its body, and its state checksum must equal the previous
/// checksum chained over its recorded changes. If genesis is retained, every block is also
/// re-executed on a fresh in-memory chain and must produce the identical header, and the
/// replayed state must equal the store's state.
pub fn verify(
    store: &dyn StateStore,
    runtime: Arc<Runtime>,
    config: &ChainConfig,
) -> Result<VerifyReport, ChainError> {
    let head = store
        .head()
        .cloned()
        .ok_or_else(|| corrupt("the store has no blocks".into()))?;
    let from = store.first_retained();
    let replay_config = ChainConfig {
        retain_blocks: config.retain_blocks.max(2),
        ..config.clone()
    };
    let mut replay = if from == 0 {
        let memory = Box::new(MemoryStore::new(2));
        Some(Chain::open(runtime, memory, replay_config)?)
    } else {
        None
    };
    let mut previous: Option<crate::block::BlockHeader> = None;
    let mut transactions = 0;
    for height in from..=head.height {
        let record = store
            .block(height)?
            .ok_or_else(|| corrupt(format!("block {height} is missing")))?;
        let header = &record.header;
        if header.height != height {
            return Err(corrupt(format!(
                "block {height} says it is {}",
                header.height
            )));
        }
        let body: BlockBody = borsh::from_slice(&record.body)
            .map_err(|e| corrupt(format!("block {height} body: {e}")))?;
        let root = BlockBody::transactions_root(
            body.transactions
                .iter()
                .map(|t| t.transaction.id())
                .zip(body.success.iter().copied()),
        );
        if root != header.transactions_root || body.success.len() != body.transactions.len() {
            return Err(corrupt(format!(
                "block {height}: transactions root mismatch"
            )));
        }
        let prev_checksum = match &previous {
            Some(p) => {
                if header.previous != p.id() {
                    return Err(corrupt(format!(
                        "block {height} does not link to {}",
                        p.height
                    )));
                }
                Some(p.state_checksum)
            }
            None if height == 0 => Some([0; 32]),
            None => None, // the first retained block's predecessor was pruned
        };
        if let Some(prev) = prev_checksum {
            let recomputed = chain_checksum(
                &prev,
                record
                    .changes
                    .iter()
                    .map(|(k, v)| (k.as_slice(), v.as_deref())),
            );
            if recomputed != header.state_checksum {
                return Err(corrupt(format!("block {height}: state checksum mismatch")));
            }
        }
        if let Some(chain) = replay.as_mut() {
            if height > 0 {
                if body.setup {
                    chain.apply_setup_changes(&record.changes)?;
                }
                for (tx, success) in body.transactions.iter().zip(&body.success) {
                    let receipt = chain.push_transaction(tx)?;
                    if receipt.is_success() != *success {
                        return Err(corrupt(format!(
                            "block {height}: transaction {} replays with another outcome",
                            hex::encode(receipt.id)
                        )));
                    }
                    transactions += 1;
                }
                chain.finish_block()?;
            }
            if chain.head() != header {
                return Err(corrupt(format!(
                    "block {height}: replay gives another header"
                )));
            }
        }
        previous = Some(record.header);
    }
    let state_digest = digest_entries(store.entries()?)?;
    if let Some(chain) = &replay
        && chain.state_digest()? != state_digest
    {
        return Err(corrupt(
            "the replayed state differs from the stored state".into(),
        ));
    }
    Ok(VerifyReport {
        from,
        to: head.height,
        replayed: replay.is_some(),
        transactions,
        state_digest,
    })
}
