//! Tally under CometBFT: the ABCI application (`tally node`), the local network
//! (`tally devnet`) and the load generator (`tally load`).

pub mod abci;
pub mod app;
pub use tally_chain::bundle;
pub mod devnet;
pub mod keys;
pub mod ledger;
pub mod load;
pub mod mempool;
pub mod metrics;
pub mod results;
pub mod rpc;
pub mod sync;
