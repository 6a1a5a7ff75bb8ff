//! Keys and signature checks.
//!
//! Keys sign with ed25519-dalek; signatures are *verified* under the ZIP-215 rules
//! ([`zip215`]), whose cofactored equation makes batch verification accept exactly the
//! signatures that single verification accepts. With the usual cofactorless equation a
//! crafted signature (a small-order component in `R`) can pass one batch and fail another,
//! depending on the batch's random coefficients, so nodes that batch differently could
//! disagree on which transactions are valid.
//!
//! Two backends check batches, chosen at run time ([`Backend::best`]): [`avx512`], which
//! puts a different signature in each lane of AVX-512F registers, and [`zip215`] on
//! curve25519-dalek (its AVX2 code on other x86-64 CPUs), which is also the reference every
//! result is defined by: batched or not, on any backend, batch size or thread count, a
//! signature gets the result [`zip215::verify_one`] gives it. No build flag is needed; a
//! binary built anywhere uses AVX-512 where the CPU has it. An operator can force either
//! with `TALLY_VERIFY_BACKEND=dalek|avx512|auto`, an embedder with [`set_backend`]
//! ([`backend`]). `fuzz/fuzz_targets/verify_differential.rs` checks both backends against
//! [`zip215::verify_one`] on crafted batches.
//!
//! Decompressed public keys are kept in bounded caches shared by every thread ([`Keys`]), so
//! an account's key is decompressed once, not once per signature.

#[cfg(target_arch = "x86_64")]
pub mod avx512;
pub mod backend;
pub mod key_cache;
pub mod zip215;

use std::sync::LazyLock;

use ed25519_dalek::SigningKey;
use rayon::prelude::*;
use sha2::{Digest, Sha256};

pub use backend::{BACKEND_ENV, Backend, BackendChoice, BackendError, set_backend};
pub use key_cache::{KEY_CACHE_ENTRIES, KeyCache};
pub use zip215::SigItem;

use crate::error::TxError;
use crate::tx::{SignedTransaction, TxId};

/// Signatures per batch at most. A batch's multiscalar multiplication costs less per
/// signature the larger it is (Pippenger's buckets are shared; on the AVX-512 backend, CPU
/// time a signature fell from 12.6 µs at 1,250 to 11.7 at 2,500 and 10.2 at 5,000 on this
/// loaded machine), so [`verify_many`] gives the AVX-512 backend whole blocks, which it
/// spreads over every core itself, and the dalek backend one batch per thread. The bound
/// keeps a batch's working set (about 0.6 KiB a signature) near 5 MiB for huge blocks.
pub const VERIFY_BATCH: usize = 8192;

/// Fewest signatures [`verify_many`] gives a thread of its own on the dalek backend: below
/// this, the fixed cost of a batch's multiscalar multiplication outweighs the gain.
const MIN_BATCH: usize = 64;

/// Caches of decompressed public keys, in the form each backend wants them.
pub struct Keys {
    points: KeyCache,
    #[cfg(target_arch = "x86_64")]
    rows: KeyCache<avx512::Row>,
}

impl Keys {
    /// Caches of at most `entries` keys each; 0 caches nothing.
    pub fn new(entries: usize) -> Self {
        Self {
            points: KeyCache::new(entries),
            #[cfg(target_arch = "x86_64")]
            rows: KeyCache::new(entries),
        }
    }

    /// The cache of curve25519-dalek points, which single verification uses.
    pub fn points(&self) -> &KeyCache {
        &self.points
    }

    /// The caches every verification in this process shares, of [`KEY_CACHE_ENTRIES`] keys.
    pub fn shared() -> &'static Keys {
        static KEYS: LazyLock<Keys> = LazyLock::new(|| Keys::new(KEY_CACHE_ENTRIES));
        &KEYS
    }
}

/// Checks `items` as one batch on `backend` with `keys`, giving each signature the result
/// [`zip215::verify_one`] gives it.
///
/// # Panics
/// If this CPU does not run `backend` ([`Backend::available`]).
pub fn verify_batch(items: &[SigItem], backend: Backend, keys: &Keys) -> Vec<bool> {
    match backend {
        Backend::Dalek => zip215::verify_batch(items, &keys.points),
        #[cfg(target_arch = "x86_64")]
        Backend::Avx512 => avx512::verify_batch(items, keys),
        #[cfg(not(target_arch = "x86_64"))]
        Backend::Avx512 => panic!("the AVX-512 backend runs on x86-64 only"),
    }
}

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
/// id. Needs no state, so it can run on any thread before execution. The error names the
/// first signature (in order) that does not verify.
pub fn verify_signatures(tx: &SignedTransaction, id: &TxId) -> Result<(), TxError> {
    check_signers(tx)?;
    for sig in &tx.signatures {
        let item = SigItem {
            public_key: &sig.public_key,
            signature: &sig.signature,
            message: id,
        };
        if !zip215::verify_one(&item, &Keys::shared().points) {
            return Err(TxError::BadSignature(sig.account));
        }
    }
    Ok(())
}

/// [`verify_signatures`] for many transactions: their signatures in batches on all cores,
/// at most [`VERIFY_BATCH`] a batch, on [`Backend::best`] (the fastest, unless one is forced).
/// The result for each transaction is the one `verify_signatures` gives, whatever the batch
/// size, thread count or backend.
///
/// # Panics
/// If `TALLY_VERIFY_BACKEND` forces a backend that does not exist or that this CPU cannot
/// run ([`Backend::best`]).
pub fn verify_many(items: &[(&SignedTransaction, &TxId)]) -> Vec<Result<(), TxError>> {
    verify_many_with(items, Backend::best())
}

/// [`verify_many`] on `backend`.
///
/// # Panics
/// If this CPU does not run `backend` ([`Backend::available`]).
pub fn verify_many_with(
    items: &[(&SignedTransaction, &TxId)],
    backend: Backend,
) -> Vec<Result<(), TxError>> {
    // The signer check first, as `verify_signatures` does it; a transaction that fails it
    // puts no signature into the batches.
    let signers: Vec<Result<(), TxError>> = items.iter().map(|(tx, _)| check_signers(tx)).collect();
    let sigs: Vec<SigItem> = items
        .iter()
        .zip(&signers)
        .filter(|(_, signers)| signers.is_ok())
        .flat_map(|((tx, id), _)| {
            tx.signatures.iter().map(|sig| SigItem {
                public_key: &sig.public_key,
                signature: &sig.signature,
                message: &id[..],
            })
        })
        .collect();
    let valid: Vec<bool> = match backend {
        // Parallel inside a batch: as large a batch as VERIFY_BATCH allows, on every core.
        Backend::Avx512 => sigs
            .chunks(VERIFY_BATCH)
            .flat_map(|chunk| verify_batch(chunk, backend, Keys::shared()))
            .collect(),
        // One batch per thread (a multiple of the threads for blocks beyond VERIFY_BATCH a
        // thread), as large as can be, the threads finishing together.
        Backend::Dalek => {
            let batches = sigs
                .len()
                .div_ceil(VERIFY_BATCH)
                .next_multiple_of(rayon::current_num_threads())
                .min(sigs.len().div_ceil(MIN_BATCH))
                .max(1);
            let batch = sigs.len().div_ceil(batches).max(1);
            sigs.par_chunks(batch)
                .flat_map_iter(|chunk| verify_batch(chunk, backend, Keys::shared()))
                .collect()
        }
    };
    let mut start = 0;
    items
        .iter()
        .zip(signers)
        .map(|((tx, _), signers)| {
            signers?;
            let n = tx.signatures.len();
            let first_bad = valid[start..start + n].iter().position(|ok| !ok);
            start += n;
            first_bad.map_or(Ok(()), |i| {
                Err(TxError::BadSignature(tx.signatures[i].account))
            })
        })
        .collect()
}

/// Checks, without state, that exactly the accounts that must sign `tx` did, each once: every
/// signature is from a required signer and not repeated, and every required signer signed.
/// Whether each key is the account's registered one needs state, and is checked at execution.
pub fn check_signers(tx: &SignedTransaction) -> Result<(), TxError> {
    // Without allocating (it runs for every transaction): admission bounds the work to
    // MAX_SIGNATURES_PER_TX signatures against MAX_ACTIONS_PER_TX x MAX_SIGNATURES_PER_TX
    // authorizations.
    let mut authorizations = tx.transaction.signers();
    for (i, sig) in tx.signatures.iter().enumerate() {
        let repeated = tx.signatures[..i].iter().any(|s| s.account == sig.account);
        if repeated || !authorizations.clone().any(|a| a == sig.account) {
            return Err(TxError::UnneededSignature(sig.account));
        }
    }
    // The lowest unsigned authorization, as sorting the signers would find it first.
    let missing = authorizations
        .by_ref()
        .filter(|a| !tx.signatures.iter().any(|s| s.account == *a))
        .min();
    match missing {
        Some(account) => Err(TxError::MissingSignature(account)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests;
