//! The node's mempool: what it knows of the bundles in CometBFT's mempool and in the block
//! being decided. A bundle is decoded once, where it first arrives (CheckTx, or
//! ProcessProposal for one this node never saw), and its verified transactions are kept until
//! FinalizeBlock takes them into the block: FinalizeBlock decodes again only what it has not
//! seen.
//!
//! Admission applies the chain's own rules, at the time the next block has at the earliest
//! (the last block's time + 1 ms: CometBFT's block times increase by at least a millisecond,
//! and `Ledger::execute` enforces it). A transaction is valid in a block at time `T` while
//! `T < expiration_ms <= T + max_lifetime_ms` (chain/src/phase/validate.rs), so a bundle is
//! refused when one of its transactions could not be included in the next block: expired, or
//! expiring further ahead than a transaction may live.

use std::collections::HashSet;

use prost::bytes::Bytes;
use tally_chain::{Check, PreparedTx, TxError, TxId};

use super::app::code;
use super::bundle;

/// Maps keyed by bundle hashes and transaction ids, which senders choose: a seeded hash, so
/// none can send bundles that collide in them.
type KeyedMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// How much later than the last block the next block is, at the least: CometBFT's block times
/// increase by at least a millisecond (its votes' times are the parent's time + 1 ms at the
/// earliest), and the ledger keeps them increasing (`Ledger::execute`).
const MIN_BLOCK_STEP_MS: u64 = 1;

/// Why a bundle is refused: a CheckTx code (`app::code`) and a log for the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The CheckTx code.
    pub code: u32,
    /// What to tell the sender.
    pub log: String,
}

impl Refusal {
    fn new(code: u32, log: impl Into<String>) -> Self {
        Self {
            code,
            log: log.into(),
        }
    }
}

/// Splits and decodes a bundle: each transaction within Tally's size and structure limits,
/// signatures not yet verified. The one decoder of CheckTx and ProcessProposal.
pub fn decode(bytes: &[u8]) -> Result<Vec<PreparedTx>, Refusal> {
    let parts =
        bundle::split(bytes).map_err(|e| Refusal::new(code::MALFORMED_BUNDLE, e.to_string()))?;
    parts
        .iter()
        .enumerate()
        .map(|(i, b)| {
            PreparedTx::decode(b.to_vec())
                .map_err(|e| Refusal::new(code::REFUSED, format!("transaction {i}: {e}")))
        })
        .collect()
}

/// Verifies every signature of `txs` in one batched call: the first refusal, if any.
pub fn verify(txs: &mut [PreparedTx]) -> Result<(), Refusal> {
    tally_chain::pipeline::verify_batched(txs);
    match txs.iter().enumerate().find_map(|(i, t)| match &t.check {
        Check::Refused(e) => Some((i, e)),
        _ => None,
    }) {
        Some((i, e)) => Err(Refusal::new(code::REFUSED, format!("transaction {i}: {e}"))),
        None => Ok(()),
    }
}

/// The chain's expiration rule for a block at `time_ms` (chain/src/phase/validate.rs), with
/// the chain's own errors.
fn expiry(expiration_ms: u64, time_ms: u64, max_lifetime_ms: u64) -> Result<(), TxError> {
    if expiration_ms <= time_ms {
        return Err(TxError::Expired {
            expiration_ms,
            block_time_ms: time_ms,
        });
    }
    if expiration_ms - time_ms > max_lifetime_ms {
        return Err(TxError::ExpirationTooFar {
            expiration_ms,
            block_time_ms: time_ms,
            max_lifetime_ms,
        });
    }
    Ok(())
}

/// A bundle that passed CheckTx and is in CometBFT's mempool.
struct Pooled {
    ids: Vec<TxId>,
    /// The earliest expiration among its transactions: it leaves once a block reaches it.
    expires_ms: u64,
    /// Its verified transactions, until FinalizeBlock takes them.
    txs: Option<Vec<PreparedTx>>,
}

/// The bundles this node verified and has not yet seen committed.
#[derive(Default)]
pub struct Mempool {
    /// Verified bundles in CometBFT's mempool, by CometBFT hash.
    bundles: KeyedMap<[u8; 32], Pooled>,
    /// Ids of the transactions in them.
    ids: KeyedMap<TxId, [u8; 32]>,
    /// Bundles of the proposal being decided that ProcessProposal verified (not in the
    /// mempool), for FinalizeBlock.
    proposed: KeyedMap<[u8; 32], Vec<PreparedTx>>,
    /// Last committed block time and the longest transaction lifetime.
    head_time_ms: u64,
    max_lifetime_ms: u64,
}

impl Mempool {
    /// An empty mempool over a chain whose last block has time `head_time_ms`.
    pub fn new(head_time_ms: u64, max_lifetime_ms: u64) -> Self {
        Self {
            head_time_ms,
            max_lifetime_ms,
            ..Self::default()
        }
    }

    /// The time the chain's rules are applied at: the next block's, at the earliest.
    fn next_block_ms(&self) -> u64 {
        self.head_time_ms + MIN_BLOCK_STEP_MS
    }

    /// The checks that need the mempool but no signature: expiration and duplicates (within
    /// the bundle and against the mempool). Run before verification, so a flood of stale or
    /// duplicate bundles costs none.
    pub fn screen(&self, txs: &[PreparedTx]) -> Result<(), Refusal> {
        let time_ms = self.next_block_ms();
        let mut seen = HashSet::with_capacity(txs.len());
        for (i, t) in txs.iter().enumerate() {
            if let Err(e) = expiry(
                t.tx.transaction.expiration_ms,
                time_ms,
                self.max_lifetime_ms,
            ) {
                return Err(Refusal::new(code::EXPIRED, format!("transaction {i}: {e}")));
            }
            if !seen.insert(t.id) || self.ids.contains_key(&t.id) {
                return Err(Refusal::new(
                    code::DUPLICATE,
                    format!(
                        "transaction {i}: duplicate transaction {}: it is already in the mempool",
                        hex::encode(t.id)
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Admits a verified bundle, unless a transaction of it arrived meanwhile in another.
    pub fn admit(&mut self, hash: [u8; 32], txs: Vec<PreparedTx>) -> Result<(), Refusal> {
        if txs.iter().any(|t| self.ids.contains_key(&t.id)) {
            return Err(Refusal::new(
                code::DUPLICATE,
                "a transaction is already in the mempool",
            ));
        }
        let expires_ms = txs
            .iter()
            .map(|t| t.tx.transaction.expiration_ms)
            .min()
            .unwrap_or(0);
        let ids: Vec<TxId> = txs.iter().map(|t| t.id).collect();
        for id in &ids {
            self.ids.insert(*id, hash);
        }
        self.bundles.insert(
            hash,
            Pooled {
                ids,
                expires_ms,
                txs: Some(txs),
            },
        );
        Ok(())
    }

    /// CheckTx's recheck of a bundle after a commit: `None` if this node does not know it (it
    /// restarted), else whether it stays. An expired bundle leaves.
    pub fn recheck(&mut self, hash: &[u8; 32]) -> Option<Result<(), Refusal>> {
        let time_ms = self.next_block_ms();
        let p = self.bundles.get(hash)?;
        if let Err(e) = expiry(p.expires_ms, time_ms, u64::MAX) {
            self.remove(hash);
            return Some(Err(Refusal::new(code::EXPIRED, e.to_string())));
        }
        Some(Ok(()))
    }

    /// Whether the bundle was verified here (in the mempool, or in the proposal).
    pub fn knows(&self, hash: &[u8; 32]) -> bool {
        self.bundles.contains_key(hash) || self.proposed.contains_key(hash)
    }

    /// Remembers the verified bundles of a proposal, for FinalizeBlock.
    pub fn proposed(&mut self, bundles: impl IntoIterator<Item = ([u8; 32], Vec<PreparedTx>)>) {
        self.proposed.extend(bundles);
    }

    /// The verified transactions of a bundle, once: FinalizeBlock takes them into the block.
    /// `None` if this node has not verified it, or they were taken already.
    pub fn take(&mut self, hash: &[u8; 32]) -> Option<Vec<PreparedTx>> {
        if let Some(txs) = self.proposed.remove(hash) {
            return Some(txs);
        }
        self.bundles.get_mut(hash)?.txs.take()
    }

    /// After a commit at `head_time_ms`: the block's bundles leave, and so does every bundle
    /// the chain's rule says has expired (CometBFT's recheck would drop it anyway; this bounds
    /// what a bundle CometBFT forgot costs).
    pub fn committed(&mut self, head_time_ms: u64, block: &[[u8; 32]]) {
        self.head_time_ms = head_time_ms;
        for h in block {
            self.remove(h);
        }
        let time_ms = self.next_block_ms();
        let expired: Vec<[u8; 32]> = self
            .bundles
            .iter()
            .filter(|(_, p)| p.expires_ms <= time_ms)
            .map(|(h, _)| *h)
            .collect();
        for h in &expired {
            self.remove(h);
        }
        self.proposed.clear();
    }

    /// Sets the head after InitChain.
    pub fn set_head(&mut self, head_time_ms: u64, max_lifetime_ms: u64) {
        self.head_time_ms = head_time_ms;
        self.max_lifetime_ms = max_lifetime_ms;
    }

    fn remove(&mut self, hash: &[u8; 32]) {
        if let Some(p) = self.bundles.remove(hash) {
            for id in p.ids {
                self.ids.remove(&id);
            }
        }
    }
}

/// The hashes of a block's bundles.
pub fn hashes(txs: &[Bytes]) -> Vec<[u8; 32]> {
    txs.iter().map(|t| bundle::hash(t)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tally_chain::{Action, Name, SignedTransaction, Transaction};

    const HEAD_MS: u64 = 1_000_000;
    const LIFETIME_MS: u64 = 120_000;

    fn tx(expiration_ms: u64, nonce: u8) -> PreparedTx {
        PreparedTx::new(SignedTransaction::unsigned(Transaction::new(
            expiration_ms,
            (0, 0),
            vec![Action {
                account: Name::from_str_const("simplecoin").unwrap(),
                name: Name::from_str_const("transfer").unwrap(),
                authorization: vec![],
                data: vec![nonce],
            }],
        )))
    }

    fn pool() -> Mempool {
        Mempool::new(HEAD_MS, LIFETIME_MS)
    }

    #[test]
    fn admission_is_the_chains_expiry_rule_at_the_next_blocks_earliest_time() {
        let next = HEAD_MS + MIN_BLOCK_STEP_MS;
        let code_of = |exp| pool().screen(&[tx(exp, 0)]).map_err(|r| r.code);
        assert_eq!(
            code_of(next),
            Err(code::EXPIRED),
            "expires at the next block"
        );
        assert_eq!(code_of(next + 1), Ok(()));
        assert_eq!(code_of(next + LIFETIME_MS), Ok(()), "the longest lifetime");
        assert_eq!(code_of(next + LIFETIME_MS + 1), Err(code::EXPIRED));
    }

    #[test]
    fn issue_21_no_slack_past_the_longest_lifetime() {
        // The node used to admit transactions up to a minute past the chain's longest
        // lifetime; the next block would reject them (ExpirationTooFar).
        let refused = pool()
            .screen(&[tx(HEAD_MS + LIFETIME_MS + 30_000, 0)])
            .unwrap_err();
        assert_eq!(refused.code, code::EXPIRED);
        assert!(
            refused.log.contains("more than 120000 ms"),
            "{}",
            refused.log
        );
    }

    #[test]
    fn a_transaction_is_refused_twice_in_a_bundle_and_once_pooled() {
        let mut pool = pool();
        let a = tx(HEAD_MS + 60_000, 1);
        let twice = pool.screen(&[a.clone(), a.clone()]).unwrap_err();
        assert_eq!(twice.code, code::DUPLICATE);
        pool.admit([1; 32], vec![a.clone()]).unwrap();
        assert_eq!(
            pool.screen(std::slice::from_ref(&a)).unwrap_err().code,
            code::DUPLICATE
        );
        assert_eq!(
            pool.admit([2; 32], vec![a]).unwrap_err().code,
            code::DUPLICATE
        );
    }

    #[test]
    fn finalize_takes_a_verified_bundle_once_and_commit_forgets_it() {
        let mut pool = pool();
        let a = tx(HEAD_MS + 60_000, 1);
        pool.admit([1; 32], vec![a.clone()]).unwrap();
        pool.proposed([([2; 32], vec![tx(HEAD_MS + 60_000, 2)])]);
        assert!(pool.knows(&[1; 32]) && pool.knows(&[2; 32]));
        assert_eq!(pool.take(&[1; 32]).unwrap()[0].id, a.id);
        assert!(
            pool.take(&[1; 32]).is_none(),
            "a second copy in the block is decoded anew"
        );
        assert!(pool.take(&[2; 32]).is_some());
        pool.committed(HEAD_MS + 500, &[[1; 32]]);
        assert!(!pool.knows(&[1; 32]) && !pool.knows(&[2; 32]));
        pool.screen(&[a]).unwrap();
    }

    #[test]
    fn recheck_and_commit_drop_what_the_next_block_could_not_include() {
        let mut pool = pool();
        pool.admit([1; 32], vec![tx(HEAD_MS + 1_000, 1)]).unwrap();
        pool.admit([2; 32], vec![tx(HEAD_MS + 60_000, 2)]).unwrap();
        pool.head_time_ms = HEAD_MS + 999;
        assert_eq!(
            pool.recheck(&[1; 32]),
            Some(Err(Refusal::new(
                code::EXPIRED,
                "the transaction expired at 1001000 ms; the block time is 1001000 ms"
            )))
        );
        assert_eq!(pool.recheck(&[1; 32]), None, "it left");
        assert_eq!(pool.recheck(&[2; 32]), Some(Ok(())));
        pool.committed(HEAD_MS + 60_000, &[]);
        assert_eq!(pool.recheck(&[2; 32]), None);
    }
}
