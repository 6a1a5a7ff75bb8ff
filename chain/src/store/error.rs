//! What can go wrong in a state store, as a type: I/O, corruption, a lock held by another
//! process, a write to a store opened read-only.
//!
//! Corruption is its own kind (after redb's `StorageError::Corrupted`), so a caller can tell
//! "the disk failed" from "the data on it is damaged" without parsing a message. So is a store
//! stopped by a failed write or sync ([`StoreError::Poisoned`], after PostgreSQL's answer to
//! "fsyncgate"): its message says which blocks are on disk and that restarting recovers.

use std::io;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};

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
    /// A write or sync of the store's files failed, now or earlier: the store commits and
    /// reads nothing more until it is opened again.
    #[error("{0}")]
    Poisoned(Box<Poison>),
}

/// Why a store stopped: a write or a sync of one of its files failed.
///
/// After a failed `fsync` the operating system may have dropped the data it could not write
/// while still showing it to readers, and a later `fsync` succeeds without writing it (Linux;
/// PostgreSQL's "fsyncgate", 2018). So nothing the process holds about the files can be
/// trusted any more: the store commits and reads nothing, and tells the operator to restart,
/// since opening the store again reads what is on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Poison {
    /// The file (or directory) the failed step wrote or synced.
    pub path: PathBuf,
    /// The step, as a verb phrase: "syncing", "appending block 7 to", ...
    pub step: String,
    /// Why it failed (the operating system's error).
    pub cause: String,
    /// The last block known to be on disk (`None`: none yet).
    pub durable: Option<u64>,
    /// Blocks above `durable` that may or may not be on disk: cutting them off the log failed
    /// too. Reopening keeps those that are whole there. `None` when the log was cut back, so
    /// that no block above `durable` can come back.
    pub unsure: Option<RangeInclusive<u64>>,
}

impl Poison {
    /// A failure of `step` on `path`, before the store says what it left.
    pub(crate) fn new(path: &Path, step: impl Into<String>, cause: impl std::fmt::Display) -> Self {
        Self {
            path: path.to_path_buf(),
            step: step.into(),
            cause: cause.to_string(),
            durable: None,
            unsure: None,
        }
    }
}

/// Names the file and the step of a write or sync that may fail, for a [`Poison`].
pub(crate) trait Step<T> {
    /// `Err` as a failure of `step` on `path`.
    fn at(self, step: &str, path: &Path) -> Result<T, Poison>;
}

impl<T, E: std::fmt::Display> Step<T> for Result<T, E> {
    fn at(self, step: &str, path: &Path) -> Result<T, Poison> {
        self.map_err(|e| Poison::new(path, step, e))
    }
}

impl std::fmt::Display for Poison {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} failed: {}. ",
            self.step,
            self.path.display(),
            self.cause
        )?;
        match (self.durable, &self.unsure) {
            (Some(d), None) => write!(f, "Block {d} is the last block on disk; "),
            (None, None) => write!(f, "No block is on disk yet; "),
            (Some(d), Some(u)) => write!(
                f,
                "Block {d} is the last block known to be on disk, and blocks {} to {} may or may                  not be (cutting them off failed too); ",
                u.start(),
                u.end()
            ),
            (None, Some(u)) => write!(
                f,
                "Blocks {} to {} may or may not be on disk (cutting them off failed too); ",
                u.start(),
                u.end()
            ),
        }?;
        write!(
            f,
            "after a failed write or sync the operating system's copy of a file cannot be \
             trusted, so this store commits and reads nothing more. Stop the node (or the \
             command) and start it again: reopening the store recovers from what is on disk. \
             Check the disk first (the kernel log, free space)"
        )
    }
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

    /// Why the store stopped, if it did ([`StoreError::Poisoned`]).
    pub fn poison(&self) -> Option<&Poison> {
        match self {
            Self::Poisoned(poison) => Some(poison),
            _ => None,
        }
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
                    StoreError::Poisoned(_) => io::ErrorKind::Other,
                    StoreError::Io(_) => unreachable!("matched above"),
                };
                io::Error::new(kind, other)
            }
        }
    }
}
