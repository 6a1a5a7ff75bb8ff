//! tally-chain's integration tests, in one binary (one link, one process: wasmtime's
//! `tests/all` layout), a module per subject. Run one subject with a filter, e.g.
//! `cargo test -p tally-chain --test all store::`.

mod common;

mod calls;
mod chain;
mod dca;
mod escrow;
mod fees;
mod fuzz;
mod hostile;
mod ordered;
mod parallel;
mod poll;
mod registry;
mod script;
mod snapshot;
mod store;
mod swap;
mod wire;
