//! Audits of stored blocks: linkage, transaction roots, chained checksums, and a full
//! re-execution from genesis when genesis is still retained.

use std::sync::Arc;

use tally_runtime::Runtime;

use crate::block::chain_checksum;
use crate::chain::Chain;
use crate::config::ChainConfig;
use crate::error::ChainError;
use crate::pipeline::prepare_block;
use crate::receipt::TxResult;
use crate::store::memory::MemoryStore;
use crate::store::{Durability, StateStore, digest_entries};
use crate::tx::BlockBody;

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
    /// The state checksum of the genesis block, when it is retained: what the replay trusted.
    pub genesis_checksum: Option<[u8; 32]>,
}

fn corrupt(msg: String) -> ChainError {
    ChainError::Corrupt(msg)
}

/// Checks every retained block of `store`. Each block must link to the one before, its
/// transactions root must match its body's signed bytes, and its state checksum must equal the
/// previous checksum chained over its recorded changes. If genesis is retained, every block
/// after it is also re-executed from its signed transactions on a fresh in-memory chain and
/// must produce the identical header and outcomes, and the replayed state must equal the
/// store's state. Only block 0's changes are taken as recorded: genesis is the chain's root of
/// trust, and [`VerifyReport::genesis_checksum`] names it.
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
    let mut replay: Option<Chain> = None;
    let mut genesis_checksum = None;
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
        if body.success.len() != body.transactions.len() || body.root() != header.transactions_root
        {
            return Err(corrupt(format!(
                "block {height}: transactions root mismatch"
            )));
        }
        // Every stored transaction must be one a node admits: within the limits, and in its
        // one canonical encoding (a block re-hashed around reordered signatures is not).
        for (i, tx) in body.transactions.iter().enumerate() {
            if let Err(e) = tx.check_limits(tx.encode().len()) {
                return Err(corrupt(format!(
                    "block {height}: transaction {i} could not be admitted: {e}"
                )));
            }
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
        if height == 0 {
            if !body.transactions.is_empty() {
                return Err(corrupt("the genesis block carries transactions".into()));
            }
            genesis_checksum = Some(header.state_checksum);
            let mut builder = Chain::genesis(
                runtime.clone(),
                Box::new(MemoryStore::new(2)),
                replay_config.clone(),
            )?;
            builder.apply_changes(&record.changes);
            replay = Some(builder.finish()?);
        } else if let Some(chain) = replay.as_mut() {
            // Every later change is re-derived from the block's signed transactions.
            let prepared = prepare_block(
                body.transactions,
                config.check_signatures,
                &chain.pipeline(),
            );
            let executed = chain.execute_block(header.timestamp_ms, &prepared)?;
            for (result, success) in executed.results.iter().zip(&body.success) {
                let replayed = match result {
                    TxResult::Included(receipt) => receipt.is_success() == *success,
                    TxResult::Rejected(_) => false,
                };
                if !replayed {
                    return Err(corrupt(format!(
                        "block {height}: a transaction replays with another outcome ({result:?})"
                    )));
                }
            }
            transactions += prepared.len() as u64;
            chain.commit(Durability::Immediate)?;
        }
        if let Some(chain) = &replay
            && chain.head() != header
        {
            return Err(corrupt(format!(
                "block {height}: replay gives another header"
            )));
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
        genesis_checksum,
    })
}
