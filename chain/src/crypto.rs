//! Keys and signature checks.

use ed25519_dalek::{Signature, SigningKey, Verifier, VerifyingKey};
use sha2::{Digest, Sha256};
use tally_host_api::Name;

use crate::error::TxError;
use crate::tx::{SignedTransaction, TxId};

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
        let bad = || TxError::BadSignature(sig.account);
        let key = VerifyingKey::from_bytes(&sig.public_key).map_err(|_| bad())?;
        key.verify(id, &Signature::from_bytes(&sig.signature))
            .map_err(|_| bad())?;
    }
    Ok(())
}

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
