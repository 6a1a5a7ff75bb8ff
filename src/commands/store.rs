//! Choosing and opening a state store from the command line.

use std::path::Path;

use anyhow::Context;
use clap::ValueEnum;
use tally_chain::{Access, LogOptions, LogStore, MemoryStore, StateStore};

/// `--store` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StoreKind {
    /// The embedded default: state in RAM, an fsync'd append-only log, snapshots.
    Log,
    /// Nothing on disk.
    Memory,
    /// RocksDB (build with `--features rocksdb`).
    Rocksdb,
}

impl StoreKind {
    /// Its command-line label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Log => "log",
            Self::Memory => "memory",
            Self::Rocksdb => "rocksdb",
        }
    }
}

/// Opens a store of `kind` in `dir`, keeping `retain` blocks. With [`Access::ReadOnly`]
/// nothing in `dir` is created or changed (for `tally blocks`, `verify`, `get`, `balance`).
pub fn open_store(
    kind: StoreKind,
    dir: &Path,
    retain: u64,
    access: Access,
) -> anyhow::Result<Box<dyn StateStore>> {
    let read_only = access == Access::ReadOnly;
    Ok(match kind {
        StoreKind::Memory => Box::new(MemoryStore::new(retain)),
        StoreKind::Log => Box::new(
            if read_only {
                LogStore::open_read_only(dir)
            } else {
                LogStore::open(
                    dir,
                    LogOptions {
                        retain_blocks: retain,
                        ..LogOptions::default()
                    },
                )
            }
            .with_context(|| format!("cannot open the log store in {}", dir.display()))?,
        ),
        #[cfg(feature = "rocksdb")]
        StoreKind::Rocksdb => Box::new(
            if read_only {
                tally_chain::rocks_store::RocksStore::open_read_only(dir)
            } else {
                tally_chain::rocks_store::RocksStore::open(dir, retain)
            }
            .with_context(|| format!("cannot open RocksDB in {}", dir.display()))?,
        ),
        #[cfg(not(feature = "rocksdb"))]
        StoreKind::Rocksdb => anyhow::bail!(
            "this tally was built without RocksDB: rebuild with \
             `cargo run --release --features rocksdb -- bench --store rocksdb` \
             (needs apt-get install clang libclang-dev)"
        ),
    })
}
