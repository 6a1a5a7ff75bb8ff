//! Tally's benchmark workloads, shared by `tally bench` and the criterion benches (so the
//! number a user sees and the number CI tracks come from the same code), and the baselines
//! they are compared with.
//!
//! - [`workload`]: the signed-transfer workload of the 2017 EOS post, driving the library's
//!   block path (`prepare_block` → `Chain::execute_block` → `Chain::commit`);
//! - [`sampler`]: SplitMix64 and the Zipf-Mandelbrot account sampler of the Vryx test;
//! - [`baseline`]: the same transfer in plain Rust, and the same `.wasm` under wasmi;
//! - [`swap`]: trades on contracts/swap, a pool of two tokens: calls between contracts;
//! - [`hostile`]: the worst blocks a hostile sender can build, one per resource it attacks;
//! - [`flood`]: a funded attacker flooding one fee dimension (allocate), and what prices do;
//! - [`proc`]: what the process uses (resident memory), read from `/proc`;
//! - [`report`]: the report of a `tally bench` run, as JSON and as a table;
//! - [`storebench`]: `tally storebench`'s storage workloads and their measurement.

pub mod baseline;
pub mod flood;
pub mod hostile;
pub mod proc;
pub mod report;
pub mod sampler;
pub mod storebench;
pub mod swap;
pub mod workload;
