//! Store internals: the error type, the directory lock and the access mode, which every
//! backend shares, and the parts of the log store (its file layer, index, cache, log records,
//! sorted runs and merges).

pub mod cache;
pub mod crash;
pub mod error;
pub mod index;
pub mod lock;
pub mod merge;
pub mod record;
pub mod run;
pub mod vfs;

pub use error::{Poison, StoreError, StoreResult};
pub use lock::DirLock;

/// Whether a store is opened to commit blocks or only to read them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Commit blocks: the one writer, holding the store's lock exclusively. Opening repairs
    /// what a crash left (a torn last record).
    ReadWrite,
    /// Read only: nothing in the store's directory is created, changed or removed.
    ReadOnly,
}
