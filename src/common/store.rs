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

/// The log store's options: the defaults, or for tests that need rotation and snapshots
/// to come up in short runs, `TALLY_LOG_SEGMENT_BYTES` and `TALLY_LOG_SNAPSHOT_BYTES`.
fn log_options() -> anyhow::Result<LogOptions> {
    let mut options = LogOptions::default();
    let var = |name: &str| -> anyhow::Result<Option<u64>> {
        std::env::var(name)
            .ok()
            .map(|v| {
                v.parse()
                    .with_context(|| format!("{name}={v:?} is not a number of bytes"))
            })
            .transpose()
    };
    if let Some(n) = var("TALLY_LOG_SEGMENT_BYTES")? {
        options.segment_bytes = n;
    }
    if let Some(n) = var("TALLY_LOG_SNAPSHOT_BYTES")? {
        options.snapshot_min_bytes = n;
    }
    Ok(options)
}

/// Opens a store of `kind` in `dir`. The chain says with each commit which blocks to keep;
/// `retain` only sizes the memory store. With [`Access::ReadOnly`]
/// nothing in `dir` is created or changed (for `tally blocks`, `verify`, `get`, `balance`).
pub fn open_store(
    kind: StoreKind,
    dir: &Path,
    retain: u64,
    access: Access,
) -> anyhow::Result<Box<dyn StateStore>> {
    let read_only = access == Access::ReadOnly;
    let store: Box<dyn StateStore> = match kind {
        StoreKind::Memory => Box::new(MemoryStore::new(retain)),
        StoreKind::Log => Box::new(
            if read_only {
                LogStore::open_read_only(dir)
            } else {
                LogStore::open(dir, log_options()?)
            }
            .with_context(|| format!("cannot open the log store in {}", dir.display()))?,
        ),
        #[cfg(feature = "rocksdb")]
        StoreKind::Rocksdb => Box::new(
            if read_only {
                tally_chain::store::rocks::RocksStore::open_read_only(dir)
            } else {
                tally_chain::store::rocks::RocksStore::open(dir, retain)
            }
            .with_context(|| format!("cannot open RocksDB in {}", dir.display()))?,
        ),
        #[cfg(not(feature = "rocksdb"))]
        StoreKind::Rocksdb => anyhow::bail!(
            "this tally was built without RocksDB: rebuild with \
             `cargo run --release --features rocksdb -- bench --store rocksdb` \
             (needs apt-get install clang libclang-dev)"
        ),
    };
    if let Some(tail) = store.dropped_tail() {
        eprintln!("warning: {tail}");
    }
    Ok(store)
}
