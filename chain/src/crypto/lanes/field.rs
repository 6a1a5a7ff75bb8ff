//! Arithmetic modulo p = 2²⁵⁵ − 19 on eight field elements at once, one in each 64-bit lane
//! of an eight-lane register (AVX-512F's, or a pair of AVX2's).
//!
//! An element is ten limbs in radix 2²⁵·⁵ (limb i holds bits ⌈25.5·i⌉.. of the value: 26
//! bits for even i, 25 for odd), each in its own register, so a multiplication is 100
//! `vpmuludq` (32×32→64-bit products) on eight elements at a time. Without AVX-512 IFMA
//! there is no 52-bit multiplier, and this is the layout the ref10 and curve25519-dalek
//! AVX2 code use for the same reason.
//!
//! # Limb bounds
//! Nothing here checks bounds at run time, so every caller keeps to three shapes:
//! - *reduced*: what [`F8::mul`], [`F8::square`] and [`F8::carry`] return: even limbs below
//!   2²⁶, odd ones below 2²⁵ + 2¹⁷;
//! - *sum*: a reduced plus a reduced ([`F8::add`]), or twice a reduced plus a reduced;
//! - *difference*: a reduced minus a reduced ([`F8::sub`], which adds 2p first).
//!
//! A sum or difference has even limbs below 1.5·2²⁷ and odd ones below 1.5·2²⁶ + 2¹⁸.
//! [`F8::mul`] and [`F8::square`] accept any of the three: 19 times such a limb is below
//! 2³² (a `vpmuludq` operand), each of the ten products summed into an output limb is below
//! 2^59.5, and their sum below 2^62.8 < 2⁶⁴. Only a reduced value may be subtracted (2p's
//! limbs must cover it), and [`F8::canonical`] wants a reduced value too.

/// `[e(0), e(1), …, e(9)]` with `i` bound to each limb index, written out: closures and
/// `array::from_fn` inside `#[target_feature]` functions are not always inlined, and a call
/// per limb costs more than the arithmetic.
macro_rules! limbs {
    ($i:ident => $e:expr) => {
        [
            {
                let $i: usize = 0;
                $e
            },
            {
                let $i: usize = 1;
                $e
            },
            {
                let $i: usize = 2;
                $e
            },
            {
                let $i: usize = 3;
                $e
            },
            {
                let $i: usize = 4;
                $e
            },
            {
                let $i: usize = 5;
                $e
            },
            {
                let $i: usize = 6;
                $e
            },
            {
                let $i: usize = 7;
                $e
            },
            {
                let $i: usize = 8;
                $e
            },
            {
                let $i: usize = 9;
                $e
            },
        ]
    };
}

/// `vpmuludq`: the 64-bit product of the low 32 bits of each lane.
macro_rules! mul32 {
    ($a:expr, $b:expr $(,)?) => {
        _mm512_mul_epu32($a, $b)
    };
}

/// Lane-wise 64-bit sum.
macro_rules! add64 {
    ($a:expr, $b:expr $(,)?) => {
        _mm512_add_epi64($a, $b)
    };
}

/// The sum of ten products, added pairwise rather than in one chain of nine dependent additions.
macro_rules! sum10 {
    ([$a:expr, $b:expr, $c:expr, $d:expr, $e:expr, $f:expr, $g:expr, $h:expr, $i:expr, $j:expr $(,)?]) => {{
        let ab = _mm512_add_epi64($a, $b);
        let cd = _mm512_add_epi64($c, $d);
        let ef = _mm512_add_epi64($e, $f);
        let gh = _mm512_add_epi64($g, $h);
        let ij = _mm512_add_epi64($i, $j);
        _mm512_add_epi64(
            _mm512_add_epi64(_mm512_add_epi64(ab, cd), _mm512_add_epi64(ef, gh)),
            ij,
        )
    }};
}

/// What both field layouts share: the constants in the ten-limb layout that lanes exchange
/// ([`F8::from_lanes`], [`F8::splat`]), the encodings, and the exponentiations, which are
/// written with `F8`'s operations only. Written into each layout's module, after its `F8`.
macro_rules! field_common {
    ($feature:meta) => {
        /// The curve constant d = −121665/121666, in limbs.
        pub const D: [u64; 10] = [
            56195235, 13857412, 51736253, 6949390, 114729, 24766616, 60832955, 30306712, 48412415,
            21499315,
        ];
        /// 2d, in limbs.
        pub const D2: [u64; 10] = [
            45281625, 27714825, 36363642, 13898781, 229458, 15978800, 54557047, 27058993, 29715967,
            9444199,
        ];
        /// √−1, in limbs.
        pub const SQRT_M1: [u64; 10] = [
            34513072, 25610706, 9377949, 3500415, 12389472, 33281959, 41962654, 31548777, 326685,
            11406482,
        ];

        /// Where each limb starts, in bits.
        const OFFSET: [u32; 10] = [0, 26, 51, 77, 102, 128, 153, 179, 204, 230];

        impl F8 {
            /// Each lane's limbs in the ten-limb layout (see [`F8::stored`]).
            #[inline]
            #[$feature]
            pub fn to_lanes(self) -> [[u64; 10]; 8] {
                let stored = self.stored();
                core::array::from_fn(|lane| stored.lane(lane))
            }

            /// The product, reduced. See the layout's notes for what the operands may be.
            #[inline]
            #[$feature]
            pub fn mul(&self, g: &F8) -> F8 {
                // SAFETY: this function has the backend's target feature.
                unsafe { self.mul_inline(g) }
            }

            /// [`F8::mul`], always inlined: a point operation is a few multiplications, and LLVM
            /// declines to inline one this large (it then copies both operands through memory for
            /// each call), so the point operations on the hot path use this.
            ///
            /// # Safety
            /// Only in code compiled with the backend's target feature: the body of one of its
            /// `#[target_feature]` functions (into which this is inlined).
            #[inline(always)]
            pub unsafe fn mul_inline(&self, g: &F8) -> F8 {
                // SAFETY: the caller runs with the backend's target feature (this function's contract).
                unsafe { self.mul_body(g) }
            }

            /// The square, reduced.
            #[inline]
            #[$feature]
            pub fn square(&self) -> F8 {
                // SAFETY: this function has the backend's target feature.
                unsafe { self.square_inline() }
            }

            /// [`F8::square`], always inlined; see [`F8::mul_inline`].
            ///
            /// # Safety
            /// As for [`F8::mul_inline`].
            #[inline(always)]
            pub unsafe fn square_inline(&self) -> F8 {
                // SAFETY: the caller runs with the backend's target feature (this function's contract).
                unsafe { self.square_body() }
            }

            /// Lane `i` from the 32 little-endian bytes `bytes[i]`, ignoring bit 255 (as
            /// curve25519-dalek's `FieldElement::from_bytes` does). Values from p to 2²⁵⁵ − 1 are
            /// kept as they are: non-canonical, but the same element as the value minus p.
            #[inline]
            #[$feature]
            pub fn from_bytes(bytes: &[[u8; 32]; 8]) -> F8 {
                F8::from_lanes(&core::array::from_fn(|lane| limbs_from_bytes(&bytes[lane])))
            }

            /// `self^(p − 2)`: the inverse of a non-zero element, 0 for 0.
            #[cfg(test)]
            #[inline]
            #[$feature]
            pub fn invert(&self) -> F8 {
                let (t19, t3) = pow22501_each(&[*self]);
                square_n_each(t19, 5)[0].mul(&t3[0])
            }

            /// The lanes where `self` is 0 mod p; `self` must be reduced.
            #[inline]
            #[$feature]
            pub fn is_zero(&self) -> __mmask8 {
                let c = self.canonical();
                let mut any = c.0[0];
                for limb in &c.0[1..] {
                    any = _mm512_or_si512(any, *limb);
                }
                _mm512_cmpeq_epi64_mask(any, _mm512_setzero_si512())
            }

            /// The lanes where `self = b` mod p; both must be reduced.
            #[inline]
            #[$feature]
            pub fn eq(&self, b: &F8) -> __mmask8 {
                self.sub(b).carry().is_zero()
            }

            /// The lanes where `self`, reduced mod p, is odd ("negative" in Ed25519's sign
            /// convention); `self` must be reduced.
            #[inline]
            #[$feature]
            pub fn is_negative(&self) -> __mmask8 {
                _mm512_test_epi64_mask(self.canonical().0[0], splat(1))
            }

            /// Each lane as 32 canonical little-endian bytes; `self` must be reduced.
            #[cfg(test)]
            #[inline]
            #[$feature]
            pub fn to_bytes(self) -> [[u8; 32]; 8] {
                let lanes = self.canonical().to_lanes();
                core::array::from_fn(|lane| {
                    let mut words = [0u64; 4];
                    for i in 0..10 {
                        let (w, b) = ((OFFSET[i] / 64) as usize, OFFSET[i] % 64);
                        words[w] |= lanes[lane][i] << b;
                        if b > 38 && w < 3 {
                            words[w + 1] |= lanes[lane][i] >> (64 - b);
                        }
                    }
                    let mut out = [0u8; 32];
                    for (w, chunk) in words.iter().zip(out.chunks_mut(8)) {
                        chunk.copy_from_slice(&w.to_le_bytes());
                    }
                    out
                })
            }
        }

        /// Each element squared `k` times. The squarings of different elements are independent, so
        /// the CPU overlaps them: a chain of squarings alone waits on each one's carries.
        #[inline]
        #[$feature]
        fn square_n_each<const N: usize>(mut x: [F8; N], k: u32) -> [F8; N] {
            for _ in 0..k {
                for f in &mut x {
                    // SAFETY: this function has the backend's target feature, which `square_inline` needs.
                    *f = unsafe { f.square_inline() };
                }
            }
            x
        }

        /// `a[j]·b[j]` for each j.
        #[inline]
        #[$feature]
        fn mul_each<const N: usize>(a: &[F8; N], b: &[F8; N]) -> [F8; N] {
            let mut out = *a;
            for (o, b) in out.iter_mut().zip(b) {
                // SAFETY: this function has the backend's target feature, which `mul_inline` needs.
                *o = unsafe { o.mul_inline(b) };
            }
            out
        }

        /// `x^((p − 5)/8) = x^(2²⁵² − 3)` for each element of `x`, the exponentiations interleaved.
        #[inline]
        #[$feature]
        pub fn pow_p58_each<const N: usize>(x: &[F8; N]) -> [F8; N] {
            let (t19, _) = pow22501_each(x);
            mul_each(&square_n_each(t19, 2), x)
        }

        /// `(x^(2²⁵⁰ − 1), x^11)` for each element: the shared start of inversion and square root.
        #[inline]
        #[$feature]
        fn pow22501_each<const N: usize>(x: &[F8; N]) -> ([F8; N], [F8; N]) {
            let t0 = square_n_each(*x, 1); // 2
            let t1 = square_n_each(t0, 2); // 8
            let t2 = mul_each(x, &t1); // 9
            let t3 = mul_each(&t0, &t2); // 11
            let t4 = square_n_each(t3, 1); // 22
            let t5 = mul_each(&t2, &t4); // 2⁵ − 1
            let t6 = square_n_each(t5, 5);
            let t7 = mul_each(&t6, &t5); // 2¹⁰ − 1
            let t8 = square_n_each(t7, 10);
            let t9 = mul_each(&t8, &t7); // 2²⁰ − 1
            let t10 = square_n_each(t9, 20);
            let t11 = mul_each(&t10, &t9); // 2⁴⁰ − 1
            let t12 = square_n_each(t11, 10);
            let t13 = mul_each(&t12, &t7); // 2⁵⁰ − 1
            let t14 = square_n_each(t13, 50);
            let t15 = mul_each(&t14, &t13); // 2¹⁰⁰ − 1
            let t16 = square_n_each(t15, 100);
            let t17 = mul_each(&t16, &t15); // 2²⁰⁰ − 1
            let t18 = square_n_each(t17, 50);
            let t19 = mul_each(&t18, &t13); // 2²⁵⁰ − 1
            (t19, t3)
        }

        /// The limbs of 32 little-endian bytes, bit 255 ignored.
        pub fn limbs_from_bytes(bytes: &[u8; 32]) -> [u64; 10] {
            let words: [u64; 4] = core::array::from_fn(|w| {
                u64::from_le_bytes(bytes[8 * w..8 * w + 8].try_into().unwrap())
            });
            core::array::from_fn(|i| {
                let (w, b) = ((OFFSET[i] / 64) as usize, OFFSET[i] % 64);
                let width = if i.is_multiple_of(2) { 26 } else { 25 };
                let mut v = words[w] >> b;
                if b + width > 64 {
                    v |= words[w + 1] << (64 - b);
                }
                v & ((1 << width) - 1)
            })
        }
    };
}

/// This module's items, each function compiled with `$feature` (`#[target_feature]`):
/// see [`super`] for where they are written out.
macro_rules! field {
    ($feature:meta) => {
        use super::simd::*;
        field_common!($feature);

        const M26: i64 = (1 << 26) - 1;
        const M25: i64 = (1 << 25) - 1;

        /// 2p in the limb layout: what [`F8::sub`] adds so that a reduced subtrahend cannot take a
        /// limb below zero.
        const TWO_P: [u64; 10] = [
            2 * ((1 << 26) - 19),
            2 * ((1 << 25) - 1),
            2 * ((1 << 26) - 1),
            2 * ((1 << 25) - 1),
            2 * ((1 << 26) - 1),
            2 * ((1 << 25) - 1),
            2 * ((1 << 26) - 1),
            2 * ((1 << 25) - 1),
            2 * ((1 << 26) - 1),
            2 * ((1 << 25) - 1),
        ];


        /// Eight field elements, one per lane.
        #[derive(Clone, Copy)]
        pub struct F8(pub [__m512i; 10]);

        /// Eight elements in memory, limb `i` of lane `l` at `[i][l]` ([`F8::stored`]).
        pub struct StoredF8([[u64; 8]; 10]);

        impl StoredF8 {
            /// Lane `l`'s limbs.
            #[inline]
            pub fn lane(&self, l: usize) -> [u64; 10] {
                core::array::from_fn(|i| self.0[i][l])
            }
        }

        #[inline]
        #[$feature]
        fn splat(v: u64) -> __m512i {
            _mm512_set1_epi64(v as i64)
        }

        /// The bits limb `i` holds.
        #[inline]
        #[$feature]
        fn mask(i: usize) -> __m512i {
            splat(if i.is_multiple_of(2) { M26 } else { M25 } as u64)
        }

        /// What limb value `v` carries out of limb `i`.
        #[inline]
        #[$feature]
        fn shr(v: __m512i, i: usize) -> __m512i {
            if i.is_multiple_of(2) {
                _mm512_srli_epi64::<26>(v)
            } else {
                _mm512_srli_epi64::<25>(v)
            }
        }

        impl F8 {
            /// The same element, `limbs`, in every lane.
            #[inline]
            #[$feature]
            pub fn splat(limbs: &[u64; 10]) -> F8 {
                F8(limbs!(i => splat(limbs[i])))
            }

            /// 0 in every lane.
            #[inline]
            #[$feature]
            pub fn zero() -> F8 {
                F8([_mm512_setzero_si512(); 10])
            }

            /// 1 in every lane.
            #[inline]
            #[$feature]
            pub fn one() -> F8 {
                let mut f = F8::zero();
                f.0[0] = splat(1);
                f
            }

            /// Lane `i` from `limbs[i]`.
            #[inline]
            #[$feature]
            pub fn from_lanes(limbs: &[[u64; 10]; 8]) -> F8 {
                let mut t = [[0u64; 8]; 10];
                for lane in 0..8 {
                    for i in 0..10 {
                        t[i][lane] = limbs[lane][i];
                    }
                }
                // SAFETY: each `t[i]` is 64 readable bytes; the load has no alignment requirement.
                F8(limbs!(i => unsafe { _mm512_loadu_si512(t[i].as_ptr().cast()) }))
            }

            /// The lanes in memory, each read by [`StoredF8::lane`].
            #[inline]
            #[$feature]
            pub fn stored(self) -> StoredF8 {
                let mut t = [[0u64; 8]; 10];
                for i in 0..10 {
                    // SAFETY: `t[i]` is 64 writable bytes; the store has no alignment requirement.
                    unsafe { _mm512_storeu_si512(t[i].as_mut_ptr().cast(), self.0[i]) };
                }
                StoredF8(t)
            }

            /// Eight table rows' element, from its five words as gathered (`words[k]` holds limb
            /// 2k in its low half and limb 2k + 1 in its high half, as [`super::Row`]s do).
            #[inline]
            #[$feature]
            pub fn from_row_words(words: &[__m512i; 5]) -> F8 {
                let low = splat(0xffff_ffff);
                F8(limbs!(i => if i.is_multiple_of(2) {
                    _mm512_and_si512(words[i / 2], low)
                } else {
                    _mm512_srli_epi64::<32>(words[i / 2])
                }))
            }

            /// Limb-wise sum, not carried.
            #[inline]
            #[$feature]
            pub fn add(&self, b: &F8) -> F8 {
                F8(limbs!(i => _mm512_add_epi64(self.0[i], b.0[i])))
            }

            /// `self − b` as `self + 2p − b`, not carried; `b` must be reduced.
            #[inline]
            #[$feature]
            pub fn sub(&self, b: &F8) -> F8 {
                F8(limbs!(i => _mm512_sub_epi64(
                    _mm512_add_epi64(self.0[i], splat(TWO_P[i])),
                    b.0[i]
                )))
            }

            /// `−self` as `2p − self`; `self` must be reduced.
            #[inline]
            #[$feature]
            pub fn neg(&self) -> F8 {
                F8(limbs!(i => _mm512_sub_epi64(splat(TWO_P[i]), self.0[i])))
            }

            /// `b` in the lanes of `mask`, `self` in the others.
            #[inline]
            #[$feature]
            pub fn select(&self, mask: __mmask8, b: &F8) -> F8 {
                F8(limbs!(i => _mm512_mask_blend_epi64(mask, self.0[i], b.0[i])))
            }

            /// Carries each limb into the next, so that the result is reduced.
            #[inline]
            #[$feature]
            pub fn carry(&self) -> F8 {
                carry(self.0)
            }

            #[inline(always)]
            #[allow(unsafe_op_in_unsafe_fn)] // every statement is an intrinsic; see `mul_inline`
            unsafe fn mul_body(&self, g: &F8) -> F8 {
                let (f, g) = (self.0, g.0);
                let [_, f1, _, f3, _, f5, _, f7, _, f9] = f;
                let [_, g1, g2, g3, g4, g5, g6, g7, g8, g9] = g;
                // Only the low 32 bits of a lane take part in `vpmuludq`, so `g` may carry garbage in
                // its high halves (the gathered table points do).
                let n19 = splat(19);
                let g_19 = [
                    opaque(_mm512_mul_epu32(g1, n19)),
                    opaque(_mm512_mul_epu32(g2, n19)),
                    opaque(_mm512_mul_epu32(g3, n19)),
                    opaque(_mm512_mul_epu32(g4, n19)),
                    opaque(_mm512_mul_epu32(g5, n19)),
                    opaque(_mm512_mul_epu32(g6, n19)),
                    opaque(_mm512_mul_epu32(g7, n19)),
                    opaque(_mm512_mul_epu32(g8, n19)),
                    opaque(_mm512_mul_epu32(g9, n19)),
                ];
                // Two odd limbs' weights add up to one more bit than their product's limb holds.
                let f_2 = [
                    _mm512_add_epi64(f1, f1),
                    _mm512_add_epi64(f3, f3),
                    _mm512_add_epi64(f5, f5),
                    _mm512_add_epi64(f7, f7),
                    _mm512_add_epi64(f9, f9),
                ];
                // ref10's fe_mul: limb i + j ≥ 10 weighs 2²⁵⁵ times more, and 2²⁵⁵ ≡ 19.
                let [h0, h1, h2, h3, h4] = mul_limbs_0_to_4(f, f_2, g, g_19);
                let [h5, h6, h7, h8, h9] = mul_limbs_5_to_9(f, f_2, g, g_19);
                carry([h0, h1, h2, h3, h4, h5, h6, h7, h8, h9])
            }

            /// 55 products instead of 100 (ref10's `fe_sq`).
            #[inline(always)]
            #[allow(unsafe_op_in_unsafe_fn)] // every statement is an intrinsic; see `mul_inline`
            unsafe fn square_body(&self) -> F8 {
                let [f0, f1, f2, f3, f4, f5, f6, f7, f8, f9] = self.0;
                let f_2 = [
                    _mm512_add_epi64(f0, f0),
                    _mm512_add_epi64(f1, f1),
                    _mm512_add_epi64(f2, f2),
                    _mm512_add_epi64(f3, f3),
                    _mm512_add_epi64(f4, f4),
                    _mm512_add_epi64(f5, f5),
                    _mm512_add_epi64(f6, f6),
                    _mm512_add_epi64(f7, f7),
                ];
                let (n19, n38) = (splat(19), splat(38));
                let f_19 = [
                    opaque(_mm512_mul_epu32(f5, n38)),
                    opaque(_mm512_mul_epu32(f6, n19)),
                    opaque(_mm512_mul_epu32(f7, n38)),
                    opaque(_mm512_mul_epu32(f8, n19)),
                    opaque(_mm512_mul_epu32(f9, n38)),
                ];
                let [h0, h1, h2, h3, h4] = square_limbs_0_to_4(self.0, f_2, f_19);
                let [h5, h6, h7, h8, h9] = square_limbs_5_to_9(self.0, f_2, f_19);
                carry([h0, h1, h2, h3, h4, h5, h6, h7, h8, h9])
            }

            /// The unique representative below p, with every limb within its width; `self` must be
            /// reduced.
            #[inline]
            #[$feature]
            pub fn canonical(&self) -> F8 {
                let m25 = splat(M25 as u64);
                let mut h = self.0;
                // Two passes of carries with the wrap from 2²⁵⁵ to 19: after the first, every limb
                // but h0 fits its width and h0 is below 2²⁶ + 38; after the second, all fit and the
                // value is below 2²⁵⁵ (if the second pass wrapped, the limbs it left are tiny).
                for _ in 0..2 {
                    for i in 0..9 {
                        let c = shr(h[i], i);
                        h[i] = _mm512_and_si512(h[i], mask(i));
                        h[i + 1] = _mm512_add_epi64(h[i + 1], c);
                    }
                    let c = _mm512_srli_epi64::<25>(h[9]);
                    h[9] = _mm512_and_si512(h[9], m25);
                    h[0] = _mm512_add_epi64(h[0], _mm512_mul_epu32(c, splat(19)));
                }
                // q = 1 iff value ≥ p, i.e. iff value + 19 carries out of bit 255.
                let mut q = shr(_mm512_add_epi64(h[0], splat(19)), 0);
                for i in 1..10 {
                    q = shr(_mm512_add_epi64(h[i], q), i);
                }
                // Subtract q·p: add 19·q, carry, and drop bit 255.
                h[0] = _mm512_add_epi64(h[0], _mm512_mul_epu32(q, splat(19)));
                for i in 0..9 {
                    let c = shr(h[i], i);
                    h[i] = _mm512_and_si512(h[i], mask(i));
                    h[i + 1] = _mm512_add_epi64(h[i + 1], c);
                }
                h[9] = _mm512_and_si512(h[9], m25);
                F8(h)
            }

        }

        /// Limbs 0 to 4 of the product in `F8::mul_body`, not carried: each the sum of the ten
        /// `f_i·g_j` with `i + j` equal to its index mod 10, taking 19·g_j (`g_19[j − 1]`) where
        /// `i + j ≥ 10` and 2·f_i (`f_2[i / 2]`) where `i` and `j` are both odd.
        ///
        /// # Safety
        /// As for [`F8::mul_inline`].
        #[inline(always)]
        #[allow(unsafe_op_in_unsafe_fn)] // every statement is an intrinsic; see `F8::mul_inline`
        unsafe fn mul_limbs_0_to_4(
            f: [__m512i; 10],
            f_2: [__m512i; 5],
            g: [__m512i; 10],
            g_19: [__m512i; 9],
        ) -> [__m512i; 5] {
            let [f0, f1, f2, f3, f4, f5, f6, f7, f8, f9] = f;
            let [f1_2, f3_2, f5_2, f7_2, f9_2] = f_2;
            let [g0, g1, g2, g3, g4, _, _, _, _, _] = g;
            let [
                g1_19,
                g2_19,
                g3_19,
                g4_19,
                g5_19,
                g6_19,
                g7_19,
                g8_19,
                g9_19,
            ] = g_19;
            [
                sum10!([
                    mul32!(f0, g0),
                    mul32!(f1_2, g9_19),
                    mul32!(f2, g8_19),
                    mul32!(f3_2, g7_19),
                    mul32!(f4, g6_19),
                    mul32!(f5_2, g5_19),
                    mul32!(f6, g4_19),
                    mul32!(f7_2, g3_19),
                    mul32!(f8, g2_19),
                    mul32!(f9_2, g1_19),
                ]),
                sum10!([
                    mul32!(f0, g1),
                    mul32!(f1, g0),
                    mul32!(f2, g9_19),
                    mul32!(f3, g8_19),
                    mul32!(f4, g7_19),
                    mul32!(f5, g6_19),
                    mul32!(f6, g5_19),
                    mul32!(f7, g4_19),
                    mul32!(f8, g3_19),
                    mul32!(f9, g2_19),
                ]),
                sum10!([
                    mul32!(f0, g2),
                    mul32!(f1_2, g1),
                    mul32!(f2, g0),
                    mul32!(f3_2, g9_19),
                    mul32!(f4, g8_19),
                    mul32!(f5_2, g7_19),
                    mul32!(f6, g6_19),
                    mul32!(f7_2, g5_19),
                    mul32!(f8, g4_19),
                    mul32!(f9_2, g3_19),
                ]),
                sum10!([
                    mul32!(f0, g3),
                    mul32!(f1, g2),
                    mul32!(f2, g1),
                    mul32!(f3, g0),
                    mul32!(f4, g9_19),
                    mul32!(f5, g8_19),
                    mul32!(f6, g7_19),
                    mul32!(f7, g6_19),
                    mul32!(f8, g5_19),
                    mul32!(f9, g4_19),
                ]),
                sum10!([
                    mul32!(f0, g4),
                    mul32!(f1_2, g3),
                    mul32!(f2, g2),
                    mul32!(f3_2, g1),
                    mul32!(f4, g0),
                    mul32!(f5_2, g9_19),
                    mul32!(f6, g8_19),
                    mul32!(f7_2, g7_19),
                    mul32!(f8, g6_19),
                    mul32!(f9_2, g5_19),
                ]),
            ]
        }

        /// Limbs 5 to 9 of the product in `F8::mul_body`, not carried: each the sum of the ten
        /// `f_i·g_j` with `i + j` equal to its index mod 10, taking 19·g_j (`g_19[j − 1]`) where
        /// `i + j ≥ 10` and 2·f_i (`f_2[i / 2]`) where `i` and `j` are both odd.
        ///
        /// # Safety
        /// As for [`F8::mul_inline`].
        #[inline(always)]
        #[allow(unsafe_op_in_unsafe_fn)] // every statement is an intrinsic; see `F8::mul_inline`
        unsafe fn mul_limbs_5_to_9(
            f: [__m512i; 10],
            f_2: [__m512i; 5],
            g: [__m512i; 10],
            g_19: [__m512i; 9],
        ) -> [__m512i; 5] {
            let [f0, f1, f2, f3, f4, f5, f6, f7, f8, f9] = f;
            let [f1_2, f3_2, f5_2, f7_2, f9_2] = f_2;
            let [g0, g1, g2, g3, g4, g5, g6, g7, g8, g9] = g;
            let [_, _, _, _, _, g6_19, g7_19, g8_19, g9_19] = g_19;
            [
                sum10!([
                    mul32!(f0, g5),
                    mul32!(f1, g4),
                    mul32!(f2, g3),
                    mul32!(f3, g2),
                    mul32!(f4, g1),
                    mul32!(f5, g0),
                    mul32!(f6, g9_19),
                    mul32!(f7, g8_19),
                    mul32!(f8, g7_19),
                    mul32!(f9, g6_19),
                ]),
                sum10!([
                    mul32!(f0, g6),
                    mul32!(f1_2, g5),
                    mul32!(f2, g4),
                    mul32!(f3_2, g3),
                    mul32!(f4, g2),
                    mul32!(f5_2, g1),
                    mul32!(f6, g0),
                    mul32!(f7_2, g9_19),
                    mul32!(f8, g8_19),
                    mul32!(f9_2, g7_19),
                ]),
                sum10!([
                    mul32!(f0, g7),
                    mul32!(f1, g6),
                    mul32!(f2, g5),
                    mul32!(f3, g4),
                    mul32!(f4, g3),
                    mul32!(f5, g2),
                    mul32!(f6, g1),
                    mul32!(f7, g0),
                    mul32!(f8, g9_19),
                    mul32!(f9, g8_19),
                ]),
                sum10!([
                    mul32!(f0, g8),
                    mul32!(f1_2, g7),
                    mul32!(f2, g6),
                    mul32!(f3_2, g5),
                    mul32!(f4, g4),
                    mul32!(f5_2, g3),
                    mul32!(f6, g2),
                    mul32!(f7_2, g1),
                    mul32!(f8, g0),
                    mul32!(f9_2, g9_19),
                ]),
                sum10!([
                    mul32!(f0, g9),
                    mul32!(f1, g8),
                    mul32!(f2, g7),
                    mul32!(f3, g6),
                    mul32!(f4, g5),
                    mul32!(f5, g4),
                    mul32!(f6, g3),
                    mul32!(f7, g2),
                    mul32!(f8, g1),
                    mul32!(f9, g0),
                ]),
            ]
        }

        /// Limbs 0 to 4 of ref10's `fe_sq` square of `f`, not carried: `f_2[i]` is 2·f_i (a cross
        /// product appears twice, and two odd limbs' weights add up to one more bit than their
        /// product's limb holds), and `f_19` holds 38·f5, 19·f6, 38·f7, 19·f8 and 38·f9 (limb
        /// `i + j ≥ 10` weighs 2²⁵⁵ ≡ 19 times more).
        ///
        /// # Safety
        /// As for [`F8::mul_inline`].
        #[inline(always)]
        #[allow(unsafe_op_in_unsafe_fn)] // every statement is an intrinsic; see `F8::mul_inline`
        unsafe fn square_limbs_0_to_4(
            f: [__m512i; 10],
            f_2: [__m512i; 8],
            f_19: [__m512i; 5],
        ) -> [__m512i; 5] {
            let [f0, f1, f2, f3, f4, f5, f6, f7, _, _] = f;
            let [f0_2, f1_2, f2_2, f3_2, f4_2, f5_2, f6_2, _] = f_2;
            let [f5_38, f6_19, f7_38, f8_19, f9_38] = f_19;
            [
                add64!(
                    add64!(
                        add64!(mul32!(f0, f0), mul32!(f1_2, f9_38)),
                        add64!(mul32!(f2_2, f8_19), mul32!(f3_2, f7_38))
                    ),
                    add64!(mul32!(f4_2, f6_19), mul32!(f5, f5_38)),
                ),
                add64!(
                    add64!(
                        add64!(mul32!(f0_2, f1), mul32!(f2, f9_38)),
                        add64!(mul32!(f3_2, f8_19), mul32!(f4, f7_38))
                    ),
                    mul32!(f5_2, f6_19),
                ),
                add64!(
                    add64!(
                        add64!(mul32!(f0_2, f2), mul32!(f1_2, f1)),
                        add64!(mul32!(f3_2, f9_38), mul32!(f4_2, f8_19))
                    ),
                    add64!(mul32!(f5_2, f7_38), mul32!(f6, f6_19)),
                ),
                add64!(
                    add64!(
                        add64!(mul32!(f0_2, f3), mul32!(f1_2, f2)),
                        add64!(mul32!(f4, f9_38), mul32!(f5_2, f8_19))
                    ),
                    mul32!(f6, f7_38),
                ),
                add64!(
                    add64!(
                        add64!(mul32!(f0_2, f4), mul32!(f1_2, f3_2)),
                        add64!(mul32!(f2, f2), mul32!(f5_2, f9_38))
                    ),
                    add64!(mul32!(f6_2, f8_19), mul32!(f7, f7_38)),
                ),
            ]
        }

        /// Limbs 5 to 9 of ref10's `fe_sq` square of `f`, not carried: `f_2[i]` is 2·f_i (a cross
        /// product appears twice, and two odd limbs' weights add up to one more bit than their
        /// product's limb holds), and `f_19` holds 38·f5, 19·f6, 38·f7, 19·f8 and 38·f9 (limb
        /// `i + j ≥ 10` weighs 2²⁵⁵ ≡ 19 times more).
        ///
        /// # Safety
        /// As for [`F8::mul_inline`].
        #[inline(always)]
        #[allow(unsafe_op_in_unsafe_fn)] // every statement is an intrinsic; see `F8::mul_inline`
        unsafe fn square_limbs_5_to_9(
            f: [__m512i; 10],
            f_2: [__m512i; 8],
            f_19: [__m512i; 5],
        ) -> [__m512i; 5] {
            let [_, _, _, f3, f4, f5, f6, f7, f8, f9] = f;
            let [f0_2, f1_2, f2_2, f3_2, f4_2, f5_2, _, f7_2] = f_2;
            let [_, _, _, f8_19, f9_38] = f_19;
            [
                add64!(
                    add64!(
                        add64!(mul32!(f0_2, f5), mul32!(f1_2, f4)),
                        add64!(mul32!(f2_2, f3), mul32!(f6, f9_38))
                    ),
                    mul32!(f7_2, f8_19),
                ),
                add64!(
                    add64!(
                        add64!(mul32!(f0_2, f6), mul32!(f1_2, f5_2)),
                        add64!(mul32!(f2_2, f4), mul32!(f3_2, f3))
                    ),
                    add64!(mul32!(f7_2, f9_38), mul32!(f8, f8_19)),
                ),
                add64!(
                    add64!(
                        add64!(mul32!(f0_2, f7), mul32!(f1_2, f6)),
                        add64!(mul32!(f2_2, f5), mul32!(f3_2, f4))
                    ),
                    mul32!(f8, f9_38),
                ),
                add64!(
                    add64!(
                        add64!(mul32!(f0_2, f8), mul32!(f1_2, f7_2)),
                        add64!(mul32!(f2_2, f6), mul32!(f3_2, f5_2))
                    ),
                    add64!(mul32!(f4, f4), mul32!(f9, f9_38)),
                ),
                add64!(
                    add64!(
                        add64!(mul32!(f0_2, f9), mul32!(f1_2, f8)),
                        add64!(mul32!(f2_2, f7), mul32!(f3_2, f6))
                    ),
                    mul32!(f4_2, f5),
                ),
            ]
        }

        /// The carry chain of ref10's `fe_mul`, unsigned: two interleaved runs (from limbs 0 and 4)
        /// so that consecutive steps do not wait on each other, then the wrap from limb 9 to limb 0
        /// (2²⁵⁵ ≡ 19). Takes limbs below 2⁶³; leaves them reduced.
        #[inline]
        #[$feature]
        fn carry(mut h: [__m512i; 10]) -> F8 {
            let (m26, m25) = (splat(M26 as u64), splat(M25 as u64));
            macro_rules! step {
                ($i:expr, 26) => {{
                    let c = _mm512_srli_epi64::<26>(h[$i]);
                    h[$i] = _mm512_and_si512(h[$i], m26);
                    h[$i + 1] = _mm512_add_epi64(h[$i + 1], c);
                }};
                ($i:expr, 25) => {{
                    let c = _mm512_srli_epi64::<25>(h[$i]);
                    h[$i] = _mm512_and_si512(h[$i], m25);
                    h[$i + 1] = _mm512_add_epi64(h[$i + 1], c);
                }};
            }
            step!(0, 26);
            step!(4, 26);
            step!(1, 25);
            step!(5, 25);
            step!(2, 26);
            step!(6, 26);
            step!(3, 25);
            step!(7, 25);
            step!(4, 26);
            step!(8, 26);
            // c < 2³⁸, so 19·c = 16c + 2c + c cannot overflow (and `vpmuludq` would drop its high bits).
            let c = _mm512_srli_epi64::<25>(h[9]);
            h[9] = _mm512_and_si512(h[9], m25);
            let c19 = _mm512_add_epi64(
                _mm512_add_epi64(_mm512_slli_epi64::<4>(c), _mm512_slli_epi64::<1>(c)),
                c,
            );
            h[0] = _mm512_add_epi64(h[0], c19);
            step!(0, 26);
            F8(h)
        }
    };
}
