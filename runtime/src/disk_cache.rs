//! The on-disk tier of the module cache: one file per code hash, holding wasmtime's serialized
//! native code behind a header that says what it was compiled for, authenticated with an
//! HMAC under this node's cache key ([`crate::cache_key`]).
//!
//! File layout (all integers little-endian):
//!
//! | bytes | field |
//! |---|---|
//! | 8 | magic `TALLYMOD` |
//! | 4 | format version (2) |
//! | 32 | engine fingerprint ([`crate::engine::fingerprint`]) |
//! | 32 | sha256 of the WebAssembly code |
//! | 8 | payload length |
//! | 32 | HMAC-SHA256, under the cache key, of every byte above and the payload |
//! | n | payload: `Module::serialize` output |
//!
//! Any mismatch (truncated file, flipped byte, another engine or wasmtime version, an entry
//! written under another key) makes the entry a miss: the caller recompiles and rewrites it.
//! Nothing here panics on bad input.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::cache_key::CacheKey;

const MAGIC: &[u8; 8] = b"TALLYMOD";
const FORMAT_VERSION: u32 = 2;
/// Bytes before the tag.
const SIGNED_HEADER_LEN: usize = 8 + 4 + 32 + 32 + 8;
const HEADER_LEN: usize = SIGNED_HEADER_LEN + 32;

/// The path of the entry for `code_hash` in `dir`.
pub(crate) fn entry_path(dir: &Path, code_hash: &[u8; 32]) -> PathBuf {
    dir.join(format!("{}.cwasm", hex::encode(code_hash)))
}

fn header(fingerprint: &[u8; 32], code_hash: &[u8; 32], payload_len: usize) -> Vec<u8> {
    let mut header = Vec::with_capacity(HEADER_LEN);
    header.extend_from_slice(MAGIC);
    header.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    header.extend_from_slice(fingerprint);
    header.extend_from_slice(code_hash);
    header.extend_from_slice(&(payload_len as u64).to_le_bytes());
    header
}

/// SHA-256's block size, which HMAC pads its key to.
const BLOCK: usize = 64;

/// HMAC-SHA256 (RFC 2104) of the concatenated `parts` under `key` (at most one block long,
/// as the cache key is).
fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    assert!(key.len() <= BLOCK, "cache keys are shorter than a block");
    let mut padded = [0u8; BLOCK];
    padded[..key.len()].copy_from_slice(key);
    let pad = |byte: u8| padded.map(|k| k ^ byte);
    let mut inner = Sha256::new_with_prefix(pad(0x36));
    for part in parts {
        inner.update(part);
    }
    let mut outer = Sha256::new_with_prefix(pad(0x5c));
    outer.update(inner.finalize());
    outer.finalize().into()
}

/// Compares tags in time independent of where they differ, so a forger learns nothing from
/// how long a rejection took.
fn tags_equal(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn mac(key: &CacheKey, header: &[u8], payload: &[u8]) -> [u8; 32] {
    hmac_sha256(key.bytes(), &[header, payload])
}

/// The authenticated payload of an entry, or `None` if the file is missing, stale, corrupt or
/// was not written under `key`.
pub(crate) fn read_entry(
    path: &Path,
    key: &CacheKey,
    fingerprint: &[u8; 32],
    code_hash: &[u8; 32],
) -> Option<Vec<u8>> {
    let mut bytes = fs::read(path).ok()?;
    if bytes.len() < HEADER_LEN {
        return None;
    }
    let expected = header(fingerprint, code_hash, bytes.len() - HEADER_LEN);
    if bytes[..SIGNED_HEADER_LEN] != expected[..] {
        return None;
    }
    let (signed, rest) = bytes.split_at(SIGNED_HEADER_LEN);
    let (tag, payload) = rest.split_at(32);
    if !tags_equal(&mac(key, signed, payload), tag) {
        return None;
    }
    bytes.drain(..HEADER_LEN);
    Some(bytes)
}

/// Writes an entry atomically: a temporary file, fsync'd, then renamed over the old one, so a
/// crash leaves either the old entry or the new one (and a torn temporary file is never read).
pub(crate) fn write_entry(
    path: &Path,
    key: &CacheKey,
    fingerprint: &[u8; 32],
    code_hash: &[u8; 32],
    payload: &[u8],
) -> io::Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let result = (|| {
        let mut file = fs::File::create(&tmp)?;
        let header = header(fingerprint, code_hash, payload.len());
        let tag = mac(key, &header, payload);
        file.write_all(&header)?;
        file.write_all(&tag)?;
        file.write_all(payload)?;
        file.sync_data()?;
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> CacheKey {
        CacheKey::from_bytes([byte; 32])
    }

    #[test]
    fn hmac_sha256_matches_rfc_4231() {
        // Test cases 1 and 2 of RFC 4231.
        assert_eq!(
            hex::encode(hmac_sha256(&[0x0b; 20], &[b"Hi There"])),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"
        );
        assert_eq!(
            hex::encode(hmac_sha256(
                b"Jefe",
                &[b"what do ya want ", b"for nothing?"]
            )),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn an_entry_reads_back_only_under_the_key_it_was_written_with() {
        let dir = tempfile::tempdir().unwrap();
        let path = entry_path(dir.path(), &[1; 32]);
        write_entry(&path, &key(7), &[2; 32], &[1; 32], b"native code").unwrap();
        assert_eq!(
            read_entry(&path, &key(7), &[2; 32], &[1; 32]).as_deref(),
            Some(&b"native code"[..])
        );
        assert_eq!(read_entry(&path, &key(8), &[2; 32], &[1; 32]), None);
        assert_eq!(read_entry(&path, &key(7), &[3; 32], &[1; 32]), None);
        assert_eq!(read_entry(&path, &key(7), &[2; 32], &[9; 32]), None);
    }

    #[test]
    fn every_flipped_byte_makes_an_entry_a_miss() {
        let dir = tempfile::tempdir().unwrap();
        let path = entry_path(dir.path(), &[1; 32]);
        write_entry(&path, &key(7), &[2; 32], &[1; 32], b"native code").unwrap();
        let good = fs::read(&path).unwrap();
        for at in 0..good.len() {
            let mut bad = good.clone();
            bad[at] ^= 1;
            fs::write(&path, &bad).unwrap();
            assert_eq!(
                read_entry(&path, &key(7), &[2; 32], &[1; 32]),
                None,
                "byte {at}"
            );
        }
    }
}
