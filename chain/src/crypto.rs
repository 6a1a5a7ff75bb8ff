//! Keys and signature checks.
//!
//! Keys sign with ed25519-dalek; signatures are *verified* under the ZIP-215 rules
//! (ed25519-zebra), whose cofactored equation makes batch verification accept exactly the
//! signatures that single verification accepts. With the usual cofactorless equation a
//! crafted signature (a small-order component in `R`) can pass one batch and fail another,
//! depending on the batch's random coefficients, so nodes that batch differently could
//! disagree on which transactions are valid.

use ed25519_dalek::SigningKey;
use ed25519_zebra::batch;
use ed25519_zebra::{Signature, VerificationKey, VerificationKeyBytes};
use rand_core::{CryptoRng, OsRng, RngCore};
use rayon::prelude::*;
use sha2::{Digest, Sha256};
use tally_host_api::Name;

use crate::error::TxError;
use crate::tx::{SignedTransaction, TxId};

/// Signatures per batch: large enough that a batch's multiscalar multiplication amortises
/// well, small enough that a block splits into many batches for all cores.
pub const VERIFY_BATCH: usize = 256;

/// A signing key derived from `seed` and `index`: deterministic, for benchmarks and tests.
pub fn derived_key(seed: u64, index: u64) -> SigningKey {
    let mut h = Sha256::new();
    h.update(b"tally-bench-key");
    h.update(seed.to_le_bytes());
    h.update(index.to_le_bytes());
    SigningKey::from_bytes(&h.finalize().into())
}

/// A new signing key from the operating system's randomness.
pub fn random_key() -> std::io::Result<SigningKey> {
    use std::io::Read;
    let mut secret = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut secret)?;
    Ok(SigningKey::from_bytes(&secret))
}

/// Checks every signature of `tx` against the public key it carries, over the transaction
/// id. Needs no state, so it can run on any thread before execution.
pub fn verify_signatures(tx: &SignedTransaction, id: &TxId) -> Result<(), TxError> {
    for sig in &tx.signatures {
        VerificationKey::try_from(sig.public_key)
            .and_then(|key| key.verify(&Signature::from_bytes(&sig.signature), id))
            .map_err(|_| TxError::BadSignature(sig.account))?;
    }
    Ok(())
}

/// [`verify_signatures`] for many transactions, each with its id: batches of
/// [`VERIFY_BATCH`] signatures on all cores. The result for each transaction is the one
/// `verify_signatures` gives (a batch that fails is verified again one signature at a time to
/// find the bad ones).
pub fn verify_many(items: &[(&SignedTransaction, &TxId)]) -> Vec<Result<(), TxError>> {
    items
        .par_chunks(VERIFY_BATCH)
        .flat_map_iter(|chunk| {
            let mut verifier = batch::Verifier::new();
            for (tx, id) in chunk {
                for sig in &tx.signatures {
                    let key = VerificationKeyBytes::from(sig.public_key);
                    verifier.queue((key, Signature::from_bytes(&sig.signature), &id[..]));
                }
            }
            let all_valid = verifier.verify(BatchRng::new()).is_ok();
            chunk.iter().map(move |(tx, id)| {
                if all_valid {
                    Ok(())
                } else {
                    verify_signatures(tx, id)
                }
            })
        })
        .collect()
}

/// The random coefficients of one batch: SHA-256 in counter mode under a key from the
/// operating system. Only their unpredictability matters (a signer who could predict them
/// could craft a bad signature that cancels out); under ZIP-215 they cannot change the result.
struct BatchRng {
    key: [u8; 32],
    counter: u64,
}

impl BatchRng {
    fn new() -> Self {
        let mut key = [0u8; 32];
        OsRng.fill_bytes(&mut key);
        Self { key, counter: 0 }
    }
}

impl RngCore for BatchRng {
    fn next_u32(&mut self) -> u32 {
        self.next_u64() as u32
    }
    fn next_u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        self.fill_bytes(&mut b);
        u64::from_le_bytes(b)
    }
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        for chunk in dest.chunks_mut(32) {
            let block = Sha256::new()
                .chain_update(self.key)
                .chain_update(self.counter.to_le_bytes())
                .finalize();
            self.counter += 1;
            chunk.copy_from_slice(&block[..chunk.len()]);
        }
    }
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand_core::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}

impl CryptoRng for BatchRng {}

/// The accounts that must sign `tx`: every authorization of every action, each once.
pub fn required_signers(tx: &SignedTransaction) -> Vec<Name> {
    let mut signers: Vec<Name> = tx
        .transaction
        .actions
        .iter()
        .flat_map(|a| a.authorization.iter().copied())
        .collect();
    signers.sort_unstable();
    signers.dedup();
    signers
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tx::{Action, Transaction};

    #[test]
    fn batched_verification_gives_each_transaction_the_single_result() {
        let key = derived_key(1, 2);
        let txs: Vec<SignedTransaction> = (0..(VERIFY_BATCH as u64 + 10))
            .map(|i| {
                let tx = Transaction {
                    expiration_ms: i,
                    ref_block_num: 0,
                    ref_block_prefix: 0,
                    actions: vec![Action {
                        account: Name(1),
                        name: Name(2),
                        authorization: vec![Name(3)],
                        data: i.to_le_bytes().to_vec(),
                    }],
                };
                let mut signed = SignedTransaction::sign(tx, &[(Name(3), &key)]);
                match i {
                    7 => signed.signatures[0].signature[5] ^= 1, // corrupt signature
                    300 => signed.signatures[0].public_key = [0xff; 32], // not a point
                    _ => {}
                }
                signed
            })
            .collect();
        let ids: Vec<TxId> = txs.iter().map(|t| t.transaction.id()).collect();
        let items: Vec<_> = txs.iter().zip(&ids).collect();
        let batched = verify_many(&items);
        for (i, (tx, id)) in txs.iter().zip(&ids).enumerate() {
            assert_eq!(batched[i], verify_signatures(tx, id), "transaction {i}");
            assert_eq!(batched[i].is_ok(), i != 7 && i != 300, "transaction {i}");
        }
    }
}
