//! tally-bench's integration tests, in one binary (one link, one process), a module per
//! subject: the baselines against Tally, every store backend, and the workload that `tally
//! bench` and criterion share. Run one with a filter, e.g. `cargo test -p tally-bench --test
//! all stores::`.

mod baseline;
mod stores;
mod workload;
