//! Tally's chain layer: names, transactions, blocks, state stores and the sequential pusher.
//!
//! ```
//! use std::sync::Arc;
//! use tally_chain::{Chain, ChainConfig, MemoryStore, workload};
//! use tally_runtime::{Runtime, RuntimeConfig};
//!
//! let runtime = Arc::new(Runtime::new(RuntimeConfig::default()).unwrap());
//! let mut chain = Chain::open(runtime, Box::new(MemoryStore::new(512)), ChainConfig::default()).unwrap();
//! let simplecoin = workload::SIMPLECOIN;
//! chain.deploy(simplecoin, workload::SIMPLECOIN_WASM).unwrap();
//! assert_eq!(workload::balance(&chain, simplecoin, simplecoin).unwrap(), Some(1_000_000));
//! ```
//!
//! # Core concepts
//!
//! - **Transactions** ([`Transaction`]) carry actions, an expiration and a reference block
//!   (TaPoS). [`Chain::push_transaction`] runs one atomically in the pending block.
//! - **Blocks** ([`BlockHeader`]) commit the pending block's changes in one atomic store
//!   write, with a state checksum chained over each block's logical changes.
//! - **Stores** implement [`StateStore`]; contract storage is namespaced by account.

pub mod block;
pub mod chain;
pub mod crypto;
pub mod error;
pub mod log_store;
pub mod pipeline;
#[cfg(feature = "rocksdb")]
pub mod rocks_store;
pub mod state;
pub mod store;
pub mod system;
pub mod tx;
pub mod verify;
pub mod workload;

mod host;

pub use block::{BlockHeader, BlockId};
pub use chain::{Chain, ChainConfig, NativeContract, TxReceipt};
pub use error::{ChainError, TxError};
pub use log_store::{LogOptions, LogStore};
pub use pipeline::{Pipeline, Prepared};
pub use state::{
    BlockArchive, BlockRecord, Commit, Durability, Entries, MemoryStore, StateStore, StoreStats,
};
pub use store::{Access, StoreError, StoreResult};
pub use tally_host_api::Name;
pub use tx::{Action, BlockBody, SignedTransaction, Transaction, Transfer, TxId, TxSignature};
