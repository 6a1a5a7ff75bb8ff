//! Nothing: this crate exists to build librocksdb-sys (see Cargo.toml).
