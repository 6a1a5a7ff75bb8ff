//! Variable-time multiscalar multiplication (Pippenger's bucket method) with the eight lanes
//! of a register working on eight different buckets at once.
//!
//! Per window of `c` bits, each term's signed digit puts its point in a bucket; a counting
//! sort lists each bucket's points, and each lane sums one bucket's list, taking the next
//! bucket when it finishes, so lanes never touch the same bucket. Points are gathered from
//! a table of affine addends (7 multiplications an addition). The buckets of eight windows
//! are then combined (Σ j·bucketⱼ by running sums) with one window per lane, and the window
//! sums by doubling. Scalars are signed-digit recoded, so a negative digit subtracts.

/// This module's items, each function compiled with `$feature` (`#[target_feature]`):
/// see [`super`] for where they are written out.
macro_rules! msm {
    ($feature:meta) => {
        use super::simd::*;

        use rayon::prelude::*;

        use super::field::F8;
        use super::point::{AffineNiels8, Ext8};
        pub use crate::crypto::lanes::{IDENTITY_ROW, Row};

        /// Words from one row to the next (15 used, 1 of padding).
        const ROW_WORDS: i32 = (size_of::<Row>() / 8) as i32;

        /// Steps ahead that a lane prefetches its next rows: enough to cover an L2/L3 access with
        /// the ~1 µs a step of eight additions takes, small enough not to evict what is in use.
        const PREFETCH: u32 = 2;

        /// Scalars are below ℓ < 2²⁵³; one more bit holds the last signed digit's carry.
        const SCALAR_BITS: usize = 254;

        /// Eight rows from eight lanes' addends.
        #[inline]
        #[$feature]
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
        /// additions into buckets (7 each, counted as 9 for the gathers and bookkeeping around them),
        /// a bucket's first point (about 2: it is converted, not added) and flushing it (about 1),
        /// and combining the buckets (two 9-multiplication additions per bucket, per group of eight
        /// windows, eight lanes at a time). On this machine's batches of 5,000 and 10,000
        /// signatures, timing every width from 8 to 12 put the best at 10, which this picks.
        fn window_bits(terms: &[Term]) -> usize {
            (4..=12)
                .min_by_key(|&c| {
                    let windows = SCALAR_BITS.div_ceil(c);
                    let adds: usize = terms
                        .iter()
                        .map(|t| (t.bits as usize + 1).div_ceil(c))
                        .sum();
                    let buckets = windows * (1 << (c - 1));
                    adds * 9 + buckets.min(adds) * 3 + windows.div_ceil(8) * (1 << (c - 1)) * 18 * 8
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

        /// A point in extended coordinates as 40 limbs (X, Y, Z, T), reduced: one lane's bucket.
        type Limbs = [u64; 40];

        /// The identity, (0 : 1 : 1 : 0).
        const IDENTITY_LIMBS: Limbs = {
            let mut p = [0u64; 40];
            p[10] = 1;
            p[20] = 1;
            p
        };

        /// Σ scalarᵢ·pointᵢ over `terms`, the points being `table` rows, with the result multiplied
        /// by the cofactor 8 and compared with the identity: the batch equation's check.
        ///
        /// Windows are independent until their sums are combined, so they run in parallel on
        /// rayon's threads: one batch uses every core, and a batch as large as a block keeps
        /// Pippenger's buckets full.
        #[$feature]
        pub fn is_identity_times_8(terms: &[Term], table: &[Row]) -> bool {
            assert!(
                table.len() < (i32::MAX / ROW_WORDS) as usize,
                "word offsets fit the gathers' 32-bit indices"
            );
            assert_eq!(table.first(), Some(&IDENTITY_ROW), "row 0 is the identity");
            assert!(terms.iter().all(|t| (t.row as usize) < table.len()));
            if terms.is_empty() {
                return true;
            }
            let c = window_bits(terms);
            let windows = SCALAR_BITS.div_ceil(c);
            // Term-major: each term's digits in one place, recoded in parallel.
            let mut digits = vec![0i16; terms.len() * windows];
            digits
                .par_chunks_mut(windows * 256)
                .zip(terms.par_chunks(256))
                .for_each(|(digits, terms)| {
                    for (d, t) in digits.chunks_mut(windows).zip(terms) {
                        recode(&t.scalar, c, d);
                    }
                });
            // Each window's buckets, then Σ j·bucketⱼ per window, eight windows a group.
            let buckets: Vec<Vec<Limbs>> = (0..windows)
                .into_par_iter()
                .map(|w| window_buckets(terms, &digits, windows, w, c, table))
                .collect();
            let sums: Vec<Limbs> = buckets
                .par_chunks(8)
                .flat_map_iter(|group| combine_buckets(group, 1 << (c - 1)))
                .collect();
            // Horner over the windows, the same point in every lane.
            let mut acc = Ext8::identity();
            for w in (0..windows).rev() {
                for _ in 0..c {
                    acc = acc.double();
                }
                acc = acc.add_projective(&Ext8::splat(&sums[w]).to_projective_niels());
            }
            let acc = acc.double().double().double();
            acc.is_identity() & 1 == 1
        }

        /// Window `w`'s buckets (index 0 unused), each the sum of the points whose digit in this
        /// window is its index, signed.
        #[$feature]
        fn window_buckets(
            terms: &[Term],
            digits: &[i16],
            windows: usize,
            w: usize,
            c: usize,
            table: &[Row],
        ) -> Vec<Limbs> {
            let half = 1usize << (c - 1);
            let digit = |t: usize| digits[t * windows + w];
            // Counting sort: bucket b's entries are entries[start[b]..start[b + 1]], each a row
            // number shifted left once, with the low bit set to subtract. Digit 0 adds nothing.
            let mut start = vec![0u32; half + 2];
            for t in 0..terms.len() {
                let d = digit(t);
                if d != 0 {
                    start[d.unsigned_abs() as usize + 1] += 1;
                }
            }
            for b in 1..start.len() {
                start[b] += start[b - 1];
            }
            let mut fill = start.clone();
            let mut entries = vec![0u32; start[half + 1] as usize];
            for (t, term) in terms.iter().enumerate() {
                let d = digit(t);
                if d != 0 {
                    let b = d.unsigned_abs() as usize;
                    entries[fill[b] as usize] = (term.row << 1) | (d < 0) as u32;
                    fill[b] += 1;
                }
            }
            let mut buckets = vec![IDENTITY_LIMBS; half + 1];
            fill_buckets(&start, &entries, table, &mut buckets);
            buckets
        }

        /// Where a lane of [`fill_buckets`] is: its bucket (0 for none) and the entries it has left.
        #[derive(Clone, Copy)]
        struct Lane {
            bucket: usize,
            pos: u32,
            end: u32,
        }

        /// Sums each bucket's entries, eight buckets at a time (one per lane).
        #[$feature]
        fn fill_buckets(start: &[u32], entries: &[u32], table: &[Row], buckets: &mut [Limbs]) {
            let mut lanes = [Lane {
                bucket: 0,
                pos: 0,
                end: 0,
            }; 8];
            let mut next_bucket = 1;
            let mut acc = Ext8::identity();
            loop {
                // Lanes whose bucket is done hand it over and take the next one, which starts from
                // its first point rather than from the identity (an addition saved per bucket).
                let mut starting: __mmask8 = 0;
                let mut finished: __mmask8 = 0;
                for (l, lane) in lanes.iter().enumerate() {
                    if lane.pos == lane.end && lane.bucket != 0 {
                        finished |= 1 << l;
                    }
                }
                if finished != 0 {
                    // Only the finished lanes are laid out as limbs: a bucket of a few dozen
                    // points finishes every few steps, and laying out all eight lanes each
                    // time cost as much as a field multiplication per lane.
                    let stored = acc.stored();
                    for (l, lane) in lanes.iter().enumerate() {
                        if finished >> l & 1 == 1 {
                            buckets[lane.bucket] = stored.lane(l);
                        }
                    }
                }
                for (l, lane) in lanes.iter_mut().enumerate() {
                    if lane.pos != lane.end {
                        continue;
                    }
                    lane.bucket = 0;
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
                let negate = next_entries(&mut lanes, entries, table, &mut index);
                let q = gather(table, &index);
                let sum = acc.add_affine(&q, negate);
                acc = if starting == 0 {
                    sum
                } else {
                    sum.select(starting, &q.to_extended(negate))
                };
            }
        }

        /// Takes each busy lane's next entry: its row into `index` (left as it is for idle lanes), and
        /// in the mask returned, whether it subtracts the row. Prefetches the row each lane reaches
        /// [`PREFETCH`] entries later. `index` is the caller's, filled in place: returned, it costs a
        /// copy per step.
        #[inline]
        #[$feature]
        fn next_entries(
            lanes: &mut [Lane; 8],
            entries: &[u32],
            table: &[Row],
            index: &mut [i32; 8],
        ) -> __mmask8 {
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
            negate
        }

        /// Lane `l` of the result from row `index[l]` of `table`.
        #[inline]
        #[$feature]
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
            // A macro rather than a closure: closures in `#[target_feature]` functions are not
            // always inlined.
            macro_rules! element {
                ($e:expr) => {
                    F8::from_row_words(&[
                        words[5 * $e],
                        words[5 * $e + 1],
                        words[5 * $e + 2],
                        words[5 * $e + 3],
                        words[5 * $e + 4],
                    ])
                };
            }
            AffineNiels8 {
                y_plus_x: element!(0),
                y_minus_x: element!(1),
                xy2d: element!(2),
            }
        }

        /// Σ j·bucketⱼ for up to eight windows' `buckets` (of `half` + 1 each, index 0 unused), one
        /// window per lane, by running sums from the top bucket down; the identity for windows
        /// past the last.
        #[$feature]
        fn combine_buckets(windows: &[Vec<Limbs>], half: usize) -> [Limbs; 8] {
            let mut running = Ext8::identity();
            let mut total = Ext8::identity();
            for b in (1..=half).rev() {
                let bucket = Ext8::from_lanes(&core::array::from_fn(|l| {
                    windows.get(l).map_or(IDENTITY_LIMBS, |w| w[b])
                }));
                running = running.add_projective(&bucket.to_projective_niels());
                total = total.add_projective(&running.to_projective_niels());
            }
            total.to_lanes()
        }
    };
}
