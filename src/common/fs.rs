//! Files written so that a crash leaves the old version or the new one, never a mix.

use std::io::Write;
use std::path::Path;

use anyhow::Context;

/// Writes `bytes` to `path` atomically (temporary file, fsync, rename), with `mode`.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

/// Makes the entries of directory `dir` durable: a file created, renamed or removed in it
/// survives a power cut only once its directory is synced.
pub fn sync_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("cannot sync the directory {}", dir.display()))
}

/// Renames `from` to `to` (in the same directory) and syncs that directory, so the rename
/// survives a crash before the caller goes on.
pub fn rename_durably(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::rename(from, to)
        .with_context(|| format!("cannot rename {} to {}", from.display(), to.display()))?;
    sync_dir(to.parent().unwrap_or(Path::new(".")))
}
