//! One writer per store, enforced with `flock` on the store's `LOCK` file.
//!
//! A writer takes the lock exclusively, a reader shares it, and neither waits: a second
//! process gets [`StoreError::Locked`] at once, naming the directory. Readers share the lock,
//! rather than reading while a writer appends, so that what they read is always a state the
//! writer had committed and never a file the writer is cutting, rotating or replacing.
//!
//! `flock` locks belong to an open file description, so two opens in one process conflict
//! exactly as two processes do, and the kernel drops the lock when the process dies (even by
//! `kill -9`): a crash never leaves a stale lock behind.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::Path;

use super::error::{StoreError, StoreResult};

/// The lock file's name inside a store's directory.
pub const LOCK_FILE: &str = "LOCK";

/// A held store lock; dropping it releases the lock.
#[derive(Debug)]
pub struct DirLock {
    _file: File,
}

impl DirLock {
    /// Takes `dir`'s lock for writing, creating the lock file if needed.
    pub fn exclusive(dir: &Path) -> StoreResult<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.join(LOCK_FILE))?;
        Self::take(file, dir, true)
    }

    /// Shares `dir`'s lock for reading. Creates nothing: a directory without a lock file
    /// holds no store.
    pub fn shared(dir: &Path) -> StoreResult<Self> {
        let file = match File::open(dir.join(LOCK_FILE)) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(StoreError::Missing {
                    dir: dir.to_path_buf(),
                });
            }
            Err(e) => return Err(e.into()),
        };
        Self::take(file, dir, false)
    }

    fn take(file: File, dir: &Path, writing: bool) -> StoreResult<Self> {
        let locked = if writing {
            file.try_lock()
        } else {
            file.try_lock_shared()
        };
        match locked {
            Ok(()) => Ok(Self { _file: file }),
            Err(TryLockError::WouldBlock) => Err(StoreError::Locked {
                dir: dir.to_path_buf(),
                writing,
            }),
            Err(TryLockError::Error(e)) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_writer_or_a_reader_is_refused_while_a_writer_holds_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        let writer = DirLock::exclusive(dir.path()).unwrap();
        for writing in [true, false] {
            let err = if writing {
                DirLock::exclusive(dir.path())
            } else {
                DirLock::shared(dir.path())
            }
            .unwrap_err();
            assert!(
                matches!(&err, StoreError::Locked { dir: d, writing: w } if d == dir.path() && *w == writing),
                "{err}"
            );
        }
        drop(writer);
        let r1 = DirLock::shared(dir.path()).unwrap();
        let _r2 = DirLock::shared(dir.path()).unwrap();
        assert!(matches!(
            DirLock::exclusive(dir.path()),
            Err(StoreError::Locked { writing: true, .. })
        ));
        drop((r1, _r2));
        DirLock::exclusive(dir.path()).unwrap();
    }

    #[test]
    fn a_reader_finds_no_store_where_no_lock_file_exists() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            DirLock::shared(dir.path()),
            Err(StoreError::Missing { .. })
        ));
        assert!(!dir.path().join(LOCK_FILE).exists());
    }
}
