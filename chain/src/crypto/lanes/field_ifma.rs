//! Arithmetic modulo p = 2²⁵⁵ − 19 on eight field elements at once with AVX-512 IFMA's 52-bit
//! multiplier (`vpmadd52luq`, `vpmadd52huq`): five limbs in radix 2⁵¹, one register each, so a
//! multiplication is 50 multiply-adds and its reduction 12 more, where the ten-limb layout of
//! [`field`](super::field) takes 100 `vpmuludq` and about as many additions. The products and
//! their reduction are curve25519-dalek's IFMA backend's (`F51x4Reduced::mul` and `square`),
//! on eight lanes of a `zmm` register instead of four of a `ymm` one.
//!
//! A product xᵢ·yⱼ below 2¹⁰⁴ splits into its low 52 bits, which count at limb i + j, and its
//! high 52, which count twice at limb i + j + 1 (2⁵² = 2·2⁵¹); limbs 5 to 9 fold onto 0 to 4
//! times 19 (2²⁵⁵ ≡ 19), with the same split.
//!
//! # Limb bounds
//! `vpmadd52luq` multiplies the low 52 bits of its operands and ignores the rest, so every `F8`
//! here keeps each limb below 2⁵² (*reduced* in this layout). Each operation that could leave a
//! limb at or above it ends with [`reduce`], which takes any limbs below 2⁶⁴ to limb 0 below
//! 2⁵¹ + 19·2¹³ and the others below 2⁵¹ + 2¹³:
//! - a product's five column sums, before [`reduce`], are below 2⁵⁷ (each gathers at most six
//!   low halves and seven doubled high halves, all below 2⁵²);
//! - a sum of two reduced values is below 2⁵³, and a difference a + 16p − b below 2⁵⁶ (16p's
//!   limbs, about 2⁵⁵, cover any reduced b);
//! - the ten-limb layout's reduced limbs (even ones below 2²⁶, odd ones below 2²⁵ + 2¹⁷) pair
//!   into limbs below 2²⁶ + 2²⁶·(2²⁵ + 2¹⁷) < 2⁵², so a gathered table row or a bucket is
//!   usable as it is.
//!
//! So [`F8::add`], [`F8::sub`] and [`F8::neg`] return reduced values, and [`F8::carry`], which
//! the shared point formulas call where the ten-limb layout needs it, has nothing left to do.

/// `z + lo₅₂(x·y)`, x and y taken mod 2⁵².
macro_rules! madd52lo {
    ($z:expr, $x:expr, $y:expr) => {
        _mm512_madd52lo_epu64($z, $x, $y)
    };
}

/// `z + hi₅₂(x·y)` (bits 52 to 103 of the product), x and y taken mod 2⁵².
macro_rules! madd52hi {
    ($z:expr, $x:expr, $y:expr) => {
        _mm512_madd52hi_epu64($z, $x, $y)
    };
}

/// Lane-wise 64-bit sum of any number of terms.
macro_rules! sum64 {
    ($a:expr $(, $rest:expr)+ $(,)?) => {{
        let s = $a;
        $(let s = _mm512_add_epi64(s, $rest);)+
        s
    }};
}

/// `[e(0), …, e(4)]` with `k` bound to each limb index, written out: closures inside
/// `#[target_feature]` functions are not always inlined.
macro_rules! five {
    ($k:ident => $e:expr) => {
        [
            { let $k: usize = 0; $e },
            { let $k: usize = 1; $e },
            { let $k: usize = 2; $e },
            { let $k: usize = 3; $e },
            { let $k: usize = 4; $e },
        ]
    };
}

/// This module's items, each function compiled with `$feature` (`#[target_feature]`):
/// see [`super`] for where they are written out.
macro_rules! field_ifma {
    ($feature:meta) => {
        use super::simd::*;

        field_common!($feature);

        /// The bits of a limb.
        const M51: u64 = (1 << 51) - 1;

        /// 16p in limbs: what [`F8::sub`] and [`F8::neg`] add so that a reduced subtrahend cannot
        /// take a limb below zero.
        const SIXTEEN_P: [u64; 5] = [
            16 * ((1 << 51) - 19),
            16 * M51,
            16 * M51,
            16 * M51,
            16 * M51,
        ];

        /// Eight field elements, one per lane: five limbs in radix 2⁵¹.
        #[derive(Clone, Copy)]
        pub struct F8(pub [__m512i; 5]);

        /// Eight elements in memory after [`F8::stored`]'s carries: limb `k` (51 bits, limb 0
        /// up to 2⁵¹ + 38) of lane `l` at `[k][l]`.
        pub struct StoredF8([[u64; 8]; 5]);

        impl StoredF8 {
            /// Lane `l`'s limbs in the ten-limb layout: each 51-bit limb split at bit 26.
            #[inline]
            pub fn lane(&self, l: usize) -> [u64; 10] {
                core::array::from_fn(|i| {
                    let v = self.0[i / 2][l];
                    if i.is_multiple_of(2) { v & ((1 << 26) - 1) } else { v >> 26 }
                })
            }
        }

        #[inline]
        #[$feature]
        fn splat(v: u64) -> __m512i {
            _mm512_set1_epi64(v as i64)
        }

        /// Five limbs in radix 2⁵¹ from ten in the layout of [`super::field`] (limb 2k at bit
        /// 51k, limb 2k + 1 at bit 51k + 26).
        #[inline]
        fn from_ten(l: &[u64; 10]) -> [u64; 5] {
            core::array::from_fn(|k| l[2 * k] + (l[2 * k + 1] << 26))
        }

        /// Carries every limb into the next at once (limb 4's into limb 0, times 19): takes limbs
        /// below 2⁶⁴ to limb 0 below 2⁵¹ + 19·2¹³ and the others below 2⁵¹ + 2¹³.
        #[inline]
        #[$feature]
        fn reduce(x: [__m512i; 5]) -> F8 {
            let mask = splat(M51);
            let c: [__m512i; 5] = five!(i => _mm512_srli_epi64::<51>(x[i]));
            F8([
                madd52lo!(_mm512_and_si512(x[0], mask), c[4], splat(19)),
                _mm512_add_epi64(_mm512_and_si512(x[1], mask), c[0]),
                _mm512_add_epi64(_mm512_and_si512(x[2], mask), c[1]),
                _mm512_add_epi64(_mm512_and_si512(x[3], mask), c[2]),
                _mm512_add_epi64(_mm512_and_si512(x[4], mask), c[3]),
            ])
        }

        impl F8 {
            /// The same element, `limbs` in the ten-limb layout, in every lane.
            #[inline]
            #[$feature]
            pub fn splat(limbs: &[u64; 10]) -> F8 {
                let l = from_ten(limbs);
                F8(five!(k => splat(l[k])))
            }

            /// 0 in every lane.
            #[inline]
            #[$feature]
            pub fn zero() -> F8 {
                F8([_mm512_setzero_si512(); 5])
            }

            /// 1 in every lane.
            #[inline]
            #[$feature]
            pub fn one() -> F8 {
                let mut f = F8::zero();
                f.0[0] = splat(1);
                f
            }

            /// Lane `i` from `limbs[i]`, reduced, in the ten-limb layout.
            #[inline]
            #[$feature]
            pub fn from_lanes(limbs: &[[u64; 10]; 8]) -> F8 {
                let mut t = [[0u64; 8]; 5];
                for (lane, l) in limbs.iter().enumerate() {
                    for (k, v) in from_ten(l).into_iter().enumerate() {
                        t[k][lane] = v;
                    }
                }
                // SAFETY: each `t[k]` is 64 readable bytes; the load has no alignment requirement.
                F8(five!(k => unsafe { _mm512_loadu_si512(t[k].as_ptr().cast()) }))
            }

            /// The lanes in memory, each read by [`StoredF8::lane`] in the ten-limb layout,
            /// within what that layout's reduced values allow (even limbs below 2²⁶, odd ones
            /// below 2²⁵ + 2¹⁷), so that the other backends read them too: a key's table row may
            /// be cached by one backend and gathered by another. One pass of carries from limb 0
            /// up, limb 4's back into limb 0 times 19, gets there: each carry is at most 2 (limbs
            /// below 2⁵²), so limb 0 ends below 2⁵¹ + 38 and its high half at most 2²⁵; the others
            /// below 2⁵¹. A bucket is stored this way once per bucket, so it skips the whole of
            /// [`F8::canonical`].
            #[inline]
            #[$feature]
            pub fn stored(self) -> StoredF8 {
                let mask = splat(M51);
                let mut h = self.0;
                for i in 0..4 {
                    let c = _mm512_srli_epi64::<51>(h[i]);
                    h[i] = _mm512_and_si512(h[i], mask);
                    h[i + 1] = _mm512_add_epi64(h[i + 1], c);
                }
                let c = _mm512_srli_epi64::<51>(h[4]);
                h[4] = _mm512_and_si512(h[4], mask);
                h[0] = madd52lo!(h[0], c, splat(19));
                let mut t = [[0u64; 8]; 5];
                for (k, limb) in h.iter().enumerate() {
                    // SAFETY: `t[k]` is 64 writable bytes; the store has no alignment requirement.
                    unsafe { _mm512_storeu_si512(t[k].as_mut_ptr().cast(), *limb) };
                }
                StoredF8(t)
            }

            /// Eight table rows' element, from its five words as gathered (`words[k]` holds limb
            /// 2k of the ten-limb layout in its low half and limb 2k + 1 in its high half, as
            /// [`super::Row`]s do).
            #[inline]
            #[$feature]
            pub fn from_row_words(words: &[__m512i; 5]) -> F8 {
                let low = splat(0xffff_ffff);
                F8(five!(k => _mm512_add_epi64(
                    _mm512_and_si512(words[k], low),
                    _mm512_slli_epi64::<26>(_mm512_srli_epi64::<32>(words[k])),
                )))
            }

            /// The sum, reduced.
            #[inline]
            #[$feature]
            pub fn add(&self, b: &F8) -> F8 {
                reduce(five!(k => _mm512_add_epi64(self.0[k], b.0[k])))
            }

            /// `self − b` as `self + 16p − b`, reduced.
            #[inline]
            #[$feature]
            pub fn sub(&self, b: &F8) -> F8 {
                reduce(five!(k => _mm512_sub_epi64(
                    _mm512_add_epi64(self.0[k], splat(SIXTEEN_P[k])),
                    b.0[k]
                )))
            }

            /// `−self` as `16p − self`, reduced.
            #[inline]
            #[$feature]
            pub fn neg(&self) -> F8 {
                reduce(five!(k => _mm512_sub_epi64(splat(SIXTEEN_P[k]), self.0[k])))
            }

            /// `b` in the lanes of `mask`, `self` in the others.
            #[inline]
            #[$feature]
            pub fn select(&self, mask: __mmask8, b: &F8) -> F8 {
                F8(five!(k => _mm512_mask_blend_epi64(mask, self.0[k], b.0[k])))
            }

            /// `self`: every `F8` of this layout is reduced already (see the module's notes).
            #[inline]
            #[$feature]
            pub fn carry(&self) -> F8 {
                *self
            }

            /// curve25519-dalek's `F51x4Reduced::mul`, in its order: "waves" of eight independent
            /// multiply-adds (4 cycles of latency, two a cycle), which LLVM does not reorder.
            #[inline(always)]
            #[allow(unsafe_op_in_unsafe_fn)] // every statement is an intrinsic; see `mul_inline`
            unsafe fn mul_body(&self, g: &F8) -> F8 {
                let (x, y) = (&self.0, &g.0);
                let zero = _mm512_setzero_si512();
                // zK_1: terms that count once at limb K; zK_2: terms that count twice.
                let (mut z0_1, mut z1_1, mut z2_1, mut z3_1, mut z4_1) = (zero, zero, zero, zero, zero);
                let (mut z5_1, mut z6_1, mut z7_1, mut z8_1) = (zero, zero, zero, zero);
                let (mut z0_2, mut z1_2, mut z2_2, mut z3_2, mut z4_2) = (zero, zero, zero, zero, zero);
                let (mut z5_2, mut z6_2, mut z7_2, mut z8_2, mut z9_2) = (zero, zero, zero, zero, zero);

                // Wave 0
                z4_1 = madd52lo!(z4_1, x[2], y[2]);
                z5_2 = madd52hi!(z5_2, x[2], y[2]);
                z5_1 = madd52lo!(z5_1, x[4], y[1]);
                z6_2 = madd52hi!(z6_2, x[4], y[1]);
                z6_1 = madd52lo!(z6_1, x[4], y[2]);
                z7_2 = madd52hi!(z7_2, x[4], y[2]);
                z7_1 = madd52lo!(z7_1, x[4], y[3]);
                z8_2 = madd52hi!(z8_2, x[4], y[3]);

                // Wave 1
                z4_1 = madd52lo!(z4_1, x[3], y[1]);
                z5_2 = madd52hi!(z5_2, x[3], y[1]);
                z5_1 = madd52lo!(z5_1, x[3], y[2]);
                z6_2 = madd52hi!(z6_2, x[3], y[2]);
                z6_1 = madd52lo!(z6_1, x[3], y[3]);
                z7_2 = madd52hi!(z7_2, x[3], y[3]);
                z7_1 = madd52lo!(z7_1, x[3], y[4]);
                z8_2 = madd52hi!(z8_2, x[3], y[4]);

                // Wave 2
                z8_1 = madd52lo!(z8_1, x[4], y[4]);
                z9_2 = madd52hi!(z9_2, x[4], y[4]);
                z4_1 = madd52lo!(z4_1, x[4], y[0]);
                z5_2 = madd52hi!(z5_2, x[4], y[0]);
                z5_1 = madd52lo!(z5_1, x[2], y[3]);
                z6_2 = madd52hi!(z6_2, x[2], y[3]);
                z6_1 = madd52lo!(z6_1, x[2], y[4]);
                z7_2 = madd52hi!(z7_2, x[2], y[4]);

                let z8 = sum64!(z8_1, z8_2, z8_2);
                let z9 = _mm512_add_epi64(z9_2, z9_2);

                // Wave 3
                z3_1 = madd52lo!(z3_1, x[3], y[0]);
                z4_2 = madd52hi!(z4_2, x[3], y[0]);
                z4_1 = madd52lo!(z4_1, x[1], y[3]);
                z5_2 = madd52hi!(z5_2, x[1], y[3]);
                z5_1 = madd52lo!(z5_1, x[1], y[4]);
                z6_2 = madd52hi!(z6_2, x[1], y[4]);
                z2_1 = madd52lo!(z2_1, x[2], y[0]);
                z3_2 = madd52hi!(z3_2, x[2], y[0]);

                let z6 = sum64!(z6_1, z6_2, z6_2);
                let z7 = sum64!(z7_1, z7_2, z7_2);

                // Wave 4
                z3_1 = madd52lo!(z3_1, x[2], y[1]);
                z4_2 = madd52hi!(z4_2, x[2], y[1]);
                z4_1 = madd52lo!(z4_1, x[0], y[4]);
                z5_2 = madd52hi!(z5_2, x[0], y[4]);
                z1_1 = madd52lo!(z1_1, x[1], y[0]);
                z2_2 = madd52hi!(z2_2, x[1], y[0]);
                z2_1 = madd52lo!(z2_1, x[1], y[1]);
                z3_2 = madd52hi!(z3_2, x[1], y[1]);

                let z5 = sum64!(z5_1, z5_2, z5_2);

                // Wave 5
                z3_1 = madd52lo!(z3_1, x[1], y[2]);
                z4_2 = madd52hi!(z4_2, x[1], y[2]);
                z0_1 = madd52lo!(z0_1, x[0], y[0]);
                z1_2 = madd52hi!(z1_2, x[0], y[0]);
                z1_1 = madd52lo!(z1_1, x[0], y[1]);
                z2_1 = madd52lo!(z2_1, x[0], y[2]);
                z2_2 = madd52hi!(z2_2, x[0], y[1]);
                z3_2 = madd52hi!(z3_2, x[0], y[2]);

                let r19 = splat(19);
                let (mut t0, mut t1) = (zero, zero);

                // Wave 6: limbs 5 to 9 fold onto 0 to 4 times 19, their bits from 52 up a limb
                // higher and doubled; limb 9's high part folds twice (through limb 5), in t0 + t1.
                t0 = madd52hi!(t0, r19, z9);
                t1 = madd52lo!(t1, r19, _mm512_srli_epi64::<52>(z9));
                z3_1 = madd52lo!(z3_1, x[0], y[3]);
                z4_2 = madd52hi!(z4_2, x[0], y[3]);
                z1_2 = madd52lo!(z1_2, r19, _mm512_srli_epi64::<52>(z5));
                z2_2 = madd52lo!(z2_2, r19, _mm512_srli_epi64::<52>(z6));
                z3_2 = madd52lo!(z3_2, r19, _mm512_srli_epi64::<52>(z7));
                z0_1 = madd52lo!(z0_1, r19, z5);

                // Wave 7
                z4_1 = madd52lo!(z4_1, r19, z9);
                z1_1 = madd52lo!(z1_1, r19, z6);
                z0_2 = madd52lo!(z0_2, r19, _mm512_add_epi64(t0, t1));
                z4_2 = madd52hi!(z4_2, r19, z8);
                z2_1 = madd52lo!(z2_1, r19, z7);
                z1_2 = madd52hi!(z1_2, r19, z5);
                z2_2 = madd52hi!(z2_2, r19, z6);
                z3_2 = madd52hi!(z3_2, r19, z7);

                // Wave 8
                z3_1 = madd52lo!(z3_1, r19, z8);
                z4_2 = madd52lo!(z4_2, r19, _mm512_srli_epi64::<52>(z8));

                reduce([
                    sum64!(z0_1, z0_2, z0_2),
                    sum64!(z1_1, z1_2, z1_2),
                    sum64!(z2_1, z2_2, z2_2),
                    sum64!(z3_1, z3_2, z3_2),
                    sum64!(z4_1, z4_2, z4_2),
                ])
            }

            /// curve25519-dalek's `F51x4Reduced::square`: each cross product once, its low half
            /// counted twice and its high half four times.
            #[inline(always)]
            #[allow(unsafe_op_in_unsafe_fn)] // every statement is an intrinsic; see `mul_inline`
            unsafe fn square_body(&self) -> F8 {
                let x = &self.0;
                let zero = _mm512_setzero_si512();
                // zK_1, zK_2, zK_4: terms that count once, twice and four times at limb K.
                let (mut z0_2, mut z1_2, mut z2_2, mut z3_2, mut z4_2) = (zero, zero, zero, zero, zero);
                let (mut z5_2, mut z6_2, mut z7_2, mut z9_2) = (zero, zero, zero, zero);
                let (mut z2_4, mut z3_4, mut z4_4, mut z5_4) = (zero, zero, zero, zero);
                let (mut z6_4, mut z7_4, mut z8_4) = (zero, zero, zero);

                let z0_1 = madd52lo!(zero, x[0], x[0]);

                z1_2 = madd52lo!(z1_2, x[0], x[1]);
                z1_2 = madd52hi!(z1_2, x[0], x[0]);

                z2_4 = madd52hi!(z2_4, x[0], x[1]);
                let mut z2_1 = _mm512_slli_epi64::<2>(z2_4);
                z2_2 = madd52lo!(z2_2, x[0], x[2]);
                z2_1 = madd52lo!(z2_1, x[1], x[1]);

                z3_4 = madd52hi!(z3_4, x[0], x[2]);
                let mut z3_1 = _mm512_slli_epi64::<2>(z3_4);
                z3_2 = madd52lo!(z3_2, x[1], x[2]);
                z3_2 = madd52lo!(z3_2, x[0], x[3]);
                z3_2 = madd52hi!(z3_2, x[1], x[1]);

                z4_4 = madd52hi!(z4_4, x[1], x[2]);
                z4_4 = madd52hi!(z4_4, x[0], x[3]);
                let mut z4_1 = _mm512_slli_epi64::<2>(z4_4);
                z4_2 = madd52lo!(z4_2, x[1], x[3]);
                z4_2 = madd52lo!(z4_2, x[0], x[4]);
                z4_1 = madd52lo!(z4_1, x[2], x[2]);

                z5_4 = madd52hi!(z5_4, x[1], x[3]);
                z5_4 = madd52hi!(z5_4, x[0], x[4]);
                let mut z5_1 = _mm512_slli_epi64::<2>(z5_4);
                z5_2 = madd52lo!(z5_2, x[2], x[3]);
                z5_2 = madd52lo!(z5_2, x[1], x[4]);
                z5_2 = madd52hi!(z5_2, x[2], x[2]);

                z6_4 = madd52hi!(z6_4, x[2], x[3]);
                z6_4 = madd52hi!(z6_4, x[1], x[4]);
                let mut z6_1 = _mm512_slli_epi64::<2>(z6_4);
                z6_2 = madd52lo!(z6_2, x[2], x[4]);
                z6_1 = madd52lo!(z6_1, x[3], x[3]);

                z7_4 = madd52hi!(z7_4, x[2], x[4]);
                let mut z7_1 = _mm512_slli_epi64::<2>(z7_4);
                z7_2 = madd52lo!(z7_2, x[3], x[4]);
                z7_2 = madd52hi!(z7_2, x[3], x[3]);

                z8_4 = madd52hi!(z8_4, x[3], x[4]);
                let mut z8_1 = _mm512_slli_epi64::<2>(z8_4);
                z8_1 = madd52lo!(z8_1, x[4], x[4]);

                z9_2 = madd52hi!(z9_2, x[4], x[4]);

                z5_1 = _mm512_add_epi64(z5_1, _mm512_slli_epi64::<1>(z5_2));
                z6_1 = _mm512_add_epi64(z6_1, _mm512_slli_epi64::<1>(z6_2));
                z7_1 = _mm512_add_epi64(z7_1, _mm512_slli_epi64::<1>(z7_2));
                let z9_1 = _mm512_slli_epi64::<1>(z9_2);

                // Limbs 5 to 9 fold onto 0 to 4 times 19, as in `mul_body`.
                let r19 = splat(19);
                let t0 = madd52hi!(zero, r19, z9_1);
                let t1 = madd52lo!(zero, r19, _mm512_srli_epi64::<52>(z9_1));

                z4_2 = madd52lo!(z4_2, r19, _mm512_srli_epi64::<52>(z8_1));
                z3_2 = madd52lo!(z3_2, r19, _mm512_srli_epi64::<52>(z7_1));
                z2_2 = madd52lo!(z2_2, r19, _mm512_srli_epi64::<52>(z6_1));
                z1_2 = madd52lo!(z1_2, r19, _mm512_srli_epi64::<52>(z5_1));

                z0_2 = madd52lo!(z0_2, r19, _mm512_add_epi64(t0, t1));
                z1_2 = madd52hi!(z1_2, r19, z5_1);
                z2_2 = madd52hi!(z2_2, r19, z6_1);
                z3_2 = madd52hi!(z3_2, r19, z7_1);
                z4_2 = madd52hi!(z4_2, r19, z8_1);

                let z0_1 = madd52lo!(z0_1, r19, z5_1);
                let z1_1 = madd52lo!(zero, r19, z6_1);
                z2_1 = madd52lo!(z2_1, r19, z7_1);
                z3_1 = madd52lo!(z3_1, r19, z8_1);
                z4_1 = madd52lo!(z4_1, r19, z9_1);

                reduce([
                    sum64!(z0_1, z0_2, z0_2),
                    sum64!(z1_1, z1_2, z1_2),
                    sum64!(z2_1, z2_2, z2_2),
                    sum64!(z3_1, z3_2, z3_2),
                    sum64!(z4_1, z4_2, z4_2),
                ])
            }

            /// The unique representative below p, with every limb below 2⁵¹.
            #[inline]
            #[$feature]
            pub fn canonical(&self) -> F8 {
                let mask = splat(M51);
                // Reduced, the value is below 2²⁵⁵ + 2²²³ < 2p: one subtraction of p at most.
                let mut h = reduce(self.0).0;
                // q = 1 iff value ≥ p, i.e. iff value + 19 carries out of bit 255.
                let mut q = _mm512_srli_epi64::<51>(_mm512_add_epi64(h[0], splat(19)));
                for limb in &h[1..] {
                    q = _mm512_srli_epi64::<51>(_mm512_add_epi64(*limb, q));
                }
                // Subtract q·p: add 19·q, carry, and drop bit 255.
                h[0] = madd52lo!(h[0], q, splat(19));
                for i in 0..4 {
                    let c = _mm512_srli_epi64::<51>(h[i]);
                    h[i] = _mm512_and_si512(h[i], mask);
                    h[i + 1] = _mm512_add_epi64(h[i + 1], c);
                }
                h[4] = _mm512_and_si512(h[4], mask);
                F8(h)
            }
        }
    };
}
