//! The on-disk tier of the module cache: one file per code hash, holding wasmtime's serialized
//! native code behind a header that says what it was compiled for and a checksum of the rest.
//!
//! File layout (all integers little-endian):
//!
//! | bytes | field |
//! |---|---|
//! | 8 | magic `TALLYMOD` |
//! | 4 | format version (1) |
//! | 32 | engine fingerprint ([`crate::engine::fingerprint`]) |
//! | 32 | sha256 of the WebAssembly code |
//! | 32 | sha256 of the payload |
//! | 8 | payload length |
//! | n | payload: `Module::serialize` output |
//!
//! Any mismatch (truncated file, flipped byte, another engine or wasmtime version) makes the
//! entry a miss: the caller recompiles and rewrites it. Nothing here panics on bad input.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

const MAGIC: &[u8; 8] = b"TALLYMOD";
const FORMAT_VERSION: u32 = 1;
const HEADER_LEN: usize = 8 + 4 + 32 + 32 + 32 + 8;

/// The path of the entry for `code_hash` in `dir`.
pub(crate) fn entry_path(dir: &Path, code_hash: &[u8; 32]) -> PathBuf {
    dir.join(format!("{}.cwasm", hex::encode(code_hash)))
}

/// The verified payload of an entry, or `None` if the file is missing, stale or corrupt.
pub(crate) fn read_entry(
    path: &Path,
    fingerprint: &[u8; 32],
    code_hash: &[u8; 32],
) -> Option<Vec<u8>> {
    let mut bytes = fs::read(path).ok()?;
    if bytes.len() < HEADER_LEN || &bytes[..8] != MAGIC {
        return None;
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().ok()?);
    let payload_len = u64::from_le_bytes(bytes[108..116].try_into().ok()?);
    let payload_ok = version == FORMAT_VERSION
        && &bytes[12..44] == fingerprint
        && &bytes[44..76] == code_hash
        && payload_len == (bytes.len() - HEADER_LEN) as u64
        && bytes[76..108] == Sha256::digest(&bytes[HEADER_LEN..])[..];
    if !payload_ok {
        return None;
    }
    bytes.drain(..HEADER_LEN);
    Some(bytes)
}

/// Writes an entry atomically: a temporary file, fsync'd, then renamed over the old one, so a
/// crash leaves either the old entry or the new one (and a torn temporary file is never read).
pub(crate) fn write_entry(
    path: &Path,
    fingerprint: &[u8; 32],
    code_hash: &[u8; 32],
    payload: &[u8],
) -> io::Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let result = (|| {
        let mut file = fs::File::create(&tmp)?;
        let mut header = Vec::with_capacity(HEADER_LEN);
        header.extend_from_slice(MAGIC);
        header.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        header.extend_from_slice(fingerprint);
        header.extend_from_slice(code_hash);
        header.extend_from_slice(&Sha256::digest(payload));
        header.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        file.write_all(&header)?;
        file.write_all(payload)?;
        file.sync_data()?;
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}
