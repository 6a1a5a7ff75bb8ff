//! Variable-time multiscalar multiplication (Pippenger's bucket method) with the eight lanes
//! of AVX-512 working on eight different buckets at once.
//!
//! Per window of `c` bits, each term's signed digit puts its point in a bucket; a counting
//! sort lists each bucket's points, and each lane sums one bucket's list, taking the next
//! bucket when it finishes, so lanes never touch the same bucket. Points are gathered from
//! a table of affine addends (7 multiplications an addition). The buckets of eight windows
//! are then combined (Σ j·bucketⱼ by running sums) with one window per lane, and the window
//! sums by doubling. Scalars are signed-digit recoded, so a negative digit subtracts.

use core::arch::x86_64::*;

use super::field::{F8, limbs};
use super::point::{AffineNiels8, Ext8};

/// A table row: an affine point as an addend, (y + x, y − x, 2dxy), each element's ten
/// reduced limbs packed two to a word (even limb low, odd limb high), so a lane loads a point
/// with 15 gathers. Aligned to cache lines, so that a row is two lines, not three.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C, align(64))]
pub struct Row(pub [u64; 15]);

/// Words from one row to the next (15 used, 1 of padding).
const ROW_WORDS: i32 = (size_of::<Row>() / 8) as i32;

/// The row of the identity: y + x = 1, y − x = 1, 2dxy = 0. Row 0 of every table: lanes
/// with no bucket left add it.
pub const IDENTITY_ROW: Row = Row([1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]);

/// Steps ahead that a lane prefetches its next rows: enough to cover an L2/L3 access with
/// the ~1 µs a step of eight additions takes, small enough not to evict what is in use.
const PREFETCH: u32 = 2;

/// Scalars are below ℓ < 2²⁵³; one more bit holds the last signed digit's carry.
const SCALAR_BITS: usize = 254;

/// Eight rows from eight lanes' addends.
#[inline]
#[target_feature(enable = "avx512f")]
pub fn rows(p: &AffineNiels8) -> [Row; 8] {
    let parts = [
        p.y_plus_x.to_lanes(),
        p.y_minus_x.to_lanes(),
        p.xy2d.to_lanes(),
    ];
    core::array::from_fn(|lane| {
        let mut row = [0u64; 15];
        for (e, part) in parts.iter().enumerate() {
            for k in 0..5 {
                row[5 * e + k] = part[lane][2 * k] | (part[lane][2 * k + 1] << 32);
            }
        }
        Row(row)
    })
}

/// One term of the sum: a scalar (below ℓ) and the table row of its point.
#[derive(Clone, Copy)]
pub struct Term {
    pub scalar: [u8; 32],
    pub row: u32,
    /// Bits the scalar may have: the coefficients of `R` are below 2¹²⁸.
    pub bits: u16,
}

/// The window width that minimises the estimated work, in multiplications per lane:
/// additions into buckets (7 each), a bucket's first point (about 2: it is converted, not
/// added) and flushing it (about 1), and combining the buckets (two 9-multiplication
/// additions per bucket, per group of eight windows, eight lanes at a time).
fn window_bits(terms: &[Term]) -> usize {
    (4..=12)
        .min_by_key(|&c| {
            let windows = SCALAR_BITS.div_ceil(c);
            let adds: usize = terms
                .iter()
                .map(|t| (t.bits as usize + 1).div_ceil(c))
                .sum();
            let buckets = windows * (1 << (c - 1));
            adds * 7 + buckets.min(adds) * 3 + windows.div_ceil(8) * (1 << (c - 1)) * 18 * 8
        })
        .expect("non-empty range")
}

/// Signed radix-2^c digits of `scalar` (below 2²⁵³), least significant first, each in
/// (−2^(c−1), 2^(c−1)].
fn recode(scalar: &[u8; 32], c: usize, out: &mut [i16]) {
    let mut words = [0u64; 5];
    for (w, chunk) in words.iter_mut().zip(scalar.chunks(8)) {
        *w = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
    }
    let half = 1i32 << (c - 1);
    let mask = (1u64 << c) - 1;
    let mut carry = 0i32;
    for (w, d) in out.iter_mut().enumerate() {
        let (word, bit) = ((w * c) / 64, (w * c) % 64);
        let mut bits = words[word] >> bit;
        if bit + c > 64 {
            bits |= words[word + 1] << (64 - bit);
        }
        let raw = (bits & mask) as i32 + carry;
        if raw > half {
            *d = (raw - (1 << c)) as i16;
            carry = 1;
        } else {
            *d = raw as i16;
            carry = 0;
        }
    }
    debug_assert_eq!(carry, 0, "the windows hold every bit");
}

/// Σ scalarᵢ·pointᵢ over `terms`, the points being `table` rows, with the result multiplied
/// by the cofactor 8 and compared with the identity: the batch equation's check.
#[target_feature(enable = "avx512f")]
pub fn is_identity_times_8(terms: &[Term], table: &[Row]) -> bool {
    assert!(
        table.len() < (i32::MAX / ROW_WORDS) as usize,
        "word offsets fit the gathers' 32-bit indices"
    );
    assert_eq!(table.first(), Some(&IDENTITY_ROW), "row 0 is the identity");
    assert!(terms.iter().all(|t| (t.row as usize) < table.len()));
    let n = terms.len();
    if n == 0 {
        return true;
    }
    let c = window_bits(terms);
    let windows = SCALAR_BITS.div_ceil(c);
    let half = 1usize << (c - 1);
    // Window-major, so that sorting a window reads its digits in order.
    let mut digits = vec![0i16; n * windows];
    let mut one = vec![0i16; windows];
    for (t, term) in terms.iter().enumerate() {
        recode(&term.scalar, c, &mut one);
        for (w, d) in one.iter().enumerate() {
            digits[w * n + t] = *d;
        }
    }
    // Per window: bucket b's entries are entries[start[b]..start[b + 1]], each a row number
    // shifted left once, with the low bit set to subtract.
    let mut start = vec![0u32; half + 2];
    let mut fill = vec![0u32; half + 2];
    let mut entries = vec![0u32; n];
    // The buckets of one group of eight windows, one window per lane: [bucket][coordinate
    // limb][lane], coordinates X, Y, Z, T.
    let mut buckets = vec![[[0u64; 8]; 40]; half + 1];
    let mut window_sums: Vec<[u64; 40]> = Vec::with_capacity(windows.next_multiple_of(8));
    for group in 0..windows.div_ceil(8) {
        reset_to_identity(&mut buckets);
        for slot in 0..8 {
            let w = group * 8 + slot;
            if w >= windows {
                break;
            }
            let digits = &digits[w * n..(w + 1) * n];
            start.fill(0);
            for d in digits {
                start[d.unsigned_abs() as usize + 1] += 1;
            }
            // Digit 0 adds nothing: its entries are counted in start[1] and skipped.
            let zeros = start[1];
            start[1] = 0;
            for b in 1..start.len() {
                start[b] += start[b - 1];
            }
            fill.copy_from_slice(&start);
            for (term, &d) in terms.iter().zip(digits) {
                if d != 0 {
                    let b = d.unsigned_abs() as usize;
                    entries[fill[b] as usize] = (term.row << 1) | (d < 0) as u32;
                    fill[b] += 1;
                }
            }
            debug_assert_eq!(start[half + 1] as usize + zeros as usize, n);
            fill_buckets(&start, &entries, table, slot, &mut buckets);
        }
        let sums = combine_buckets(&buckets);
        let lanes = [
            sums.X.to_lanes(),
            sums.Y.to_lanes(),
            sums.Z.to_lanes(),
            sums.T.to_lanes(),
        ];
        for slot in 0..8 {
            let mut point = [0u64; 40];
            for (k, coordinate) in lanes.iter().enumerate() {
                point[10 * k..10 * k + 10].copy_from_slice(&coordinate[slot]);
            }
            window_sums.push(point);
        }
    }
    // Horner over the windows, the same point in every lane.
    let mut acc = Ext8::identity();
    for w in (0..windows).rev() {
        for _ in 0..c {
            acc = acc.double();
        }
        let p = &window_sums[w];
        let coordinate = |k: usize| -> [[u64; 10]; 8] {
            [p[10 * k..10 * k + 10].try_into().expect("10 limbs"); 8]
        };
        let sum = Ext8 {
            X: F8::from_lanes(&coordinate(0)),
            Y: F8::from_lanes(&coordinate(1)),
            Z: F8::from_lanes(&coordinate(2)),
            T: F8::from_lanes(&coordinate(3)),
        };
        acc = acc.add_projective(&sum.to_projective_niels());
    }
    let acc = acc.double().double().double();
    acc.is_identity() & 1 == 1
}

/// Every bucket of every lane to the identity (X = 0, Y = 1, Z = 1, T = 0).
fn reset_to_identity(buckets: &mut [[[u64; 8]; 40]]) {
    for b in buckets.iter_mut() {
        *b = [[0; 8]; 40];
        b[10] = [1; 8];
        b[20] = [1; 8];
    }
}

/// Sums each bucket's entries into lane `slot` of `buckets`, eight buckets at a time.
#[target_feature(enable = "avx512f")]
fn fill_buckets(
    start: &[u32],
    entries: &[u32],
    table: &[Row],
    slot: usize,
    buckets: &mut [[[u64; 8]; 40]],
) {
    /// Where a lane is: its bucket (0 for none) and the entries it has left.
    #[derive(Clone, Copy)]
    struct Lane {
        bucket: usize,
        pos: u32,
        end: u32,
    }
    let mut lanes = [Lane {
        bucket: 0,
        pos: 0,
        end: 0,
    }; 8];
    let mut next_bucket = 1;
    let mut acc = Ext8::identity();
    let mut stored = [[0u64; 8]; 40];
    loop {
        // Lanes whose bucket is done hand it over and take the next one, which starts from
        // its first point rather than from the identity (an addition saved per bucket).
        let mut starting: __mmask8 = 0;
        let mut flushed = false;
        for (l, lane) in lanes.iter_mut().enumerate() {
            if lane.pos != lane.end {
                continue;
            }
            if lane.bucket != 0 {
                if !flushed {
                    store(&acc, &mut stored);
                    flushed = true;
                }
                for (k, limb) in stored.iter().enumerate() {
                    buckets[lane.bucket][k][slot] = limb[l];
                }
                lane.bucket = 0;
            }
            while next_bucket + 1 < start.len() && start[next_bucket] == start[next_bucket + 1] {
                next_bucket += 1;
            }
            if next_bucket + 1 < start.len() {
                *lane = Lane {
                    bucket: next_bucket,
                    pos: start[next_bucket],
                    end: start[next_bucket + 1],
                };
                next_bucket += 1;
                starting |= 1 << l;
            }
        }
        if lanes.iter().all(|l| l.bucket == 0) {
            return;
        }
        let mut index = [0i32; 8]; // row 0, the identity, for idle lanes
        let mut negate: __mmask8 = 0;
        for (l, lane) in lanes.iter_mut().enumerate() {
            if lane.bucket == 0 {
                continue;
            }
            let e = entries[lane.pos as usize];
            lane.pos += 1;
            index[l] = (e >> 1) as i32;
            negate |= ((e & 1) as u8) << l;
            if lane.pos + PREFETCH < lane.end {
                let row = (entries[(lane.pos + PREFETCH) as usize] >> 1) as usize;
                let p = table[row].0.as_ptr().cast::<i8>();
                // Both lines of the row (a row is 128 bytes, aligned to 64).
                _mm_prefetch::<_MM_HINT_T0>(p);
                _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(64));
            }
        }
        let q = gather(table, &index);
        let sum = acc.add_affine(&q, negate);
        acc = if starting == 0 {
            sum
        } else {
            sum.select(starting, &q.to_extended(negate))
        };
    }
}

/// Lane `l` of the result from row `index[l]` of `table`.
#[inline]
#[target_feature(enable = "avx512f")]
fn gather(table: &[Row], index: &[i32; 8]) -> AffineNiels8 {
    // SAFETY: `index` is 32 readable bytes; the load has no alignment requirement.
    let index = unsafe { _mm256_loadu_si256(index.as_ptr().cast()) };
    let offsets = _mm256_mullo_epi32(index, _mm256_set1_epi32(ROW_WORDS));
    let base = table.as_ptr().cast::<i64>();
    let mut words = [_mm512_setzero_si512(); 15];
    for (k, word) in words.iter_mut().enumerate() {
        // SAFETY: every index is a row of `table` (checked by `is_identity_times_8` for
        // terms, and 0 for idle lanes), so each lane reads word k < 15 of a row in bounds.
        *word = unsafe { _mm512_i32gather_epi64::<8>(offsets, base.add(k).cast()) };
    }
    let low = _mm512_set1_epi64(0xffff_ffff);
    macro_rules! unpack {
        ($e:expr) => {
            F8(limbs!(i => if i.is_multiple_of(2) {
                _mm512_and_si512(words[5 * $e + i / 2], low)
            } else {
                _mm512_srli_epi64::<32>(words[5 * $e + i / 2])
            }))
        };
    }
    AffineNiels8 {
        y_plus_x: unpack!(0),
        y_minus_x: unpack!(1),
        xy2d: unpack!(2),
    }
}

/// All 40 limbs of `p`'s lanes into `out[limb][lane]`.
#[inline]
#[target_feature(enable = "avx512f")]
fn store(p: &Ext8, out: &mut [[u64; 8]; 40]) {
    for (k, f) in [&p.X, &p.Y, &p.Z, &p.T].into_iter().enumerate() {
        for i in 0..10 {
            // SAFETY: `out[10k + i]` is 64 writable bytes; no alignment requirement.
            unsafe { _mm512_storeu_si512(out[10 * k + i].as_mut_ptr().cast(), f.0[i]) };
        }
    }
}

/// Lane by lane, Σ j·bucketⱼ, by running sums from the top bucket down.
#[inline(never)]
#[target_feature(enable = "avx512f")]
fn combine_buckets(buckets: &[[[u64; 8]; 40]]) -> Ext8 {
    macro_rules! load {
        ($b:expr, $k:expr) => {
            // SAFETY: `b[10k + i]` is 64 readable bytes; no alignment requirement.
            F8(limbs!(i => unsafe { _mm512_loadu_si512($b[10 * $k + i].as_ptr().cast()) }))
        };
    }
    let mut running = Ext8::identity();
    let mut total = Ext8::identity();
    for b in buckets[1..].iter().rev() {
        let bucket = Ext8 {
            X: load!(b, 0),
            Y: load!(b, 1),
            Z: load!(b, 2),
            T: load!(b, 3),
        };
        running = running.add_projective(&bucket.to_projective_niels());
        total = total.add_projective(&running.to_projective_niels());
    }
    total
}
