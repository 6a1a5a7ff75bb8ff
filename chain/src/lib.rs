//! Tally's chain layer: transactions, blocks, the journal, state stores, and the one call that
//! executes a block.
//!
//! ```
//! use std::sync::Arc;
//! use tally_chain::{Chain, ChainConfig, Genesis, MemoryStore};
//! use tally_runtime::{Runtime, RuntimeConfig};
//!
//! let runtime = Arc::new(Runtime::new(RuntimeConfig::default()).unwrap());
//! let store = Box::new(MemoryStore::new(512));
//! let mut chain = Chain::create(runtime, store, ChainConfig::default(), &Genesis::default()).unwrap();
//! let block = chain.run_block(Vec::new()).unwrap(); // prepare, execute, commit
//! assert_eq!(block.header.height, 1);
//! ```
//!
//! # Core concepts
//!
//! - **Transactions** ([`SignedTransaction`]) carry actions, an expiration and a reference
//!   block (TaPoS). They are admitted and their signatures verified ahead of execution, on all
//!   cores ([`prepare_block`], giving [`PreparedTx`]).
//! - **Blocks** run through [`Chain::execute_block`]: each transaction is validated,
//!   authorized, executed against a [`journal`](exec::journal) checkpoint and finalized, and the result is a
//!   header whose state checksum chains the block's sorted changes onto the previous one.
//!   [`Chain::commit`] makes it durable in one atomic store write.
//! - **Genesis** ([`Genesis`]) is the only block whose state is not derived from signed
//!   transactions.
//! - **Stores** implement [`StateStore`] ([`store`]: memory, the log store, RocksDB); contract
//!   storage is namespaced by account ([`state::keys`]).
//! - **Testing contracts**: with the cargo feature `testing`, `testing::TestChain` runs a
//!   chain in memory with named accounts, signed pushes and traced receipts.

pub mod block;
pub mod bundle;
pub mod chain;
pub mod config;
pub mod crypto;
pub mod error;
pub mod exec;
pub mod fee;
pub mod genesis;
pub mod phase;
pub mod pipeline;
pub mod receipt;
pub mod snapshot;
pub mod state;
pub mod store;
#[cfg(feature = "testing")]
pub mod testing;
pub mod tx;
pub mod verify;
pub mod window;
pub mod wire;

pub use exec::system;

/// A hash map keyed by what others choose (storage keys, account names, transaction ids):
/// std's map with foldhash under a per-process random seed, so nobody can choose keys that
/// collide and turn lookups linear. FxHash (`rustc_hash`), fast but unseeded, is kept for
/// keys nobody chooses.
pub(crate) type KeyedMap<K, V> = std::collections::HashMap<K, V, KeyedHasher>;
/// The seeded hasher of [`KeyedMap`].
pub(crate) type KeyedHasher = foldhash::fast::RandomState;

/// A set of transaction ids: [`KeyedMap`]'s guarantee, for keys that are already BLAKE3 hashes.
pub type IdSet = std::collections::HashSet<tx::TxId, IdHasher>;

/// Hashes a transaction id by its first eight bytes, mixed with a per-process random seed by
/// two folded multiplies by fixed odd constants. One multiply by a seed-derived factor spread
/// badly for about one seed in sixteen: 4,096 ids differing only in their top 16 bits fell
/// into as few as 24 of 65,536 buckets, and 1,237 of 20,000 seeds gave 3,900 or fewer. With
/// two fixed factors the least over those 20,000 seeds, at each of four bit offsets, was 3,920
/// (a uniform hash gives about 3,970). An id is a BLAKE3 output, so those bytes are already
/// uniform; a sender grinding ids cannot aim them at one bucket without the seed, and ids
/// equal in all eight bytes cost 2^32 tries for one pair. Foldhash over all 32 bytes (and
/// their length) cost four times as much, and every transaction hashes its id four times (the
/// window's lookup, insert and expiry, and the block's own set).
#[derive(Clone)]
pub struct IdHasher {
    seed: u64,
}

impl Default for IdHasher {
    fn default() -> Self {
        use std::hash::BuildHasher;
        Self::with_seed(foldhash::fast::RandomState::default().hash_one(0x7a11_u64))
    }
}

impl IdHasher {
    /// A hasher keyed by `seed`; [`Default`] draws it at random.
    fn with_seed(seed: u64) -> Self {
        Self { seed }
    }
}

/// The folded multiply: the 128-bit product's halves XORed, so every input bit reaches the low
/// bits.
fn folded_multiply(a: u64, b: u64) -> u64 {
    let product = u128::from(a) * u128::from(b);
    (product as u64) ^ ((product >> 64) as u64)
}

/// The fixed factors of [`IdHash::finish`]: the first fractional digits of pi (odd, dense in
/// both halves), as foldhash uses.
const ID_HASH_FACTORS: [u64; 2] = [0x243f_6a88_85a3_08d3, 0x1319_8a2e_0370_7345];

impl std::hash::BuildHasher for IdHasher {
    type Hasher = IdHash;

    fn build_hasher(&self) -> IdHash {
        IdHash {
            seed: self.seed,
            word: 0,
        }
    }
}

/// The state of [`IdHasher`] for one id.
pub struct IdHash {
    seed: u64,
    word: u64,
}

impl std::hash::Hasher for IdHash {
    fn write(&mut self, bytes: &[u8]) {
        // An id's bytes arrive in one call; its length prefix goes to `write_usize`.
        let mut word = [0u8; 8];
        let n = bytes.len().min(8);
        word[..n].copy_from_slice(&bytes[..n]);
        self.word ^= u64::from_le_bytes(word);
    }

    fn write_usize(&mut self, _len: usize) {}

    fn finish(&self) -> u64 {
        let first = folded_multiply(self.word ^ self.seed, ID_HASH_FACTORS[0]);
        folded_multiply(first ^ self.seed.rotate_left(32), ID_HASH_FACTORS[1])
    }
}

pub use block::{BlockHeader, BlockId};
pub use chain::{Chain, CommittedKeys};
pub use config::ChainConfig;
pub use error::{ChainError, TxError};
pub use exec::code::NativeContract;
pub use fee::{Dimension, Fee, FeeSchedule, FeeState, Usage};
pub use genesis::{Genesis, GenesisBuilder};
pub use pipeline::{Check, Pipeline, PreparedTx, prepare_block};
pub use receipt::{ActionTrace, CallTrace, Event, ExecutedBlock, TxReceipt, TxResult, TxTrace};
pub use snapshot::{SnapshotSchedule, SnapshotStore};
pub use store::log::{LogOptions, LogStore};
pub use store::memory::MemoryStore;
pub use store::{
    Access, BlockArchive, BlockRecord, ChangeSource, Changes, Commit, DroppedTail, Durability,
    Entries, Poison, StateStore, StoreError, StoreResult, StoreStats,
};
pub use tally_host_api::Name;
pub use tx::{Action, BlockBody, SignedTransaction, Transaction, Transfer, TxId, TxSignature};

/// The chain's tests' one pseudo-random source.
#[cfg(test)]
pub(crate) mod test_rng {
    /// Marsaglia's xorshift64 from `seed` (made odd, so never zero): repeatable draws for
    /// randomised tests.
    pub(crate) fn xorshift(seed: u64) -> impl FnMut() -> u64 {
        let mut x = seed | 1;
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }
}

#[cfg(test)]
mod tests {
    use std::hash::BuildHasher;

    use super::{ID_HASH_FACTORS, IdHasher, folded_multiply};

    /// Ids a sender ground to agree in all but 12 bits of their first word (cheap: 2^16 tries
    /// each for 16 fixed bits) still spread over a table's buckets, which a hash map takes from
    /// the low bits, whatever the seed and wherever the varying bits sit. The seeds are fixed so
    /// that the test cannot pass or fail by luck; a uniform hash fills about 3,970 of the 65,536
    /// buckets.
    #[test]
    fn ids_alike_in_their_low_bits_spread_over_buckets() {
        let mut seed = 0x7a11_u64;
        for _ in 0..64 {
            seed = folded_multiply(seed ^ 0x9e37_79b9_7f4a_7c15, ID_HASH_FACTORS[1]);
            let hasher = IdHasher::with_seed(seed);
            for shift in [0u32, 16, 32, 52] {
                let buckets: std::collections::HashSet<u64> = (0..4096u64)
                    .map(|i| {
                        let fixed = if shift == 0 { 0xbeef_0000 } else { 0xbeef };
                        let mut id = [0u8; 32];
                        id[..8].copy_from_slice(&(i << shift | fixed).to_le_bytes());
                        hasher.hash_one(id) & 0xffff
                    })
                    .collect();
                assert!(
                    buckets.len() > 3900,
                    "seed {seed:#x}, ids varying at bit {shift}: {} buckets of 4096 ids",
                    buckets.len()
                );
            }
        }
        let hasher = IdHasher::default();
        let id = [7u8; 32];
        assert_eq!(hasher.hash_one(id), hasher.hash_one(id));
    }
}
