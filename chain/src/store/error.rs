//! What can go wrong in a state store, as a type: I/O, corruption, a lock held by another
//! process, a write to a store opened read-only.
//!
//! Corruption is its own kind (after redb's `StorageError::Corrupted`), so a caller can tell
//! "the disk failed" from "the data on it is damaged" without parsing a message.

use std::io;
use std::path::PathBuf;

/// The result of a store operation.
pub type StoreResult<T> = Result<T, StoreError>;

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The operating system or the storage engine failed (a full disk, a missing file).
    #[error(transparent)]
    Io(io::Error),
    /// Stored data fails its checks. Nothing was cut or repaired: data that was committed
    /// would be lost by doing so.
    #[error(
        "corrupt store: {}{}: {reason}; nothing was changed. Restore the data directory from a \
         backup or sync it again from a peer",
        path.display(),
        offset.map_or(String::new(), |o| format!(" at byte {o}"))
    )]
    Corrupted {
        /// The damaged file (or the store's directory when the engine does not say which).
        path: PathBuf,
        /// Where in the file the damage starts, when known.
        offset: Option<u64>,
        /// What failed.
        reason: String,
    },
    /// Another process holds the store's lock.
    #[error(
        "the store in {} is in use by another tally process (it holds {}); {}",
        dir.display(),
        dir.join(crate::store::lock::LOCK_FILE).display(),
        if *writing {
            "only one process may write a store at a time: wait for the other one to finish, or stop it"
        } else {
            "it is being written: read it when that process has finished"
        }
    )]
    Locked {
        /// The store's directory.
        dir: PathBuf,
        /// Whether this open wanted to write (else it only wanted to read).
        writing: bool,
    },
    /// A file was written by a version of Tally with another on-disk format.
    #[error(
        "{}: store format version {found}, but this tally reads version {expected}; use the \
         tally that wrote it, or start a new data directory",
        path.display()
    )]
    Version {
        /// The file.
        path: PathBuf,
        /// The version it has.
        found: u32,
        /// The version this build reads.
        expected: u32,
    },
    /// No store exists where a read-only open looked for one.
    #[error("no state store in {}: create one first (for a local chain: `tally init --data DIR`)", dir.display())]
    Missing {
        /// Where it looked.
        dir: PathBuf,
    },
    /// A write to a store opened read-only.
    #[error("the store was opened read-only; open it for writing to commit blocks")]
    ReadOnly,
}

impl StoreError {
    /// Corruption of `path` at `offset`.
    pub fn corrupted(
        path: impl Into<PathBuf>,
        offset: Option<u64>,
        reason: impl Into<String>,
    ) -> Self {
        Self::Corrupted {
            path: path.into(),
            offset,
            reason: reason.into(),
        }
    }

    /// Whether this is corruption.
    pub fn is_corruption(&self) -> bool {
        matches!(self, Self::Corrupted { .. })
    }
}

impl From<io::Error> for StoreError {
    /// An I/O error, unless it carries a [`StoreError`] (one that went through an
    /// `io::Result` on its way), which comes back out with its kind intact.
    fn from(error: io::Error) -> Self {
        if error.get_ref().is_some_and(|e| e.is::<StoreError>()) {
            let inner = error.into_inner().expect("checked above");
            return *inner.downcast::<StoreError>().expect("checked above");
        }
        Self::Io(error)
    }
}

impl From<StoreError> for io::Error {
    /// For code that still speaks `io::Result`: the store error rides inside, and
    /// `StoreError::from` takes it back out unchanged.
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Io(e) => e,
            other => {
                let kind = match &other {
                    StoreError::Corrupted { .. } | StoreError::Version { .. } => {
                        io::ErrorKind::InvalidData
                    }
                    StoreError::Locked { .. } => io::ErrorKind::WouldBlock,
                    StoreError::Missing { .. } => io::ErrorKind::NotFound,
                    StoreError::ReadOnly => io::ErrorKind::PermissionDenied,
                    StoreError::Io(_) => unreachable!("matched above"),
                };
                io::Error::new(kind, other)
            }
        }
    }
}
