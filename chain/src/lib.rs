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
//!   authorized, executed against a [`journal`] checkpoint and finalized, and the result is a
//!   header whose state checksum chains the block's sorted changes onto the previous one.
//!   [`Chain::commit`] makes it durable in one atomic store write.
//! - **Genesis** ([`Genesis`]) is the only block whose state is not derived from signed
//!   transactions.
//! - **Stores** implement [`StateStore`] ([`store`]: memory, the log store, RocksDB); contract
//!   storage is namespaced by account ([`state::keys`]).
//! - **Testing contracts**: with the cargo feature `testing`, `testing::TestChain` runs a
//!   chain in memory with named accounts, signed pushes and traced receipts.

pub mod block;
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
/// A hash set of what others choose; see [`KeyedMap`].
pub(crate) type KeyedSet<K> = std::collections::HashSet<K, KeyedHasher>;
/// The seeded hasher of [`KeyedMap`] and [`KeyedSet`].
pub(crate) type KeyedHasher = foldhash::fast::RandomState;

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
    Access, BlockArchive, BlockRecord, ChangeSource, Commit, DroppedTail, Durability, Entries,
    Poison, StateStore, StoreError, StoreResult, StoreStats,
};
pub use tally_host_api::Name;
pub use tx::{Action, BlockBody, SignedTransaction, Transaction, Transfer, TxId, TxSignature};
