//! The block pipeline: a switch for each stage, and the stateless stage that runs ahead of
//! execution and turns transactions into [`PreparedTx`].
//!
//! The stages follow the pull requests of the "DCC payments fast lane" throughput study (2x
//! transactions per second without consensus changes): batched signature verification on all
//! cores (PR-1), a batched duplicate check (PR-6) and encoding outside the critical section
//! (PR-4); its commit overlapped with the next block's execution (PR-7) is the
//! [`Durability::Background`](crate::Durability::Background) of each commit. Every switch moves
//! work in time or between threads only: the final state checksum is the same under any
//! combination (tested).

use rayon::prelude::*;

use crate::crypto::{self, KeySource, Need, VerifiedKeys};
use crate::error::TxError;
use crate::tx::{SignedTransaction, TxId};

/// Which stages of block processing are batched or parallel. (When a block is durable is
/// an argument of each [`crate::Chain::commit`].)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pipeline {
    /// Verify signatures in batches on all cores before execution; otherwise one at a time,
    /// in order, on the executing thread.
    pub batch_verify: bool,
    /// Look up a block's ids in the committed duplicate window all at once, on all cores,
    /// before execution; otherwise one lookup per transaction as it is included.
    pub batch_dedup: bool,
    /// Encode each transaction (and hash its id from that encoding) on all cores ahead of
    /// execution; otherwise one at a time on the calling thread.
    pub early_encode: bool,
    /// Execute a block's transactions speculatively on all cores, then finalize them in order
    /// (`crate::parallel`); otherwise one at a time. Only has an effect with several threads.
    pub parallel_execute: bool,
}

impl Pipeline {
    /// Every stage on: the default.
    pub const ALL: Self = Self {
        batch_verify: true,
        batch_dedup: true,
        early_encode: true,
        parallel_execute: true,
    };
    /// Every stage off: the plain sequential path.
    pub const NONE: Self = Self {
        batch_verify: false,
        batch_dedup: false,
        early_encode: false,
        parallel_execute: false,
    };

    /// The switches as `name=on|off` pairs, for reports.
    pub fn describe(&self) -> String {
        let on = |b: bool| if b { "on" } else { "off" };
        format!(
            "batch_verify={} batch_dedup={} early_encode={} parallel_execute={}",
            on(self.batch_verify),
            on(self.batch_dedup),
            on(self.early_encode),
            on(self.parallel_execute)
        )
    }
}

impl Default for Pipeline {
    fn default() -> Self {
        Self::ALL
    }
}

/// How far a prepared transaction was checked before execution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Check {
    /// Within every admission limit; its signatures are checked when it executes.
    Admitted,
    /// Within every admission limit, and every signature verified under the key
    /// [`PreparedTx::keys`] names for it (a signature that names none is verified at
    /// execution). Who had to sign, and that each key is the one the account has registered
    /// when the transaction executes, are checked at execution: it is cheap, and needs no
    /// trust in whoever set this.
    Verified,
    /// Refused: it can never be included.
    Refused(TxError),
}

/// A transaction after the stateless stage: its id, its exact signed bytes (what the block
/// stores and commits to) and how far it was checked.
#[derive(Debug, Clone)]
pub struct PreparedTx {
    /// The transaction.
    pub tx: SignedTransaction,
    /// Its id (of the unsigned encoding).
    pub id: TxId,
    /// Its signed encoding.
    pub bytes: Vec<u8>,
    /// What the stateless checks found.
    pub check: Check,
    /// When `check` is [`Check::Verified`]: the key each signature verified under, in order
    /// (see [`VerifiedKeys`]); empty otherwise.
    pub keys: VerifiedKeys,
}

impl PreparedTx {
    /// Encodes `tx` and checks its admission limits (signatures are not checked).
    pub fn new(tx: SignedTransaction) -> Self {
        let bytes = tx.encode();
        let id = tx.id_from_encoding(&bytes);
        let check = match tx.check_limits(bytes.len()) {
            Ok(()) => Check::Admitted,
            Err(e) => Check::Refused(e),
        };
        Self {
            tx,
            id,
            bytes,
            check,
            keys: Vec::new(),
        }
    }

    /// Decodes a transaction received as bytes, admitting it
    /// ([`SignedTransaction::decode`]); bytes that are no transaction cannot be prepared.
    pub fn decode(bytes: Vec<u8>) -> Result<Self, TxError> {
        let tx = SignedTransaction::decode(&bytes)?;
        let id = tx.id_from_encoding(&bytes);
        Ok(Self {
            tx,
            id,
            bytes,
            check: Check::Admitted,
            keys: Vec::new(),
        })
    }

    /// Checks this transaction's signatures now, on this thread, unless already done; one
    /// without its key against the key `keys` gives for its account.
    pub fn verify(&mut self, keys: &dyn KeySource) {
        if self.check == Check::Admitted {
            let result = crypto::verify_signatures(&self.tx, &self.id, keys);
            self.settle(result);
        }
    }

    fn settle(&mut self, result: Result<VerifiedKeys, TxError>) {
        match result {
            Ok(keys) => {
                self.check = Check::Verified;
                self.keys = keys;
            }
            Err(e) => self.check = Check::Refused(e),
        }
    }
}

/// The stateless stage for one block of transactions: encodings, ids and admission limits,
/// then (with `check_signatures` and batched verification on) every signature in batches on
/// all cores, one without its key against the key `keys` gives for its account (the committed
/// state: [`crate::Chain::committed_keys`]; [`crypto::NoKeys`] leaves them to execution).
/// Parallel when any switch asks for all cores.
pub fn prepare_block(
    txs: Vec<SignedTransaction>,
    check_signatures: bool,
    pipeline: &Pipeline,
    keys: &dyn KeySource,
) -> Vec<PreparedTx> {
    let mut prepared: Vec<PreparedTx> = if pipeline.early_encode || pipeline.batch_verify {
        txs.into_par_iter().map(PreparedTx::new).collect()
    } else {
        txs.into_iter().map(PreparedTx::new).collect()
    };
    if check_signatures && pipeline.batch_verify {
        verify_batched(&mut prepared, keys, Need::Each);
    }
    prepared
}

/// Verifies the signatures of every admitted transaction of `txs` in batches on all cores,
/// one without its key against the key `keys` gives for its account; each gets exactly the
/// result single verification ([`PreparedTx::verify`]) would give it. With
/// [`Need::UpToFirstInvalid`], only up to the first transaction refused or left a signature
/// unverified ([`crypto::verify_many`]); those after it stay [`Check::Admitted`].
pub fn verify_batched(txs: &mut [PreparedTx], keys: &dyn KeySource, need: Need) {
    let pending: Vec<usize> = (0..txs.len())
        .filter(|&i| txs[i].check == Check::Admitted)
        .collect();
    let items: Vec<(&SignedTransaction, &TxId)> =
        pending.iter().map(|&i| (&txs[i].tx, &txs[i].id)).collect();
    let results = crypto::verify_many(&items, keys, need);
    for (i, result) in pending.into_iter().zip(results) {
        txs[i].settle(result);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tx::{Action, Transaction};
    use tally_host_api::Name;

    #[test]
    fn the_id_from_the_encoding_is_the_transactions_id() {
        let tx = Transaction::new(
            5,
            (1, 2),
            vec![Action {
                account: Name(1),
                name: Name(2),
                authorization: vec![Name(3)],
                data: vec![1, 2, 3],
            }],
        );
        let key = crypto::derived_key(1, 1);
        let signed = SignedTransaction::sign(tx.clone(), &[(Name(3), &key)]);
        let prepared = PreparedTx::new(signed.clone());
        assert_eq!(prepared.id, tx.id());
        assert_eq!(prepared.bytes, signed.encode());
        assert_eq!(PreparedTx::decode(signed.encode()).unwrap().id, tx.id());
        let unsigned = SignedTransaction::unsigned(tx.clone());
        assert_eq!(PreparedTx::new(unsigned).id, tx.id());
    }
}
