//! Points of the Ed25519 curve, eight at a time (one per lane), and their decompression.
//!
//! The formulas are curve25519-dalek's serial ones (extended coordinates of Hisil, Wong,
//! Carter and Dawson, via "completed" points), so each lane computes what dalek would.

/// This module's items, each function compiled with `$feature` (`#[target_feature]`):
/// see [`super`] for where they are written out.
macro_rules! point {
    ($feature:meta) => {
        use super::simd::*;

        use super::field::{D, D2, F8, SQRT_M1, StoredF8, pow_p58_each};

        /// Eight points in extended coordinates: x = X/Z, y = Y/T... precisely x = X/Z, y = Y/Z,
        /// xy = T/Z. Coordinates are reduced.
        #[derive(Clone, Copy)]
        pub struct Ext8 {
            pub X: F8,
            pub Y: F8,
            pub Z: F8,
            pub T: F8,
        }

        /// Eight points in memory ([`Ext8::stored`]).
        pub struct StoredExt8([StoredF8; 4]);

        impl StoredExt8 {
            /// Lane `l`'s X, Y, Z, T limbs.
            #[inline]
            pub fn lane(&self, l: usize) -> [u64; 40] {
                let mut out = [0u64; 40];
                for (k, coordinate) in self.0.iter().enumerate() {
                    out[10 * k..10 * k + 10].copy_from_slice(&coordinate.lane(l));
                }
                out
            }
        }

        /// Eight affine points as an addend: (y + x, y − x, 2d·x·y), each reduced.
        #[derive(Clone, Copy)]
        pub struct AffineNiels8 {
            pub y_plus_x: F8,
            pub y_minus_x: F8,
            pub xy2d: F8,
        }

        impl AffineNiels8 {
            /// The points themselves (negated in the lanes of `negate`), in extended coordinates:
            /// with a = y + x and b = y − x (swapped to negate), (X : Y : Z : T) = (2(a − b) :
            /// 2(a + b) : 4 : (a − b)(a + b)), which is (4x : 4y : 4 : 4xy).
            #[inline]
            #[$feature]
            pub fn to_extended(self, negate: __mmask8) -> Ext8 {
                let a = self.y_plus_x.select(negate, &self.y_minus_x);
                let b = self.y_minus_x.select(negate, &self.y_plus_x);
                let two_x = a.sub(&b).carry();
                let two_y = a.add(&b).carry();
                let mut four = F8::zero();
                four.0[0] = _mm512_set1_epi64(4);
                Ext8 {
                    X: two_x.add(&two_x).carry(),
                    Y: two_y.add(&two_y).carry(),
                    Z: four,
                    // SAFETY: this function has the backend's target feature, which `mul_inline` needs.
                    T: unsafe { two_x.mul_inline(&two_y) },
                }
            }
        }

        /// Eight points as an addend in projective form: (Y + X, Y − X, Z, 2d·T).
        #[derive(Clone, Copy)]
        pub struct ProjectiveNiels8 {
            pub Y_plus_X: F8,
            pub Y_minus_X: F8,
            pub Z: F8,
            pub T2d: F8,
        }

        /// The four coordinates of a "completed" point: x = X/Z, y = Y/T.
        struct Completed8 {
            X: F8,
            Y: F8,
            Z: F8,
            T: F8,
        }

        impl Completed8 {
            #[inline]
            #[$feature]
            fn to_extended(&self) -> Ext8 {
                // SAFETY: this function has the backend's target feature, which `mul_inline` needs.
                unsafe {
                    Ext8 {
                        X: self.X.mul_inline(&self.T),
                        Y: self.Y.mul_inline(&self.Z),
                        Z: self.Z.mul_inline(&self.T),
                        T: self.X.mul_inline(&self.Y),
                    }
                }
            }
        }

        impl Ext8 {
            /// The identity (0, 1) in every lane.
            #[inline]
            #[$feature]
            pub fn identity() -> Ext8 {
                Ext8 {
                    X: F8::zero(),
                    Y: F8::one(),
                    Z: F8::one(),
                    T: F8::zero(),
                }
            }

            /// Lane `l` from `lanes[l]`: X, Y, Z, T, ten limbs each, reduced.
            #[inline]
            #[$feature]
            pub fn from_lanes(lanes: &[[u64; 40]; 8]) -> Ext8 {
                let coordinate = |k: usize| -> [[u64; 10]; 8] {
                    core::array::from_fn(|l| {
                        lanes[l][10 * k..10 * k + 10].try_into().expect("10 limbs")
                    })
                };
                Ext8 {
                    X: F8::from_lanes(&coordinate(0)),
                    Y: F8::from_lanes(&coordinate(1)),
                    Z: F8::from_lanes(&coordinate(2)),
                    T: F8::from_lanes(&coordinate(3)),
                }
            }

            /// The same point, 40 limbs, in every lane.
            #[inline]
            #[$feature]
            pub fn splat(limbs: &[u64; 40]) -> Ext8 {
                Ext8::from_lanes(&[*limbs; 8])
            }

            /// Each lane's X, Y, Z, T limbs.
            #[inline]
            #[$feature]
            pub fn to_lanes(self) -> [[u64; 40]; 8] {
                let stored = self.stored();
                core::array::from_fn(|l| stored.lane(l))
            }

            /// The lanes in memory, each read by [`StoredExt8::lane`]: what a caller that wants
            /// some lanes only pays, where [`Ext8::to_lanes`] lays out all eight.
            #[inline]
            #[$feature]
            pub fn stored(self) -> StoredExt8 {
                StoredExt8([
                    self.X.stored(),
                    self.Y.stored(),
                    self.Z.stored(),
                    self.T.stored(),
                ])
            }

            /// `b` in the lanes of `mask`, `self` in the others.
            #[inline]
            #[$feature]
            pub fn select(&self, mask: __mmask8, b: &Ext8) -> Ext8 {
                Ext8 {
                    X: self.X.select(mask, &b.X),
                    Y: self.Y.select(mask, &b.Y),
                    Z: self.Z.select(mask, &b.Z),
                    T: self.T.select(mask, &b.T),
                }
            }

            /// `self + q` in the lanes not in `negate`, `self − q` in those: negating an affine
            /// point swaps y + x with y − x and negates 2dxy, which here swaps the completed point's
            /// Z and T.
            #[inline]
            #[$feature]
            pub fn add_affine(&self, q: &AffineNiels8, negate: __mmask8) -> Ext8 {
                let ypx = q.y_plus_x.select(negate, &q.y_minus_x);
                let ymx = q.y_minus_x.select(negate, &q.y_plus_x);
                // SAFETY: this function has the backend's target feature, which `mul_inline` needs.
                let (PP, MM, Txy2d) = unsafe {
                    (
                        self.Y.add(&self.X).mul_inline(&ypx),
                        self.Y.sub(&self.X).mul_inline(&ymx),
                        self.T.mul_inline(&q.xy2d),
                    )
                };
                let Z2 = self.Z.add(&self.Z).carry();
                let plus = Z2.add(&Txy2d);
                let minus = Z2.sub(&Txy2d);
                Completed8 {
                    X: PP.sub(&MM),
                    Y: PP.add(&MM),
                    Z: plus.select(negate, &minus),
                    T: minus.select(negate, &plus),
                }
                .to_extended()
            }

            /// `self` as an addend for [`Ext8::add_projective`].
            #[inline]
            #[$feature]
            pub fn to_projective_niels(self) -> ProjectiveNiels8 {
                ProjectiveNiels8 {
                    Y_plus_X: self.Y.add(&self.X),
                    Y_minus_X: self.Y.sub(&self.X),
                    Z: self.Z,
                    // SAFETY: this function has the backend's target feature, which `mul_inline` needs.
                    T2d: unsafe { self.T.mul_inline(&F8::splat(&D2)) },
                }
            }

            /// `self + q`.
            #[inline]
            #[$feature]
            pub fn add_projective(&self, q: &ProjectiveNiels8) -> Ext8 {
                // SAFETY: this function has the backend's target feature, which `mul_inline` needs.
                let (PP, MM, TT2d, ZZ) = unsafe {
                    (
                        self.Y.add(&self.X).mul_inline(&q.Y_plus_X),
                        self.Y.sub(&self.X).mul_inline(&q.Y_minus_X),
                        self.T.mul_inline(&q.T2d),
                        self.Z.mul_inline(&q.Z),
                    )
                };
                let ZZ2 = ZZ.add(&ZZ).carry();
                Completed8 {
                    X: PP.sub(&MM),
                    Y: PP.add(&MM),
                    Z: ZZ2.add(&TT2d),
                    T: ZZ2.sub(&TT2d),
                }
                .to_extended()
            }

            /// `self + self`.
            #[inline]
            #[$feature]
            pub fn double(&self) -> Ext8 {
                // SAFETY: this function has the backend's target feature, which `square_inline` needs.
                let (XX, YY, ZZ) = unsafe {
                    (
                        self.X.square_inline(),
                        self.Y.square_inline(),
                        self.Z.square_inline(),
                    )
                };
                let ZZ2 = ZZ.add(&ZZ).carry();
                // SAFETY: as above.
                let X_plus_Y_sq = unsafe { self.X.add(&self.Y).square_inline() };
                let YY_plus_XX = YY.add(&XX).carry();
                let YY_minus_XX = YY.sub(&XX).carry();
                Completed8 {
                    X: X_plus_Y_sq.sub(&YY_plus_XX),
                    Y: YY_plus_XX,
                    Z: YY_minus_XX,
                    T: ZZ2.sub(&YY_minus_XX),
                }
                .to_extended()
            }

            /// The lanes whose point is the identity.
            #[inline]
            #[$feature]
            pub fn is_identity(&self) -> __mmask8 {
                self.X.is_zero() & self.Y.eq(&self.Z)
            }
        }

        /// Decompresses eight encodings at once exactly as curve25519-dalek's
        /// `CompressedEdwardsY::decompress` does (its `sqrt_ratio_i`, step by step): returns the
        /// lanes that are points and each lane's affine (x, y), reduced. Non-canonical y (from p to
        /// 2²⁵⁵ − 1) is taken mod p, and the sign bit of x = 0 is ignored, as ZIP-215 wants.
        #[inline]
        #[$feature]
        pub fn decompress(encodings: &[[u8; 32]; 8]) -> (__mmask8, F8, F8) {
            decompress_each(&[*encodings])[0]
        }

        /// [`decompress`] for `N` sets of eight encodings, their square roots interleaved (a chain
        /// of 250 squarings alone waits on each one's carries).
        #[inline]
        #[$feature]
        pub fn decompress_each<const N: usize>(
            sets: &[[[u8; 32]; 8]; N],
        ) -> [(__mmask8, F8, F8); N] {
            let one = F8::one();
            let mut u = [one; N];
            let mut v = [one; N];
            let mut v3 = [one; N];
            let mut y = [one; N];
            let mut base = [one; N];
            for j in 0..N {
                y[j] = F8::from_bytes(&sets[j]);
                let yy = y[j].square();
                u[j] = yy.sub(&one).carry(); // y² − 1
                v[j] = yy.mul(&F8::splat(&D)).add(&one).carry(); // d·y² + 1
                v3[j] = v[j].square().mul(&v[j]);
                let v7 = v3[j].square().mul(&v[j]);
                base[j] = u[j].mul(&v7);
            }
            // sqrt_ratio_i(u, v): r = (u·v³)·(u·v⁷)^((p−5)/8).
            let powered = pow_p58_each(&base);
            core::array::from_fn(|j| {
                let (u, v) = (u[j], v[j]);
                let mut r = u.mul(&v3[j]).mul(&powered[j]);
                let check = v.mul(&r.square());
                let minus_u = u.neg().carry();
                let correct_sign = check.eq(&u);
                let flipped_sign = check.eq(&minus_u);
                let flipped_sign_i = check.eq(&minus_u.mul(&F8::splat(&SQRT_M1)));
                let r_prime = r.mul(&F8::splat(&SQRT_M1));
                r = r.select(flipped_sign | flipped_sign_i, &r_prime);
                // The non-negative root, then the sign the encoding asks for.
                let mut sign: __mmask8 = 0;
                for (lane, e) in sets[j].iter().enumerate() {
                    sign |= (e[31] >> 7) << lane;
                }
                let negate = r.is_negative() ^ sign;
                let x = r.select(negate, &r.neg().carry());
                (correct_sign | flipped_sign, x, y[j].carry())
            })
        }

        /// The affine-Niels form of eight affine points.
        #[inline]
        #[$feature]
        pub fn affine_niels(x: &F8, y: &F8) -> AffineNiels8 {
            AffineNiels8 {
                y_plus_x: y.add(x).carry(),
                y_minus_x: y.sub(x).carry(),
                xy2d: x.mul(y).mul(&F8::splat(&D2)),
            }
        }
    };
}
