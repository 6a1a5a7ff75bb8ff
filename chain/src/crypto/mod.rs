//! Keys and signature checks.
//!
//! Keys sign with ed25519-dalek; signatures are *verified* under the ZIP-215 rules
//! ([`zip215`]), whose cofactored equation makes batch verification accept exactly the
//! signatures that single verification accepts. With the usual cofactorless equation a
//! crafted signature (a small-order component in `R`) can pass one batch and fail another,
//! depending on the batch's random coefficients, so nodes that batch differently could
//! disagree on which transactions are valid.
//!
//! Four backends check batches, chosen at run time ([`Backend::best`]): [`avx512ifma`],
//! which puts a different signature in each lane of AVX-512 registers and multiplies with
//! IFMA's 52-bit multiplier, [`avx512`], the same code ([`lanes`]) with a ten-limb field for
//! CPUs with AVX-512F but not IFMA, [`avx2`], that code on AVX2 registers, and [`zip215`] on
//! curve25519-dalek (its AVX2 code on other
//! x86-64 CPUs), which is also the reference every result is defined by: batched or not, on
//! any backend, batch size or thread count, a signature gets the result
//! [`zip215::verify_one`] gives it. No build flag is needed; a binary built anywhere uses
//! AVX-512 where the CPU has it. An operator can force any with
//! `TALLY_VERIFY_BACKEND=dalek|avx2|avx512|avx512ifma|auto`, an embedder with [`set_backend`]
//! ([`backend`]). `fuzz/fuzz_targets/verify_differential.rs` checks every backend the CPU
//! runs against [`zip215::verify_one`] on crafted batches (the IFMA one has no emulation, so
//! only IFMA hardware fuzzes it).
//!
//! Decompressed public keys are kept in bounded caches shared by every thread ([`Keys`]), so
//! an account's key is decompressed once, not once per signature.

pub mod backend;
pub mod key_cache;
#[cfg(target_arch = "x86_64")]
pub mod lanes;
pub mod zip215;

#[cfg(target_arch = "x86_64")]
pub use lanes::{avx2, avx512, avx512ifma};

use std::sync::LazyLock;

use ed25519_dalek::SigningKey;
use rayon::prelude::*;
use sha2::{Digest, Sha256};

pub use backend::{BACKEND_ENV, Backend, BackendChoice, BackendError, set_backend};
pub use key_cache::{KEY_CACHE_ENTRIES, KeyCache};
pub use zip215::{Need, SigItem};

use tally_host_api::Name;

use crate::error::TxError;
use crate::tx::{SignedTransaction, TxId, TxSignature};

/// Signatures per batch at most. A batch's multiscalar multiplication costs less per
/// signature the larger it is (Pippenger's buckets are shared; on the AVX-512 backend, CPU
/// time a signature fell from 12.6 µs at 1,250 to 11.7 at 2,500 and 10.2 at 5,000 on this
/// loaded machine), so [`verify_many`] gives the lane backends (AVX-512, AVX2) whole blocks,
/// which they spread over every core themselves, and the dalek backend one batch per thread.
/// The bound keeps a batch's working set (about 0.6 KiB a signature) near 5 MiB for huge
/// blocks.
pub const VERIFY_BATCH: usize = 8192;

/// Fewest signatures [`verify_many`] gives a thread of its own on the dalek backend: below
/// this, the fixed cost of a batch's multiscalar multiplication outweighs the gain.
const MIN_BATCH: usize = 64;

/// Caches of decompressed public keys, in the form each backend wants them.
pub struct Keys {
    points: KeyCache,
    #[cfg(target_arch = "x86_64")]
    rows: KeyCache<lanes::Row>,
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
/// [`zip215::verify_one`] gives it (with [`Need::UpToFirstInvalid`], up to the first invalid
/// one, and every later one invalid, unchecked).
///
/// # Panics
/// If this CPU does not run `backend` ([`Backend::available`]).
pub fn verify_batch(items: &[SigItem], backend: Backend, keys: &Keys, need: Need) -> Vec<bool> {
    match backend {
        Backend::Dalek => zip215::verify_batch(items, &keys.points, need),
        #[cfg(target_arch = "x86_64")]
        Backend::Avx2 => avx2::verify_batch(items, keys, need),
        #[cfg(target_arch = "x86_64")]
        Backend::Avx512 => avx512::verify_batch(items, keys, need),
        #[cfg(target_arch = "x86_64")]
        Backend::Avx512Ifma => avx512ifma::verify_batch(items, keys, need),
        #[cfg(not(target_arch = "x86_64"))]
        Backend::Avx2 | Backend::Avx512 | Backend::Avx512Ifma => {
            panic!("the {backend} backend runs on x86-64 only")
        }
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

/// Where the stateless stage finds the key an account has registered, for signatures that
/// omit theirs: the committed state the caller passes in. What it says is only a hint of
/// which key to verify against ahead of execution; execution reads the key as the block sees
/// it and verifies again, in order, under any other key (`Chain::authorize`). So a source that
/// is stale, or knows nothing ([`NoKeys`]), changes how fast a block runs, never its result.
pub trait KeySource: Sync {
    /// The key `account` has registered, if it is known.
    fn registered_key(&self, account: Name) -> Option<[u8; 32]>;
}

/// A [`KeySource`] that knows no key: every signature without its key is verified when its
/// transaction executes.
pub struct NoKeys;

impl KeySource for NoKeys {
    fn registered_key(&self, _: Name) -> Option<[u8; 32]> {
        None
    }
}

impl<F: Fn(Name) -> Option<[u8; 32]> + Sync> KeySource for F {
    fn registered_key(&self, account: Name) -> Option<[u8; 32]> {
        self(account)
    }
}

/// Keys read once from a [`KeySource`] for the signatures without their key of some
/// transactions, to verify them later without holding the source: a node reads them under its
/// consensus lock and verifies with the lock released; a pipeline reads them from the committed
/// state before it lends the chain to execution.
#[derive(Debug, Clone, Default)]
pub struct ResolvedKeys(Vec<(Name, [u8; 32])>);

impl ResolvedKeys {
    /// The keys `source` gives for the account of every signature of `txs` (those it knows):
    /// for one without its key, the key to verify it under; for one that carries it, the key
    /// that it must carry (a node's admission checks it).
    pub fn read<'a>(
        txs: impl IntoIterator<Item = &'a SignedTransaction>,
        source: &dyn KeySource,
    ) -> Self {
        let Ok(keys) = Self::try_read(txs, |a| {
            Ok::<_, std::convert::Infallible>(source.registered_key(a))
        });
        keys
    }

    /// [`ResolvedKeys::read`] from reads that may fail: the first failure. A node's admission
    /// reads keys so, and treats a failed read as its own fault, not as an account that does
    /// not exist (which would refuse a transaction, or a proposal, other nodes accept).
    pub fn try_read<'a, E: Send>(
        txs: impl IntoIterator<Item = &'a SignedTransaction>,
        read: impl Fn(Name) -> Result<Option<[u8; 32]>, E> + Sync,
    ) -> Result<Self, E> {
        let mut accounts: Vec<Name> = txs
            .into_iter()
            .flat_map(|t| &t.signatures)
            .map(|s| s.account)
            .collect();
        accounts.sort_unstable();
        accounts.dedup();
        let keys: Vec<Option<(Name, [u8; 32])>> = accounts
            .into_par_iter()
            .map(|a| Ok(read(a)?.map(|k| (a, k))))
            .collect::<Result<_, E>>()?;
        Ok(Self(keys.into_iter().flatten().collect()))
    }
}

impl KeySource for ResolvedKeys {
    fn registered_key(&self, account: Name) -> Option<[u8; 32]> {
        self.0
            .binary_search_by_key(&account, |(a, _)| *a)
            .ok()
            .map(|i| self.0[i].1)
    }
}

/// For each signature of a transaction, in order, the key it was verified under: its own key
/// if it carries one; for one without, the key [`KeySource`] gave, or `None` if the source
/// knew no key for its account or the signature did not verify under it (its transaction
/// executes it against the key the block sees, [`Chain::authorize`](crate::Chain)).
pub type VerifiedKeys = Vec<Option<[u8; 32]>>;

/// The key each signature of `tx` is to be verified under ahead of execution: the one it
/// carries, or the one `keys` gives for its account.
fn keys_of(tx: &SignedTransaction, keys: &dyn KeySource) -> VerifiedKeys {
    tx.signatures
        .iter()
        .map(|sig| sig.public_key.or_else(|| keys.registered_key(sig.account)))
        .collect()
}

/// What one signature's check gives: an `Err` refuses the transaction (a signature that
/// carries its key and does not verify under it can never be valid); `Ok(None)` leaves a
/// signature without its key to execution.
fn settle(
    sig: &TxSignature,
    key: Option<[u8; 32]>,
    valid: bool,
) -> Result<Option<[u8; 32]>, TxError> {
    match (sig.public_key, valid) {
        (Some(_), false) => Err(TxError::BadSignature(sig.account)),
        (_, true) => Ok(key),
        (None, false) => Ok(None),
    }
}

/// Checks every signature of `tx` over the transaction id, ahead of execution: one that
/// carries its public key under that key, one without under the key `keys` gives for its
/// account. Reads no state but through `keys`, so it can run on any thread before execution.
/// The error names the first signature (in order) that carries its key and does not verify;
/// the result says which key each signature verified under ([`VerifiedKeys`]).
pub fn verify_signatures(
    tx: &SignedTransaction,
    id: &TxId,
    keys: &dyn KeySource,
) -> Result<VerifiedKeys, TxError> {
    check_signers(tx)?;
    let candidates = keys_of(tx, keys);
    tx.signatures
        .iter()
        .zip(candidates)
        .map(|(sig, key)| {
            let valid = key.is_some_and(|key| verify_one(&key, &sig.signature, id));
            settle(sig, key, valid)
        })
        .collect()
}

/// Whether `signature` of `message` verifies under `public_key` ([`zip215::verify_one`], with
/// the shared key cache): the rule every batch gives each signature.
pub fn verify_one(public_key: &[u8; 32], signature: &[u8; 64], message: &[u8]) -> bool {
    let item = SigItem {
        public_key,
        signature,
        message,
    };
    zip215::verify_one(&item, &Keys::shared().points)
}

/// [`verify_signatures`] for many transactions: their signatures in batches on all cores,
/// at most [`VERIFY_BATCH`] a batch, on [`Backend::best`] (the fastest, unless one is forced).
/// The result for each transaction is the one `verify_signatures` gives, whatever the batch
/// size, thread count or backend.
///
/// With [`Need::UpToFirstInvalid`] the results end at the first transaction that is refused
/// or left a signature unverified (`Ok` with a `None` key): admission, which refuses a whole
/// bundle for one such transaction, needs no more, and a bundle of invalid signatures costs
/// about two batch checks to refuse rather than a single check of each signature.
///
/// # Panics
/// If `TALLY_VERIFY_BACKEND` forces a backend that does not exist or that this CPU cannot
/// run ([`Backend::best`]).
pub fn verify_many(
    items: &[(&SignedTransaction, &TxId)],
    keys: &dyn KeySource,
    need: Need,
) -> Vec<Result<VerifiedKeys, TxError>> {
    verify_many_with(items, keys, Backend::best(), need)
}

/// [`verify_many`] on `backend`.
///
/// # Panics
/// If this CPU does not run `backend` ([`Backend::available`]).
pub fn verify_many_with(
    items: &[(&SignedTransaction, &TxId)],
    keys: &dyn KeySource,
    backend: Backend,
    need: Need,
) -> Vec<Result<VerifiedKeys, TxError>> {
    // The signer check first, as `verify_signatures` does it; a transaction that fails it
    // puts no signature into the batches.
    let signers: Vec<Result<(), TxError>> = items.iter().map(|(tx, _)| check_signers(tx)).collect();
    // The key each signature goes into the batch with; a signature without a known key
    // stays out of the batch (execution verifies it).
    let candidates: Vec<VerifiedKeys> = items
        .par_iter()
        .zip(&signers)
        .map(|((tx, _), signers)| match signers {
            Ok(()) => keys_of(tx, keys),
            Err(_) => Vec::new(),
        })
        .collect();
    // Up to the first transaction refused or left unverified before any signature is
    // checked: those after it are not needed.
    let needed = match need {
        Need::Each => items.len(),
        Need::UpToFirstInvalid => signers
            .iter()
            .zip(&candidates)
            .position(|(signers, keys)| signers.is_err() || keys.iter().any(Option::is_none))
            .map_or(items.len(), |i| i + 1),
    };
    let (items, signers, candidates) =
        (&items[..needed], &signers[..needed], &candidates[..needed]);
    let sigs: Vec<SigItem> = items
        .iter()
        .zip(candidates)
        .flat_map(|((tx, id), keys)| {
            tx.signatures.iter().zip(keys).filter_map(|(sig, key)| {
                key.as_ref().map(|key| SigItem {
                    public_key: key,
                    signature: &sig.signature,
                    message: &id[..],
                })
            })
        })
        .collect();
    let valid: Vec<bool> = match backend {
        // Parallel inside a batch: as large a batch as VERIFY_BATCH allows, on every core.
        Backend::Avx2 | Backend::Avx512 | Backend::Avx512Ifma => {
            let mut valid = Vec::with_capacity(sigs.len());
            for chunk in sigs.chunks(VERIFY_BATCH) {
                valid.extend(verify_batch(chunk, backend, Keys::shared(), need));
                if need == Need::UpToFirstInvalid && valid.contains(&false) {
                    break;
                }
            }
            valid
        }
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
                .flat_map_iter(|chunk| verify_batch(chunk, backend, Keys::shared(), need))
                .collect()
        }
    };
    // With `UpToFirstInvalid`, results past the first invalid signature were not checked.
    let checked = match need {
        Need::Each => valid.len(),
        Need::UpToFirstInvalid => valid.iter().position(|v| !v).map_or(valid.len(), |i| i + 1),
    };
    let mut valid = valid.into_iter().take(checked);
    let mut results = Vec::with_capacity(items.len());
    for (((tx, id), signers), keys) in items.iter().zip(signers).zip(candidates) {
        let result: Result<VerifiedKeys, TxError> = signers.clone().and_then(|()| {
            // Every signature is settled (consuming its batch result) before the first error
            // is returned, so the next transaction reads its own results.
            let settled: Vec<Result<Option<[u8; 32]>, TxError>> = tx
                .signatures
                .iter()
                .zip(keys)
                .map(|(sig, key)| {
                    let ok = key.is_some_and(|key| match valid.next() {
                        Some(ok) => ok,
                        // Past the first invalid signature, which an earlier signature of
                        // this transaction was: checked alone (at most
                        // `MAX_SIGNATURES_PER_TX` of them), so that this transaction's
                        // result, and the signature its error names, are the full check's.
                        None => {
                            debug_assert_eq!(need, Need::UpToFirstInvalid, "a result each");
                            verify_one(&key, &sig.signature, &id[..])
                        }
                    });
                    settle(sig, *key, ok)
                })
                .collect();
            settled.into_iter().collect()
        });
        let refused = match &result {
            Ok(keys) => keys.iter().any(Option::is_none),
            Err(_) => true,
        };
        results.push(result);
        if refused && need == Need::UpToFirstInvalid {
            break;
        }
    }
    results
}

/// The key `sig` must verify under, given the key its account has registered (`None`: the
/// account does not exist): the registered key, which a signature that carries a key must
/// carry. The one rule execution applies, against the key the block sees
/// ([`Chain::authorize`](crate::Chain)), and a node's admission applies ahead of it, against
/// the committed key, so both refuse with the same error.
pub fn required_key(sig: &TxSignature, registered: Option<[u8; 32]>) -> Result<[u8; 32], TxError> {
    let registered = registered.ok_or(TxError::UnknownAccount(sig.account))?;
    match sig.public_key {
        Some(carried) if carried != registered => Err(TxError::WrongKey(sig.account)),
        _ => Ok(registered),
    }
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
