//! ZIP-215 batch verification on AVX-512F, eight field elements per instruction.
//!
//! Same rules and same batch equation as [`super::zip215`] (which stays the reference and
//! the fallback), computed with its own arithmetic: curve25519-dalek's vector backends work
//! on the four coordinates of one point (AVX2) or need AVX-512 IFMA, while this puts a
//! different point in each of the eight 64-bit lanes, which plain AVX-512F multiplies
//! (32×32→64 bits) eight at a time:
//! - the `R` of eight signatures (and keys missing from the cache) are decompressed at once;
//! - the multiscalar multiplication has each lane sum a different Pippenger bucket.
//!
//! Single verification, for the few signatures a failed batch is narrowed down to, is
//! [`super::zip215::verify_one`]: one definition of validity.

mod field;
mod msm;
mod point;
mod sha512;

use std::ops::Range;
use std::sync::OnceLock;

use curve25519_dalek::constants::ED25519_BASEPOINT_COMPRESSED;
use curve25519_dalek::scalar::Scalar;
use rustc_hash::FxHashMap;

use super::Keys;
use super::zip215::{self, Coefficients, SigItem, challenge};
pub use msm::Row;

/// Whether this CPU runs this backend.
pub fn available() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
}

/// [`zip215::verify_batch`] on AVX-512F: each signature gets the result
/// [`zip215::verify_one`] gives it.
///
/// # Panics
/// If the CPU lacks AVX-512F ([`available`]).
pub fn verify_batch(items: &[SigItem], keys: &Keys) -> Vec<bool> {
    assert!(available(), "the AVX-512 backend needs a CPU with AVX-512F");
    // SAFETY: the CPU has AVX-512F, checked above.
    unsafe { verify_batch_avx512(items, keys) }
}

/// A signature whose parts all decoded.
struct Candidate {
    item: usize,
    /// Which distinct key of the batch signed it.
    key: u32,
    /// Its `R`'s table row.
    r_row: u32,
    s: Scalar,
    k: Scalar,
}

/// Table rows 0 and 1: the identity and the base point.
const BASEPOINT_ROW: u32 = 1;

#[target_feature(enable = "avx512f")]
fn verify_batch_avx512(items: &[SigItem], keys: &Keys) -> Vec<bool> {
    let mut table: Vec<Row> = Vec::with_capacity(2 + 2 * items.len());
    table.push(msm::IDENTITY_ROW);
    table.push(basepoint_row());

    // Keys: from the cache, or decompressed eight at a time and cached. A key signs only
    // once per batch in the table, whatever the number of its signatures.
    let mut key_slot: FxHashMap<&[u8; 32], Option<u32>> = FxHashMap::default();
    let mut key_rows: Vec<u32> = Vec::new();
    let mut missing: Vec<&[u8; 32]> = Vec::new();
    for item in items {
        if key_slot.contains_key(item.public_key) {
            continue;
        }
        let slot = match keys.rows.get(item.public_key) {
            Some(row) => {
                table.push(row);
                key_rows.push(table.len() as u32 - 1);
                Some(key_rows.len() as u32 - 1)
            }
            None => {
                missing.push(item.public_key);
                None
            }
        };
        key_slot.insert(item.public_key, slot);
    }
    for chunk in missing.chunks(8) {
        let decoded = decompress_rows(chunk.iter().copied());
        for (key, row) in chunk.iter().zip(decoded) {
            if let Some(row) = row {
                keys.rows.insert(key, row);
                table.push(row);
                key_rows.push(table.len() as u32 - 1);
                key_slot.insert(key, Some(key_rows.len() as u32 - 1));
            }
        }
    }

    // Each `R`, eight at a time, for the signatures whose `s` and key decoded.
    let mut pending: Vec<(usize, u32, Scalar)> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let s_bytes: [u8; 32] = item.signature[32..].try_into().expect("32 bytes");
        let s = Option::<Scalar>::from(Scalar::from_canonical_bytes(s_bytes));
        if let (Some(s), Some(Some(key))) = (s, key_slot.get(item.public_key)) {
            pending.push((i, *key, s));
        }
    }
    let mut candidates: Vec<Candidate> = Vec::with_capacity(pending.len());
    for chunk in pending.chunks(8) {
        let decoded =
            decompress_rows(chunk.iter().map(|&(i, _, _)| {
                <&[u8; 32]>::try_from(&items[i].signature[..32]).expect("32 bytes")
            }));
        for (&(i, key, s), row) in chunk.iter().zip(decoded) {
            if let Some(row) = row {
                table.push(row);
                candidates.push(Candidate {
                    item: i,
                    key,
                    r_row: table.len() as u32 - 1,
                    s,
                    k: Scalar::ZERO,
                });
            }
        }
    }
    for chunk in candidates.chunks_mut(8) {
        challenges(items, chunk);
    }

    let mut coefficients = Coefficients::new();
    let z: Vec<Scalar> = candidates.iter().map(|_| coefficients.next()).collect();
    // Closures inherit the function's target features.
    let batch =
        |range: Range<usize>| batch_holds(&candidates[range.clone()], &z[range], &key_rows, &table);
    let single = |c: usize| zip215::verify_one(&items[candidates[c].item], &keys.points);
    let holds = zip215::settle(candidates.len(), &batch, &single);
    let mut valid = vec![false; items.len()];
    for (c, h) in candidates.iter().zip(holds) {
        valid[c.item] = h;
    }
    valid
}

/// The batch equation over `candidates`:
/// `[8](−(Σ zᵢsᵢ)B + Σ zᵢRᵢ + Σ (zᵢkᵢ)Aᵢ) = 0`, with the `zᵢkᵢ` summed per distinct key.
#[target_feature(enable = "avx512f")]
fn batch_holds(candidates: &[Candidate], z: &[Scalar], key_rows: &[u32], table: &[Row]) -> bool {
    let mut b = Scalar::ZERO;
    let mut key_coeff: FxHashMap<u32, Scalar> = FxHashMap::default();
    let mut terms = Vec::with_capacity(2 * candidates.len() + 1);
    for (c, z) in candidates.iter().zip(z) {
        b -= z * c.s;
        *key_coeff.entry(c.key).or_insert(Scalar::ZERO) += z * c.k;
        terms.push(msm::Term {
            scalar: z.to_bytes(),
            row: c.r_row,
            bits: 128,
        });
    }
    terms.push(msm::Term {
        scalar: b.to_bytes(),
        row: BASEPOINT_ROW,
        bits: 253,
    });
    for (key, coeff) in key_coeff {
        terms.push(msm::Term {
            scalar: coeff.to_bytes(),
            row: key_rows[key as usize],
            bits: 253,
        });
    }
    msm::is_identity_times_8(&terms, table)
}

/// Sets `k = SHA-512(R ‖ A ‖ M) mod ℓ` for up to eight candidates: eight at a time when all
/// messages are 32 bytes (transaction ids), one at a time otherwise.
#[target_feature(enable = "avx512f")]
fn challenges(items: &[SigItem], chunk: &mut [Candidate]) {
    if chunk.iter().all(|c| items[c.item].message.len() == 32) {
        let mut blocks = [[0u8; 96]; 8];
        for (block, c) in blocks.iter_mut().zip(chunk.iter()) {
            let item = &items[c.item];
            block[..32].copy_from_slice(&item.signature[..32]);
            block[32..64].copy_from_slice(item.public_key);
            block[64..].copy_from_slice(item.message);
        }
        let digests = sha512::sha512_96(&blocks);
        for (c, digest) in chunk.iter_mut().zip(digests) {
            c.k = Scalar::from_bytes_mod_order_wide(&digest);
        }
    } else {
        for c in chunk {
            let item = &items[c.item];
            c.k = challenge(&item.signature[..32], item.public_key, item.message);
        }
    }
}

/// The table rows of up to eight encoded points, `None` for an encoding that is no point.
#[target_feature(enable = "avx512f")]
fn decompress_rows<'a>(encodings: impl Iterator<Item = &'a [u8; 32]>) -> Vec<Option<Row>> {
    let mut lanes = [[0u8; 32]; 8];
    let mut n = 0;
    for (lane, e) in lanes.iter_mut().zip(encodings) {
        *lane = *e;
        n += 1;
    }
    let (is_point, x, y) = point::decompress(&lanes);
    let rows = msm::rows(&point::affine_niels(&x, &y));
    (0..n)
        .map(|lane| (is_point >> lane & 1 == 1).then_some(rows[lane]))
        .collect()
}

/// The base point's table row, computed once.
fn basepoint_row() -> Row {
    static ROW: OnceLock<Row> = OnceLock::new();
    *ROW.get_or_init(|| {
        // SAFETY: only `verify_batch_avx512` calls this, on a CPU with AVX-512F.
        let rows = unsafe { decompress_rows(std::iter::once(&ED25519_BASEPOINT_COMPRESSED.0)) };
        rows[0].expect("the base point decompresses")
    })
}

#[cfg(test)]
mod tests;
