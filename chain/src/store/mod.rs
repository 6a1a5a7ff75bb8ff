//! Store internals shared by the backends: the error type, the directory lock, the access mode.

pub mod error;
pub mod lock;

pub use error::{StoreError, StoreResult};
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
