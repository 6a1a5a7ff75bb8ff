//! The block pipeline: switches for each stage, and the stateless stage that runs ahead of
//! execution.
//!
//! The stages follow the pull requests of the "DCC" throughput study (shared/seeds): batched
//! signature verification on all cores (PR-1), a batched duplicate check (PR-6), encoding
//! outside the critical section (PR-4) and commit overlapped with the next block's execution
//! (PR-7). Every switch moves work in time or between threads only: the final state checksum
//! is the same under any combination (`chain/tests`).

use rayon::prelude::*;
use sha2::{Digest, Sha256};

use crate::crypto;
use crate::error::TxError;
use crate::tx::{SignedTransaction, TxId};

/// Which stages of block processing are batched, parallel or overlapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pipeline {
    /// Verify signatures in batches on all cores before execution; otherwise one at a time,
    /// in order, on the executing thread.
    pub batch_verify: bool,
    /// Look up a block's ids in the committed duplicate window all at once, on all cores,
    /// before execution; otherwise one lookup per transaction as it is included.
    pub batch_dedup: bool,
    /// Encode each transaction for the block body (and hash its id from that encoding) on all
    /// cores ahead of execution; otherwise encode while including it.
    pub early_encode: bool,
    /// Let the store's durable sync of block N run while block N+1 executes; otherwise each
    /// block is durable before the next one starts.
    pub overlap_commit: bool,
}

impl Pipeline {
    /// Every stage on: the default.
    pub const ALL: Self = Self {
        batch_verify: true,
        batch_dedup: true,
        early_encode: true,
        overlap_commit: true,
    };
    /// Every stage off: the plain sequential path.
    pub const NONE: Self = Self {
        batch_verify: false,
        batch_dedup: false,
        early_encode: false,
        overlap_commit: false,
    };

    /// The switches as `name=on|off` pairs, for reports.
    pub fn describe(&self) -> String {
        let on = |b: bool| if b { "on" } else { "off" };
        format!(
            "batch_verify={} batch_dedup={} early_encode={} overlap_commit={}",
            on(self.batch_verify),
            on(self.batch_dedup),
            on(self.early_encode),
            on(self.overlap_commit)
        )
    }
}

impl Default for Pipeline {
    fn default() -> Self {
        Self::ALL
    }
}

/// A transaction after the stateless stage.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// Its id.
    pub id: TxId,
    /// Its borsh encoding, when encoded early.
    pub encoded: Option<Vec<u8>>,
    /// The signature check's result, when verified in this stage.
    pub signatures: Option<Result<(), TxError>>,
}

/// Bytes that [`SignedTransaction`]'s borsh adds after the transaction's: the signatures.
fn signatures_len(tx: &SignedTransaction) -> usize {
    4 + tx.signatures.len() * (8 + 32 + 64)
}

fn prepare_one(tx: &SignedTransaction, early_encode: bool) -> Prepared {
    if early_encode {
        // The signed encoding starts with the transaction's, so one encoding gives both the
        // body bytes and the id.
        let encoded = tx.encode();
        let unsigned = encoded.len() - signatures_len(tx);
        Prepared {
            id: Sha256::digest(&encoded[..unsigned]).into(),
            encoded: Some(encoded),
            signatures: None,
        }
    } else {
        Prepared {
            id: tx.transaction.id(),
            encoded: None,
            signatures: None,
        }
    }
}

/// The stateless stage for one block: ids, early encodings and batched signature checks, as
/// the switches say. Parallel when any of them asks for all cores.
pub fn prepare(txs: &[SignedTransaction], check_signatures: bool, p: &Pipeline) -> Vec<Prepared> {
    let mut prepared: Vec<Prepared> = if p.batch_verify || p.early_encode {
        txs.par_iter()
            .map(|tx| prepare_one(tx, p.early_encode))
            .collect()
    } else {
        txs.iter().map(|tx| prepare_one(tx, false)).collect()
    };
    if check_signatures && p.batch_verify {
        let items: Vec<(&SignedTransaction, &TxId)> =
            txs.iter().zip(prepared.iter().map(|p| &p.id)).collect();
        let results = crypto::verify_many(&items);
        for (p, result) in prepared.iter_mut().zip(results) {
            p.signatures = Some(result);
        }
    }
    prepared
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tx::{Action, Transaction};
    use tally_host_api::Name;

    #[test]
    fn the_id_from_the_early_encoding_is_the_transactions_id() {
        let tx = Transaction {
            expiration_ms: 5,
            ref_block_num: 1,
            ref_block_prefix: 2,
            actions: vec![Action {
                account: Name(1),
                name: Name(2),
                authorization: vec![Name(3)],
                data: vec![1, 2, 3],
            }],
        };
        let key = crypto::derived_key(1, 1);
        let signed = SignedTransaction::sign(tx.clone(), &[(Name(3), &key)]);
        let early = prepare_one(&signed, true);
        assert_eq!(early.id, tx.id());
        assert_eq!(early.encoded.unwrap(), signed.encode());
        let unsigned = SignedTransaction::unsigned(tx.clone());
        assert_eq!(prepare_one(&unsigned, true).id, tx.id());
    }
}
