//! Ed25519 verification under the ZIP-215 rules, on curve25519-dalek 5.
//!
//! ZIP-215 (<https://zips.z.cash/zip-0215>) fixes which signatures are valid so that every
//! implementation, batched or not, agrees:
//! - `A` (the key) and `R` (the first half of the signature) are decoded as curve25519-dalek's
//!   `decompress` does: any point, including small-order ones and non-canonical encodings
//!   (`y ≥ p`, or `x = 0` with the sign bit set); bytes that are no point are invalid;
//! - `s` (the second half) must be canonical, `s < ℓ`;
//! - `k = SHA-512(R ‖ A ‖ M) mod ℓ` over the bytes as given;
//! - the signature is valid iff `[8]([s]B − R − [k]A) = 0` (the *cofactored* equation).
//!
//! Because the equation is cofactored, a torsion component in `R` or `A` contributes nothing,
//! so a random linear combination of valid equations is again valid, and a batch fails only
//! if some signature in it is invalid (up to a 2⁻¹²⁸ chance of a false accept, which no signer
//! can steer because the coefficients are secret and random). With the usual cofactorless
//! equation, a small-order component could pass or fail depending on the coefficients, and
//! two nodes batching differently could disagree.
//!
//! These are exactly ed25519-zebra's rules; the tests check this implementation against it.

#![allow(non_snake_case)] // A, R, B: the names the equations use

use std::collections::HashMap;
use std::iter::once;
use std::ops::Range;

use curve25519_dalek::constants::ED25519_BASEPOINT_POINT;
use curve25519_dalek::edwards::{CompressedEdwardsY, EdwardsPoint};
use curve25519_dalek::scalar::Scalar;
use curve25519_dalek::traits::{IsIdentity, VartimeMultiscalarMul};
use rand_core::{OsRng, RngCore};
use sha2::{Digest, Sha512};

use super::key_cache::KeyCache;

/// A failed batch at or below this size is settled one signature at a time. A single check
/// costs about five batched signatures (benches/verify.rs: 60-75 µs against 13-15 µs on one
/// thread), but a batch check also has a fixed cost, about 250 point doublings to combine
/// its windows, which outweighs the singles it saves below about 16 signatures.
const BISECT_MIN: usize = 16;

/// One signature to check: a public key, a signature and the signed message, all as received.
#[derive(Clone, Copy, Debug)]
pub struct SigItem<'a> {
    /// The 32-byte encoding of the public key `A`.
    pub public_key: &'a [u8; 32],
    /// `R ‖ s`: 32 bytes of point, 32 of scalar.
    pub signature: &'a [u8; 64],
    /// What was signed.
    pub message: &'a [u8],
}

/// A signature whose parts all decoded, ready for the verification equation.
struct Parsed<'a> {
    key: &'a [u8; 32],
    A: EdwardsPoint,
    R: EdwardsPoint,
    s: Scalar,
    k: Scalar,
}

/// Decodes `item`'s parts under ZIP-215, or `None` if one of them is invalid (which makes the
/// signature invalid whatever the equation would say).
fn parse<'a>(item: &SigItem<'a>, keys: &KeyCache) -> Option<Parsed<'a>> {
    let (r_bytes, s_bytes) = item.signature.split_at(32);
    let s = Option::from(Scalar::from_canonical_bytes(
        s_bytes.try_into().expect("32 bytes"),
    ))?;
    let A = keys.decompress(item.public_key)?;
    let R = CompressedEdwardsY(r_bytes.try_into().expect("32 bytes")).decompress()?;
    let k = challenge(r_bytes, item.public_key, item.message);
    Some(Parsed {
        key: item.public_key,
        A,
        R,
        s,
        k,
    })
}

/// `k = SHA-512(R ‖ A ‖ M) mod ℓ`, over the encodings as received (not re-encoded points).
pub(super) fn challenge(r_bytes: &[u8], key: &[u8; 32], message: &[u8]) -> Scalar {
    let hash = Sha512::new()
        .chain_update(r_bytes)
        .chain_update(key)
        .chain_update(message)
        .finalize();
    Scalar::from_bytes_mod_order_wide(&hash.into())
}

/// `[8]([s]B − R − [k]A) = 0` for one signature.
fn single_holds(p: &Parsed) -> bool {
    let sB_minus_kA = EdwardsPoint::vartime_double_scalar_mul_basepoint(&p.k, &-p.A, &p.s);
    (sB_minus_kA - p.R).mul_by_cofactor().is_identity()
}

/// Checks one signature under ZIP-215, decompressing its key through `keys`.
pub fn verify_one(item: &SigItem, keys: &KeyCache) -> bool {
    parse(item, keys).is_some_and(|p| single_holds(&p))
}

/// How much of a batch's outcome its caller needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// Every signature's result: a block, where an invalid signature rejects only its own
    /// transaction.
    Each,
    /// Whether every signature is valid, and if not, which is the first invalid one:
    /// admission, where one invalid signature refuses a whole bundle. Each signature before
    /// the first invalid one is valid, that one invalid, and every one after it reported
    /// invalid without being checked. A failed batch then costs at most about two batch
    /// checks of it and 16 single checks (`BISECT_MIN`), where [`Need::Each`] may check every
    /// signature alone (about five batched signatures' work each). Bundles of invalid
    /// signatures, which anyone can send for free, then cost about twice what a valid one
    /// costs to admit, not eight times (`cargo bench --bench verify -- "batch 2500"`, one
    /// thread, AVX2: 60.5 ms valid, 140.8 ms every signature invalid, 508 ms settling each).
    UpToFirstInvalid,
}

/// Checks many signatures under ZIP-215 with one batch equation, and gives each signature
/// the result [`verify_one`] gives it (with [`Need::UpToFirstInvalid`], up to the first
/// invalid one). A batch that fails is bisected to find the invalid signatures, so one bad
/// signature costs a few more batch checks, not a single check of every signature.
pub fn verify_batch(items: &[SigItem], keys: &KeyCache, need: Need) -> Vec<bool> {
    let mut valid = vec![false; items.len()];
    let (mut parsed, mut index) = (Vec::with_capacity(items.len()), Vec::new());
    for (i, item) in items.iter().enumerate() {
        // A part that does not decode settles its signature as invalid here, outside the
        // equation, so it cannot spoil the batch.
        match parse(item, keys) {
            Some(p) => {
                parsed.push(p);
                index.push(i);
            }
            // The first invalid signature: nothing after it is needed.
            None if need == Need::UpToFirstInvalid => break,
            None => {}
        }
    }
    let mut coefficients = Coefficients::new();
    let z: Vec<Scalar> = parsed.iter().map(|_| coefficients.next()).collect();
    let batch = |r: Range<usize>| batch_holds(&parsed[r.clone()], &z[r]);
    let single = |i: usize| single_holds(&parsed[i]);
    for (i, h) in index
        .into_iter()
        .zip(settle(parsed.len(), &batch, &single, need))
    {
        valid[i] = h;
    }
    valid
}

/// The length of the run of signatures that decoded, from the first: `index` lists the
/// items that decoded, in order, so the first item missing from it is the first that did
/// not. With [`Need::UpToFirstInvalid`] only those before it need the equation.
pub(super) fn decoded_prefix(index: impl IntoIterator<Item = usize>) -> usize {
    index
        .into_iter()
        .enumerate()
        .take_while(|&(i, item)| i == item)
        .count()
}

/// Whether the batch equation alone holds for `items`, all of which must decode: no
/// bisection and no single checks behind it, for tests of the equation itself.
#[cfg(test)]
pub(super) fn batch_equation_holds(items: &[SigItem], keys: &KeyCache) -> bool {
    let parsed: Vec<Parsed> = items
        .iter()
        .map(|i| parse(i, keys).expect("every signature decodes"))
        .collect();
    let mut coefficients = Coefficients::new();
    let z: Vec<Scalar> = parsed.iter().map(|_| coefficients.next()).collect();
    batch_holds(&parsed, &z)
}

/// Which of `len` signatures are valid, given `batch` (does the batch equation hold for
/// this range of them, with fixed coefficients) and `single` (is this one valid), as far as
/// `need` asks.
pub(super) fn settle(
    len: usize,
    batch: &dyn Fn(Range<usize>) -> bool,
    single: &dyn Fn(usize) -> bool,
    need: Need,
) -> Vec<bool> {
    let mut holds = vec![false; len];
    if batch(0..len) {
        holds.fill(true);
    } else {
        match need {
            Need::Each => settle_failed(0..len, batch, single, &mut holds),
            Need::UpToFirstInvalid => {
                let first = first_invalid(len, batch, single);
                holds[..first].fill(true);
            }
        }
    }
    holds
}

/// The first invalid signature of `len`, whose batch failed: the left half's check says
/// which half holds it (the halves' checks add up to the whole's, so if the left one holds,
/// the right one fails). One check of half the range a level, about one more batch check of
/// the whole in all, then [`BISECT_MIN`] single checks at most. Should those all hold,
/// which the sum makes impossible, every signature is checked alone, as [`Need::Each`]
/// would; `len` if all of them hold.
fn first_invalid(
    len: usize,
    batch: &dyn Fn(Range<usize>) -> bool,
    single: &dyn Fn(usize) -> bool,
) -> usize {
    let mut range = 0..len;
    while range.len() > BISECT_MIN {
        let mid = range.start + range.len() / 2;
        range = match batch(range.start..mid) {
            true => mid..range.end,
            false => range.start..mid,
        };
    }
    range
        .find(|&i| !single(i))
        .unwrap_or_else(|| (0..len).find(|&i| !single(i)).unwrap_or(len))
}

/// Finds which signatures of a batch whose equation failed are valid. The batch equation is
/// a sum over its signatures, so with the same coefficients the two halves' checks add up to
/// the whole's: when the whole fails, at least one half fails, and only a failed half needs
/// looking into. One invalid signature is found with two batch checks per level. When both
/// halves fail, both are bisected in turn, down to [`MAX_SPLITS`] such splits deep (a few
/// invalid signatures cost a few bisections, not a single check of every signature); deeper
/// than that, invalid signatures are everywhere, and single checks bound the work at
/// [`MAX_SPLITS`] + 2 passes of batch work over the batch plus one single check a signature.
fn settle_failed(
    range: Range<usize>,
    batch: &dyn Fn(Range<usize>) -> bool,
    single: &dyn Fn(usize) -> bool,
    holds: &mut [bool],
) {
    bisect(range, 0, batch, single, holds)
}

/// Times a failed batch may split into two failed halves that are both bisected further:
/// up to 2³ = 8 independent searches, enough for a few invalid signatures in a block.
const MAX_SPLITS: u32 = 3;

fn bisect(
    range: Range<usize>,
    splits: u32,
    batch: &dyn Fn(Range<usize>) -> bool,
    single: &dyn Fn(usize) -> bool,
    holds: &mut [bool],
) {
    let each_alone = |range: Range<usize>, holds: &mut [bool]| {
        for i in range {
            holds[i] = single(i);
        }
    };
    if range.len() <= BISECT_MIN {
        return each_alone(range, holds);
    }
    let mid = range.start + range.len() / 2;
    let (left, right) = (range.start..mid, mid..range.end);
    match (batch(left.clone()), batch(right.clone())) {
        (true, false) => {
            holds[left].fill(true);
            bisect(right, splits, batch, single, holds);
        }
        (false, true) => {
            holds[right].fill(true);
            bisect(left, splits, batch, single, holds);
        }
        (false, false) if splits < MAX_SPLITS => {
            bisect(left, splits + 1, batch, single, holds);
            bisect(right, splits + 1, batch, single, holds);
        }
        // Invalid signatures everywhere; or both halves hold, which the sum makes
        // impossible: either way, each signature alone decides.
        _ => each_alone(range, holds),
    }
}

/// `[8](−(Σ zᵢsᵢ)B + Σ zᵢRᵢ + Σ (zᵢkᵢ)Aᵢ) = 0`, with the `zᵢkᵢ` summed per distinct key so
/// that a key signing many times is one point of the multiscalar multiplication.
fn batch_holds(parsed: &[Parsed], z: &[Scalar]) -> bool {
    let mut b = Scalar::ZERO;
    // Keyed by bytes a signer chooses: std's randomly seeded hasher, so that no one can send
    // keys that collide in it (FxHash has no such defence).
    let mut by_key: HashMap<&[u8; 32], usize> = HashMap::with_capacity(parsed.len());
    let (mut a_points, mut a_coeffs) = (Vec::new(), Vec::new());
    for (p, z) in parsed.iter().zip(z) {
        b -= z * p.s;
        let j = *by_key.entry(p.key).or_insert_with(|| {
            a_points.push(p.A);
            a_coeffs.push(Scalar::ZERO);
            a_points.len() - 1
        });
        a_coeffs[j] += z * p.k;
    }
    let check = EdwardsPoint::vartime_multiscalar_mul(
        once(&b).chain(z).chain(&a_coeffs),
        once(&ED25519_BASEPOINT_POINT)
            .chain(parsed.iter().map(|p| &p.R))
            .chain(&a_points),
    );
    check.mul_by_cofactor().is_identity()
}

/// The random 128-bit coefficients of one batch: SHA-512 in counter mode under a fresh key
/// from the operating system. Only their unpredictability matters (a signer who could predict
/// them could craft invalid signatures whose errors cancel); under ZIP-215 they cannot change
/// which signatures are valid. 128 bits bound a false accept by 2⁻¹²⁸ and keep the `R` terms
/// of the multiscalar multiplication half the length of full scalars.
pub(super) struct Coefficients {
    key: [u8; 32],
    counter: u64,
    block: [u8; 64],
    used: usize,
}

impl Coefficients {
    pub(super) fn new() -> Self {
        let mut key = [0u8; 32];
        OsRng.fill_bytes(&mut key);
        Self {
            key,
            counter: 0,
            block: [0; 64],
            used: 64,
        }
    }

    pub(super) fn next(&mut self) -> Scalar {
        if self.used == 64 {
            self.block = Sha512::new()
                .chain_update(self.key)
                .chain_update(self.counter.to_le_bytes())
                .finalize()
                .into();
            self.counter += 1;
            self.used = 0;
        }
        let mut z = [0u8; 32];
        z[..16].copy_from_slice(&self.block[self.used..self.used + 16]);
        self.used += 16;
        // Below 2¹²⁸ < ℓ, so the bytes are already a canonical scalar.
        Scalar::from_bytes_mod_order(z)
    }
}
