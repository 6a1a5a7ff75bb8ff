//! The per-user secret that authenticates disk-cache entries.
//!
//! Deserializing a cache entry runs its native code, so an entry must be this node's own
//! output. A checksum cannot show that (anyone can recompute one); an HMAC under a key that
//! never leaves this user's configuration directory can. The key is 32 random bytes in a file
//! of mode 0600, created on first use. A data directory copied from another machine therefore
//! recompiles each module once (its entries fail authentication) and caches it again.

use std::fs::{self, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::RuntimeError;

/// Environment variable naming the key file, overriding the default location.
pub const CACHE_KEY_ENV: &str = "TALLY_CACHE_KEY";

const KEY_LEN: usize = 32;

/// The key itself. Not `Debug`, so it is never printed.
pub(crate) struct CacheKey([u8; KEY_LEN]);

impl CacheKey {
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.0
    }

    #[cfg(test)]
    pub(crate) fn from_bytes(bytes: [u8; KEY_LEN]) -> Self {
        Self(bytes)
    }
}

fn key_error(path: &Path, problem: impl Into<String>) -> RuntimeError {
    RuntimeError::CacheKey {
        path: path.to_path_buf(),
        problem: problem.into(),
    }
}

/// Where the key lives unless configured: `$TALLY_CACHE_KEY`, else
/// `$XDG_CONFIG_HOME/tally/cache.key`, else `$HOME/.config/tally/cache.key`.
pub fn default_key_path() -> Option<PathBuf> {
    let non_empty = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(path) = non_empty(CACHE_KEY_ENV) {
        return Some(PathBuf::from(path));
    }
    let config = non_empty("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| non_empty("HOME").map(|home| PathBuf::from(home).join(".config")))?;
    Some(config.join("tally").join("cache.key"))
}

/// 32 bytes from the kernel's random generator.
fn random_key() -> std::io::Result<[u8; KEY_LEN]> {
    let mut key = [0u8; KEY_LEN];
    fs::File::open("/dev/urandom")?.read_exact(&mut key)?;
    Ok(key)
}

/// Reads the key at `path`, creating it (and its directory, mode 0700) if it does not exist.
/// Refuses a key other users can read, or one inside `cache_dir` (a key stored with the
/// entries it authenticates proves nothing).
pub(crate) fn load_or_create(path: &Path, cache_dir: &Path) -> Result<CacheKey, RuntimeError> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)
            .map_err(|e| key_error(path, format!("cannot create its directory: {e}")))?;
        if let (Ok(dir), Ok(cache)) = (parent.canonicalize(), cache_dir.canonicalize())
            && dir.starts_with(&cache)
        {
            return Err(key_error(
                path,
                format!(
                    "the key must not live in the cache directory {}; set {CACHE_KEY_ENV} to a \
                     path outside it",
                    cache.display()
                ),
            ));
        }
    }
    let fresh = random_key().map_err(|e| key_error(path, format!("no randomness: {e}")))?;
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(mut file) => {
            let key = fresh;
            file.write_all(&key)
                .and_then(|()| file.sync_all())
                .map_err(|e| key_error(path, format!("cannot write a new key: {e}")))?;
            return Ok(CacheKey(key));
        }
        // Another process may have created it first; read that one.
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
        Err(e) => return Err(key_error(path, format!("cannot create it: {e}"))),
    }
    let mut file =
        fs::File::open(path).map_err(|e| key_error(path, format!("cannot open: {e}")))?;
    let meta = file
        .metadata()
        .map_err(|e| key_error(path, format!("cannot stat: {e}")))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(key_error(
            path,
            format!(
                "other users may read it (mode {mode:o}); run `chmod 600 {}`",
                path.display()
            ),
        ));
    }
    let mut key = [0u8; KEY_LEN];
    let mut extra = [0u8; 1];
    file.read_exact(&mut key).map_err(|_| {
        key_error(
            path,
            format!("it is not {KEY_LEN} bytes; delete it to make a new one"),
        )
    })?;
    if file.read(&mut extra).unwrap_or(0) != 0 {
        return Err(key_error(
            path,
            format!("it is longer than {KEY_LEN} bytes; delete it to make a new one"),
        ));
    }
    Ok(CacheKey(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_key_is_private_and_read_back_unchanged() {
        let home = tempfile::tempdir().unwrap();
        let cache = tempfile::tempdir().unwrap();
        let path = home.path().join("tally").join("cache.key");
        let first = load_or_create(&path, cache.path()).unwrap();
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let again = load_or_create(&path, cache.path()).unwrap();
        assert_eq!(first.bytes(), again.bytes());
    }

    #[test]
    fn a_readable_truncated_or_misplaced_key_is_refused() {
        let home = tempfile::tempdir().unwrap();
        let cache = tempfile::tempdir().unwrap();
        let path = home.path().join("cache.key");
        fs::write(&path, [1u8; KEY_LEN]).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        let err = load_or_create(&path, cache.path())
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("chmod 600"), "{err}");

        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        fs::write(&path, [1u8; 5]).unwrap();
        assert!(load_or_create(&path, cache.path()).is_err());

        let inside = cache.path().join("keys").join("cache.key");
        let err = load_or_create(&inside, cache.path())
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("must not live in the cache directory"),
            "{err}"
        );
    }
}
