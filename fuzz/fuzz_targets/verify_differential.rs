//! Signature verification, differentially: every batch backend against the ZIP-215 reference
//! (issue 20): dalek, and the lane backend on AVX2, on AVX-512F and on AVX-512 IFMA (issue 26;
//! on IFMA hardware only). A signature one backend accepts and another rejects forks the
//! validators of one CPU kind from the others.
//!
//! `cargo +nightly fuzz run verify_differential`
//! On a CPU without AVX-512F, with the AVX-512 backend on its scalar emulation:
//! `cargo +nightly fuzz run --features emulated-avx512 verify_differential`
//!
//! The input describes a batch: a seed and a size (1 to 64, or now and then in the
//! thousands) from which real ed25519-dalek signatures are made by a pool of up to 16 keys
//! (so keys repeat), then a few edits that craft the cases ZIP-215 has to decide: torsion in
//! `R` or `A` (mixed order), small-order `R` and `A` with every canonical and non-canonical
//! encoding (the identity, `x = 0` with the sign bit set, `y ≥ p`), non-canonical `s`
//! (`s + kℓ`, high bits set), raw fuzzer bytes for `A`, `R` or `s`, bit flips, duplicated
//! signatures, other keys, other message lengths. Crafted cases are valid or not by
//! construction; the reference decides.
//!
//! Holds, per signature: `crypto::verify_batch` on every backend this build runs (with a cold
//! and then a warm key cache) gives exactly `zip215::verify_one`'s result, which is
//! ed25519-zebra's (an independent ZIP-215 implementation on curve25519-dalek 4).

#![no_main]
#![allow(non_snake_case)] // A, R, B: the names the equations use

use std::sync::LazyLock;

use arbitrary::{Result, Unstructured};
use curve25519_dalek::constants::{ED25519_BASEPOINT_POINT as B, EIGHT_TORSION};
use curve25519_dalek::edwards::CompressedEdwardsY;
use curve25519_dalek::scalar::Scalar;
use ed25519_dalek::{Signer, SigningKey};
use libfuzzer_sys::fuzz_target;
use sha2::{Digest, Sha512};
use tally_chain::crypto::{self, Backend, KeyCache, Keys, Need, SigItem, zip215};

/// Batch sizes the fuzzer picks most of the time: every size up to 64 (a few SIMD groups of
/// eight, and the bisection's thresholds at 16 and below).
const SMALL_BATCH: usize = 64;
/// The rare large batches: thousands, as a block gives, bounded so that an execution stays
/// near a second (each signature is also checked alone twice: the reference and zebra).
const LARGE_BATCH: std::ops::RangeInclusive<usize> = 1_000..=3_000;
/// Distinct signing keys at most: few enough that keys repeat within a batch.
const SIGNERS: u8 = 16;
/// Edits at most in one batch (one size byte in 256 asks for a large batch), so that most
/// signatures of a large batch stay real, valid ones.
const EDITS: usize = 64;
/// Cached keys per backend, as `Keys::shared` would have them (fewer: a batch repeats them).
const CACHE: usize = 64;

/// ℓ, the order of the prime subgroup, little-endian.
const ELL: [u8; 32] = [
    0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde, 0x14,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
];

/// Encodings ZIP-215 must accept as points although they are unusual: every small-order
/// point, canonical (the 8 torsion points, the identity among them) and not (`x = 0` with
/// the sign bit set, `y + p`), then large-order points encoded as `y + p`, either sign.
struct Encodings {
    small: Vec<[u8; 32]>,
    large_noncanonical: Vec<[u8; 32]>,
}

static ENCODINGS: LazyLock<Encodings> = LazyLock::new(|| {
    let mut small: Vec<[u8; 32]> = EIGHT_TORSION.iter().map(|p| p.compress().0).collect();
    let mut large_noncanonical = Vec::new();
    let mut candidates = Vec::new();
    // y = 1 (the identity) and y = −1: x = 0, so the sign bit is meaningless, and set.
    let mut e = [0u8; 32];
    e[0] = 1;
    e[31] = 0x80;
    candidates.push(e);
    let mut e = [0xffu8; 32];
    e[0] = 0xec;
    candidates.push(e);
    // y + p for every y whose y + p fits in 255 bits (y ≤ 18), either sign.
    for y in 0u8..19 {
        for sign in [0u8, 0x80] {
            let mut e = [0xffu8; 32];
            e[0] = 0xed + y;
            e[31] = 0x7f | sign;
            candidates.push(e);
        }
    }
    for e in candidates {
        if let Some(p) = CompressedEdwardsY(e).decompress() {
            assert_ne!(p.compress().0, e, "non-canonical");
            if p.is_small_order() {
                small.push(e);
            } else {
                large_noncanonical.push(e);
            }
        }
    }
    assert_eq!(small.len(), 14, "ed25519-zebra's 14 small-order encodings");
    Encodings {
        small,
        large_noncanonical,
    }
});

/// One signature as received.
#[derive(Clone)]
struct Entry {
    key: [u8; 32],
    sig: [u8; 64],
    msg: Vec<u8>,
    /// Which signer made it (its secret scalar is `signers[signer].1`).
    signer: usize,
    /// What was done to it last, for the failure message.
    what: &'static str,
}

impl Entry {
    fn item(&self) -> SigItem<'_> {
        SigItem {
            public_key: &self.key,
            signature: &self.sig,
            message: &self.msg,
        }
    }
}

fn k_of(R: &[u8], A: &[u8; 32], msg: &[u8]) -> Scalar {
    Scalar::from_bytes_mod_order_wide(
        &Sha512::new()
            .chain_update(R)
            .chain_update(A)
            .chain_update(msg)
            .finalize()
            .into(),
    )
}

/// A signature by secret `a` under key encoding `A` (which must decode to `aB` plus torsion)
/// with nonce encoding `R` (`rB` plus torsion): `s = r + k·a`. Valid under ZIP-215.
fn forge(a: Scalar, A: &[u8; 32], r: Scalar, R: [u8; 32], msg: &[u8]) -> [u8; 64] {
    let s = r + k_of(&R, A, msg) * a;
    let mut sig = [0u8; 64];
    sig[..32].copy_from_slice(&R);
    sig[32..].copy_from_slice(&s.to_bytes());
    sig
}

/// A nonce from two of the fuzzer's bytes (and where it is used, so that two edits with the
/// same bytes still differ): inputs stay short, and short inputs are what libFuzzer tries.
fn scalar(u: &mut Unstructured, at: usize) -> Result<Scalar> {
    let v: u16 = u.arbitrary()?;
    Ok(Scalar::from_bytes_mod_order_wide(
        &Sha512::new()
            .chain_update(b"nonce")
            .chain_update(v.to_le_bytes())
            .chain_update((at as u64).to_le_bytes())
            .finalize()
            .into(),
    ))
}

/// `s + m·ℓ` as 32 bytes (the same scalar, non-canonical), or `None` past 2²⁵⁶.
fn plus_ell(s: &[u8], m: u8) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    let mut carry = 0u32;
    for i in 0..32 {
        let v = s[i] as u32 + ELL[i] as u32 * m as u32 + carry;
        out[i] = v as u8;
        carry = v >> 8;
    }
    (carry == 0).then_some(out)
}

/// One edit of `entries[at]`, chosen by the fuzzer.
fn edit(
    u: &mut Unstructured,
    entries: &mut [Entry],
    at: usize,
    signers: &[(SigningKey, Scalar, [u8; 32])],
) -> Result<()> {
    let enc = &*ENCODINGS;
    let n = entries.len();
    let e = &mut entries[at];
    let (_, a, A) = &signers[e.signer];
    let (a, A) = (*a, *A);
    match u.int_in_range(0u8..=17)? {
        0 => {
            // Torsion in R: valid.
            let T = EIGHT_TORSION[u.choose_index(8)?];
            let r = scalar(u, at)?;
            e.sig = forge(a, &A, r, (B * r + T).compress().0, &e.msg);
            e.what = "torsion in R";
        }
        1 => {
            // A mixed-order key: aB plus a torsion point. Valid.
            let T = EIGHT_TORSION[1 + u.choose_index(7)?];
            let r = scalar(u, at)?;
            e.key = (B * a + T).compress().0;
            e.sig = forge(a, &e.key, r, (B * r).compress().0, &e.msg);
            e.what = "torsion in A";
        }
        2 => {
            // Small-order R, any encoding, s = k·a: valid (and k hashes R's bytes as given).
            let R = enc.small[u.choose_index(enc.small.len())?];
            e.sig = forge(a, &A, Scalar::ZERO, R, &e.msg);
            e.what = "small-order R";
        }
        3 => {
            // Small-order A, any encoding, R = rB, s = r (+ d): valid iff d = 0.
            e.key = enc.small[u.choose_index(enc.small.len())?];
            let r = scalar(u, at)?;
            let d = Scalar::from(u.int_in_range(0u8..=2)?);
            e.sig[..32].copy_from_slice(&(B * r).compress().0);
            e.sig[32..].copy_from_slice(&(r + d).to_bytes());
            e.what = "small-order A";
        }
        4 => {
            // Small-order A and R: valid iff s = 0.
            e.key = enc.small[u.choose_index(enc.small.len())?];
            e.sig[..32].copy_from_slice(&enc.small[u.choose_index(enc.small.len())?]);
            let s = if u.arbitrary()? {
                Scalar::ZERO
            } else {
                scalar(u, at)?
            };
            e.sig[32..].copy_from_slice(&s.to_bytes());
            e.what = "small-order A and R";
        }
        5 => {
            // s + m·ℓ: the same scalar, non-canonical. Invalid.
            if let Some(s) = plus_ell(&e.sig[32..], u.int_in_range(1u8..=15)?) {
                e.sig[32..].copy_from_slice(&s);
            }
            e.what = "s + mℓ";
        }
        6 => {
            // High bits of s set.
            e.sig[63] |= u.int_in_range(1u8..=0xff)? << 4;
            e.what = "s with high bits set";
        }
        7 => {
            // s from the edges: 0, ℓ − 1, ℓ, ℓ + 1, 2²⁵⁶ − 1, 2²⁵³ − 1.
            let mut s = [0u8; 32];
            match u.int_in_range(0u8..=5)? {
                0 => {}
                1 => s = (-Scalar::ONE).to_bytes(),
                2 => s = ELL,
                3 => s = plus_ell(&Scalar::ONE.to_bytes(), 1).expect("ℓ + 1 fits"),
                4 => s = [0xff; 32],
                _ => {
                    s = [0xff; 32];
                    s[31] = 0x1f;
                }
            }
            e.sig[32..].copy_from_slice(&s);
            e.what = "s at an edge";
        }
        8 => {
            // A large-order point encoded as y + p, as the key or as R.
            let p = enc.large_noncanonical[u.choose_index(enc.large_noncanonical.len())?];
            if u.arbitrary()? {
                e.key = p;
                e.what = "non-canonical large-order A";
            } else {
                e.sig[..32].copy_from_slice(&p);
                e.what = "non-canonical large-order R";
            }
        }
        9 => {
            // Raw bytes for A, R or s: decompression and the canonical check on anything.
            let bytes: [u8; 32] = u.arbitrary()?;
            match u.int_in_range(0u8..=2)? {
                0 => e.key = bytes,
                1 => e.sig[..32].copy_from_slice(&bytes),
                _ => e.sig[32..].copy_from_slice(&bytes),
            }
            e.what = "raw bytes";
        }
        10 => {
            // Raw y with a chosen sign: 0 ≤ y < 2²⁵⁵ near p or near 0.
            let mut bytes = [0u8; 32];
            let low: u8 = u.arbitrary()?;
            if u.arbitrary()? {
                bytes = [0xff; 32];
                bytes[31] = 0x7f;
                bytes[0] = 0xd0 | (low & 0x3f); // p − 29 ..= 2²⁵⁵ − 1
            } else {
                bytes[0] = low;
            }
            bytes[31] |= if u.arbitrary()? { 0x80 } else { 0 };
            if u.arbitrary()? {
                e.key = bytes;
            } else {
                e.sig[..32].copy_from_slice(&bytes);
            }
            e.what = "y near 0 or p";
        }
        11 => {
            // One bit flipped, in the key, the signature or the message.
            let bit = u.int_in_range(0usize..=8 * (32 + 64 + e.msg.len()) - 1)?;
            let (byte, mask) = (bit / 8, 1u8 << (bit % 8));
            match byte {
                0..32 => e.key[byte] ^= mask,
                32..96 => e.sig[byte - 32] ^= mask,
                _ => e.msg[byte - 96] ^= mask,
            }
            e.what = "bit flipped";
        }
        12 => {
            // The same signature as another entry: duplicates in one batch.
            let from = u.choose_index(n)?;
            entries[at] = entries[from].clone();
            entries[at].what = "duplicate";
        }
        13 => {
            // Another signer's key: invalid (unless the signer is the same).
            e.key = signers[u.choose_index(signers.len())?].2;
            e.what = "another key";
        }
        14 => {
            // Another message length, signed properly: the 8-lane SHA-512 takes only 32 bytes.
            let len = u.int_in_range(0usize..=96)?.min(u.len());
            e.msg = u.bytes(len)?.to_vec();
            e.sig = signers[e.signer].0.sign(&e.msg).to_bytes();
            e.what = "other message length";
        }
        15 => {
            // Identity as R (s = k·a) or as A (s = r), with the sign bit set or not: valid.
            let mut identity = [0u8; 32];
            identity[0] = 1;
            identity[31] = if u.arbitrary()? { 0x80 } else { 0 };
            if u.arbitrary()? {
                e.sig = forge(a, &A, Scalar::ZERO, identity, &e.msg);
                e.what = "identity R";
            } else {
                e.key = identity;
                let r = scalar(u, at)?;
                e.sig[..32].copy_from_slice(&(B * r).compress().0);
                e.sig[32..].copy_from_slice(&r.to_bytes());
                e.what = "identity A";
            }
        }
        16 => {
            // A signature over a message it does not sign.
            let mut msg = u.bytes(u.len().min(32))?.to_vec();
            msg.resize(32, 0);
            e.msg = msg;
            e.what = "other message";
        }
        _ => {
            // Mixed-order key and torsion in R at once, s maybe off by a multiple of the
            // torsion's order: valid only if s is unchanged.
            let (TA, TR) = (
                EIGHT_TORSION[u.choose_index(8)?],
                EIGHT_TORSION[u.choose_index(8)?],
            );
            let r = scalar(u, at)?;
            e.key = (B * a + TA).compress().0;
            e.sig = forge(a, &e.key, r, (B * r + TR).compress().0, &e.msg);
            if u.arbitrary()? {
                let s = Scalar::from_canonical_bytes(e.sig[32..].try_into().expect("32 bytes"))
                    .expect("canonical");
                e.sig[32..].copy_from_slice(&(s + Scalar::from(8u8)).to_bytes());
            }
            e.what = "torsion in A and R";
        }
    }
    Ok(())
}

/// The batch the input describes: a byte for the size, one for the number of signers, two
/// of seed, then edits (three to six bytes each, raw points 32) until the input runs out.
fn batch(data: &[u8]) -> Result<Vec<Entry>> {
    let mut u = Unstructured::new(data);
    let selector: u8 = u.arbitrary()?;
    let size = if selector == u8::MAX {
        u.int_in_range(LARGE_BATCH)?
    } else {
        1 + selector as usize % SMALL_BATCH
    };
    let signer_count = 1 + (u.arbitrary::<u8>()? % SIGNERS) as usize;
    let seed = u64::from(u.arbitrary::<u16>()?);
    let signers: Vec<(SigningKey, Scalar, [u8; 32])> = (0..signer_count)
        .map(|i| {
            let key = crypto::derived_key(seed, i as u64);
            let (a, A) = (key.to_scalar(), key.verifying_key().to_bytes());
            (key, a, A)
        })
        .collect();
    let mut entries: Vec<Entry> = (0..size)
        .map(|i| {
            let signer = (seed
                .wrapping_add(i as u64)
                .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                >> 32) as usize
                % signer_count;
            let msg = Sha512::new()
                .chain_update(seed.to_le_bytes())
                .chain_update((i as u64).to_le_bytes())
                .finalize()[..32]
                .to_vec();
            let (key, _, A) = &signers[signer];
            Entry {
                key: *A,
                sig: key.sign(&msg).to_bytes(),
                msg,
                signer,
                what: "valid",
            }
        })
        .collect();
    let mut edits = 0;
    while edits < EDITS && !u.is_empty() {
        let at = u.choose_index(size)?;
        edit(&mut u, &mut entries, at, &signers)?;
        edits += 1;
    }
    Ok(entries)
}

fn zebra(e: &Entry) -> bool {
    ed25519_zebra::VerificationKey::try_from(e.key)
        .and_then(|k| k.verify(&ed25519_zebra::Signature::from_bytes(&e.sig), &e.msg))
        .is_ok()
}

fuzz_target!(|data: &[u8]| {
    let Ok(entries) = batch(data) else { return };
    let items: Vec<SigItem> = entries.iter().map(Entry::item).collect();
    let uncached = KeyCache::new(0);
    let reference: Vec<bool> = items
        .iter()
        .map(|i| zip215::verify_one(i, &uncached))
        .collect();
    for (i, e) in entries.iter().enumerate() {
        assert_eq!(
            zebra(e),
            reference[i],
            "signature {i} ({}): ed25519-zebra and zip215::verify_one disagree",
            e.what
        );
    }
    for backend in Backend::ALL.into_iter().filter(|b| b.available()) {
        let keys = Keys::new(CACHE);
        for cache in ["cold", "warm"] {
            let got = crypto::verify_batch(&items, backend, &keys, Need::Each);
            for (i, e) in entries.iter().enumerate() {
                assert_eq!(
                    got[i],
                    reference[i],
                    "signature {i} of {} ({}): {backend} batch with a {cache} key cache \
                     disagrees with zip215::verify_one",
                    entries.len(),
                    e.what
                );
            }
            // Admission's check: the same results up to the first invalid signature, and
            // that one invalid.
            let first = crypto::verify_batch(&items, backend, &keys, Need::UpToFirstInvalid);
            let end = reference.iter().position(|v| !v).map_or(items.len(), |i| i + 1);
            assert_eq!(
                first[..end],
                reference[..end],
                "{backend} batch up to the first invalid signature, {cache} key cache, \
                 disagrees with zip215::verify_one"
            );
        }
    }
    // One key cache for every lane backend in turn, as a node has: each reads the rows the
    // others wrote (the IFMA backend pairs the ten-limb layout's halves as it gathers them).
    let shared = Keys::new(CACHE);
    for backend in Backend::ALL.into_iter().filter(|b| b.available()) {
        let got = crypto::verify_batch(&items, backend, &shared, Need::Each);
        assert_eq!(
            got, reference,
            "{backend} batch with a key cache the other backends filled disagrees with \
             zip215::verify_one"
        );
    }
});
