//! Each backend's arithmetic against curve25519-dalek: field laws at the limb bounds,
//! decompression lane by lane, the multiscalar multiplication on sums whose value dalek
//! computes, and the eight-lane SHA-512. Skipped (with a note) on CPUs that cannot run the
//! backend.

/// This module's items, each function compiled with `$feature` (`#[target_feature]`):
/// see [`super`] for where they are written out.
macro_rules! lanes_tests {
    ($feature:meta) => {
        use curve25519_dalek::constants::{ED25519_BASEPOINT_POINT as B, EIGHT_TORSION};
        use curve25519_dalek::edwards::{CompressedEdwardsY, EdwardsPoint};
        use curve25519_dalek::scalar::Scalar;
        use curve25519_dalek::traits::VartimeMultiscalarMul;
        use sha2::{Digest, Sha512};

        use super::field::F8;
        use super::msm::{self, Row, Term};
        use super::simd::{__m512i, _mm512_loadu_si512};
        use super::{NAME, point};

        fn skip() -> bool {
            if !super::available() {
                eprintln!("this CPU cannot run the {NAME} backend: its lane tests do not run");
                return true;
            }
            false
        }

        fn bytes(i: u64) -> [u8; 64] {
            Sha512::digest(i.to_le_bytes()).into()
        }

        fn scalar(i: u64) -> Scalar {
            Scalar::from_bytes_mod_order_wide(&bytes(i))
        }

        /// Field elements whose limbs sit at the top of what each shape allows, where an overflow
        /// of the bounds in field.rs would show first.
        fn extreme_lanes() -> [[u64; 10]; 8] {
            let top = |i: usize| {
                if i.is_multiple_of(2) {
                    (1u64 << 26) - 1
                } else {
                    (1u64 << 25) - 1
                }
            };
            core::array::from_fn(|lane| {
                core::array::from_fn(|i| match lane {
                    0 => top(i),
                    1 => 0,
                    2 => top(i) * (i as u64 % 2),
                    3 => top(i) * (1 - i as u64 % 2),
                    _ => {
                        u64::from_le_bytes(
                            bytes(lane as u64 * 10 + i as u64)[..8].try_into().unwrap(),
                        ) & top(i)
                    }
                })
            })
        }

        /// Lane values as integers mod p, via canonical bytes, for comparing shapes of one value.
        #[$feature]
        fn same(a: &F8, b: &F8) -> bool {
            a.to_bytes() == b.to_bytes()
        }

        #[$feature]
        fn field_laws() {
            let x = F8::from_lanes(&extreme_lanes());
            let y = F8::from_bytes(&core::array::from_fn(|l| {
                bytes(100 + l as u64)[..32].try_into().unwrap()
            }));
            let z = F8::from_lanes(&extreme_lanes()).square().add(&y).carry();
            // Commutative, associative, distributive, with sums and differences as operands.
            assert!(same(&x.mul(&y), &y.mul(&x)));
            assert!(same(&x.mul(&y).mul(&z), &x.mul(&y.mul(&z))));
            let xy_sum = x.add(&y);
            assert!(same(&xy_sum.mul(&z), &x.mul(&z).add(&y.mul(&z)).carry()));
            let xy_diff = x.sub(&y);
            assert!(same(&xy_diff.mul(&z), &x.mul(&z).sub(&y.mul(&z)).carry()));
            // Twice a reduced plus a reduced, the largest operand the point formulas use.
            let three = x.add(&x).add(&x);
            assert!(same(&three.mul(&three), &three.square()));
            assert!(same(&x.square(), &x.mul(&x)));
            assert!(same(&xy_diff.square(), &xy_diff.mul(&xy_diff)));
            // x·x⁻¹ = 1 where x ≠ 0 (lane 1 is 0, whose "inverse" is 0).
            let one = x.mul(&x.invert());
            let is_one = one.eq(&F8::one());
            assert_eq!(is_one, !0b10, "x·x⁻¹");
            assert_eq!(x.is_zero(), 0b10);
            // a − a = 0 and −a + a = 0.
            assert_eq!(x.sub(&x).carry().is_zero(), 0xff);
            assert_eq!(x.neg().add(&x).carry().is_zero(), 0xff);
            // Non-canonical bytes (p + 1 .. 2²⁵⁵ − 1) are the same element as their value − p.
            let mut p_plus = [[0xffu8; 32]; 8];
            let mut small = [[0u8; 32]; 8];
            for l in 0..8 {
                p_plus[l][0] = 0xed + l as u8;
                p_plus[l][31] = 0x7f;
                small[l][0] = l as u8;
            }
            assert!(same(&F8::from_bytes(&p_plus), &F8::from_bytes(&small)));
            assert_eq!(F8::from_bytes(&p_plus).to_bytes(), small);
        }

        #[test]
        fn field_arithmetic_obeys_the_field_laws_at_the_limb_bounds() {
            if skip() {
                return;
            }
            // SAFETY: the CPU runs this backend (checked by `skip`).
            unsafe { field_laws() }
        }

        /// The canonical bytes of Σ row halves (limb 2k at bit 51k, limb 2k + 1 at bit
        /// 51k + 26) mod p, in plain integer arithmetic: the value a gathered row stands for.
        fn row_value(halves: &[(u64, u64); 5]) -> [u8; 32] {
            let mut v = [0u64; 6];
            let mut add_at = |value: u64, bit: u32| {
                let (w, b) = ((bit / 64) as usize, bit % 64);
                let wide = (value as u128) << b;
                let mut carry = 0u128;
                for (i, part) in [wide as u64, (wide >> 64) as u64].into_iter().enumerate() {
                    let s = v[w + i] as u128 + part as u128 + carry;
                    v[w + i] = s as u64;
                    carry = s >> 64;
                }
                let mut i = w + 2;
                while carry != 0 {
                    let s = v[i] as u128 + carry;
                    v[i] = s as u64;
                    carry = s >> 64;
                    i += 1;
                }
            };
            for (k, (even, odd)) in halves.iter().enumerate() {
                add_at(*even, 51 * k as u32);
                add_at(*odd, 51 * k as u32 + 26);
            }
            // Fold the bits from 255 up as 19 each (2²⁵⁵ ≡ 19), twice, then subtract p once
            // if the value is still at least p.
            for _ in 0..2 {
                let high = (v[3] >> 63) | (v[4] << 1);
                v[3] &= u64::MAX >> 1;
                v[4] = 0;
                let mut carry = high as u128 * 19;
                for word in v.iter_mut().take(4) {
                    let s = *word as u128 + carry;
                    *word = s as u64;
                    carry = s >> 64;
                }
                v[4] = carry as u64;
            }
            let p = [u64::MAX - 18, u64::MAX, u64::MAX, u64::MAX >> 1];
            if v[4] == 0
                && (0..4).rev().map(|i| v[i].cmp(&p[i])).find(|o| o.is_ne())
                    != Some(std::cmp::Ordering::Less)
            {
                let mut borrow = 0i128;
                for i in 0..4 {
                    let d = v[i] as i128 - p[i] as i128 - borrow;
                    v[i] = d as u64;
                    borrow = (d < 0) as i128;
                }
            }
            let mut out = [0u8; 32];
            for (w, chunk) in v.iter().zip(out.chunks_mut(8)) {
                chunk.copy_from_slice(&w.to_le_bytes());
            }
            out
        }

        #[$feature]
        fn widest_row_operands() {
            // Row halves up to what a reduced ten-limb element leaves (even limbs below 2²⁶,
            // odd ones below 2²⁵ + 2¹⁷): the widest operands any backend gathers.
            let (even_top, odd_top) = ((1u64 << 26) - 1, (1u64 << 25) + (1 << 17) - 1);
            let halves: [[(u64, u64); 5]; 8] = core::array::from_fn(|lane| {
                core::array::from_fn(|k| {
                    let r = u64::from_le_bytes(
                        bytes(7000 + 5 * lane as u64 + k as u64)[..8]
                            .try_into()
                            .unwrap(),
                    );
                    match lane {
                        0 => (even_top, odd_top),
                        1 => (0, odd_top),
                        2 => (even_top, 0),
                        _ => (r % (even_top + 1), (r >> 32) % (odd_top + 1)),
                    }
                })
            });
            let element = |halves: &[[(u64, u64); 5]; 8]| {
                let words: [__m512i; 5] = core::array::from_fn(|k| {
                    let lanes: [u64; 8] =
                        core::array::from_fn(|l| halves[l][k].0 | (halves[l][k].1 << 32));
                    // SAFETY: `lanes` is 64 readable bytes; the load has no alignment requirement.
                    unsafe { _mm512_loadu_si512(lanes.as_ptr().cast()) }
                });
                F8::from_row_words(&words)
            };
            let wide = element(&halves);
            let canonical: [[u8; 32]; 8] = core::array::from_fn(|l| row_value(&halves[l]));
            assert_eq!(wide.to_bytes(), canonical);
            let narrow = F8::from_bytes(&canonical);
            let mut reversed = halves;
            reversed.reverse();
            let other = element(&reversed);
            let other_narrow = F8::from_bytes(&core::array::from_fn(|l| row_value(&reversed[l])));
            assert_eq!(
                wide.mul(&other).to_bytes(),
                narrow.mul(&other_narrow).to_bytes()
            );
            assert_eq!(wide.mul(&wide).to_bytes(), narrow.square().to_bytes());
            assert_eq!(wide.square().to_bytes(), narrow.square().to_bytes());
            assert_eq!(
                wide.add(&other).to_bytes(),
                narrow.add(&other_narrow).carry().to_bytes()
            );
            assert_eq!(
                wide.sub(&other).to_bytes(),
                narrow.sub(&other_narrow).carry().to_bytes()
            );
            // Every shape an operation leaves, as an operand of a product, against its value
            // re-read from canonical bytes: a sum or difference left too wide for the
            // multiplier (IFMA's takes 52 bits a limb) would give another product.
            let random = F8::from_bytes(&core::array::from_fn(|l| {
                bytes(7100 + l as u64)[..32].try_into().unwrap()
            }));
            let reread = |x: &F8| F8::from_bytes(&x.carry().to_bytes());
            let shapes = [
                wide,
                wide.add(&random),
                wide.sub(&random),
                random.sub(&wide),
                wide.neg(),
                wide.mul(&random),
                wide.add(&wide).add(&random),
                wide.add(&random).carry(),
                wide.neg().carry(),
            ];
            for (i, a) in shapes.iter().enumerate() {
                for (j, b) in shapes.iter().enumerate() {
                    assert_eq!(
                        a.mul(b).to_bytes(),
                        reread(a).mul(&reread(b)).to_bytes(),
                        "shapes {i} and {j}"
                    );
                }
                assert_eq!(
                    a.square().to_bytes(),
                    reread(a).square().to_bytes(),
                    "shape {i}"
                );
            }
        }

        #[test]
        fn operands_as_wide_as_a_table_row_multiply_like_their_canonical_values() {
            if skip() {
                return;
            }
            // SAFETY: the CPU runs this backend (checked by `skip`).
            unsafe { widest_row_operands() }
        }

        /// Encodings that decompression must decide like dalek: random bytes (half are points),
        /// every small y and its non-canonical y + p, both signs, y = ±1, and 0.
        fn encodings() -> Vec<[u8; 32]> {
            let mut out: Vec<[u8; 32]> = (0..400)
                .map(|i| bytes(1000 + i)[..32].try_into().unwrap())
                .collect();
            for y in 0u8..40 {
                for sign in [0u8, 0x80] {
                    let mut e = [0u8; 32];
                    e[0] = y;
                    e[31] = sign;
                    out.push(e);
                    let mut nc = [0xffu8; 32];
                    nc[0] = 0xed_u8.wrapping_add(y);
                    nc[31] = 0x7f | sign;
                    out.push(nc);
                }
            }
            for p in EIGHT_TORSION {
                out.push(p.compress().0);
            }
            for i in 0..50 {
                out.push((B * scalar(i)).compress().0);
            }
            out
        }

        #[test]
        fn decompression_decides_and_decodes_like_curve25519_dalek() {
            if skip() {
                return;
            }
            let encodings = encodings();
            let mut points = 0;
            for chunk in encodings.chunks(8) {
                let mut lanes = [[0u8; 32]; 8];
                lanes[..chunk.len()].copy_from_slice(chunk);
                // SAFETY: the CPU runs this backend (checked by `skip`).
                let (is_point, x, y) = unsafe { point::decompress(&lanes) };
                // SAFETY: as above.
                let compressed = unsafe { affine_compress(&x, &y) };
                for (lane, e) in chunk.iter().enumerate() {
                    let dalek = CompressedEdwardsY(*e).decompress();
                    assert_eq!(is_point >> lane & 1 == 1, dalek.is_some(), "{e:02x?}");
                    if let Some(p) = dalek {
                        assert_eq!(compressed[lane], p.compress().0, "{e:02x?}");
                        points += 1;
                    }
                }
            }
            assert!(
                points > 250 && points < encodings.len() - 100,
                "{points} points"
            );
        }

        #[$feature]
        fn affine_compress(x: &F8, y: &F8) -> [[u8; 32]; 8] {
            let negative = x.is_negative();
            let mut out = y.to_bytes();
            for (lane, bytes) in out.iter_mut().enumerate() {
                bytes[31] |= ((negative >> lane) & 1) << 7;
            }
            out
        }

        /// The table row of `p` (any point), via its encoding.
        fn row_of(p: &EdwardsPoint) -> Row {
            let e = p.compress().0;
            // SAFETY: the callers check that the CPU runs this backend.
            let (is_point, rows) = unsafe { super::decompress_rows(std::iter::once(&e)) };
            assert_eq!(is_point, 1, "a point");
            rows[0]
        }

        /// Σ sᵢPᵢ − Q with Q = dalek's value of Σ sᵢPᵢ: the identity, so `is_identity_times_8` must
        /// say so; and with one scalar off by one (Pᵢ of large order), it must not.
        #[test]
        fn multiscalar_multiplication_agrees_with_curve25519_dalek_at_every_window_width() {
            if skip() {
                return;
            }
            for (n, bits) in [
                (1, 253),
                (2, 128),
                (7, 253),
                (40, 128),
                (200, 253),
                (1200, 128),
            ] {
                let points: Vec<EdwardsPoint> =
                    (0..n).map(|i| B * scalar(5000 + i as u64)).collect();
                let scalars: Vec<Scalar> = (0..n)
                    .map(|i| {
                        let mut b = bytes(9000 + i as u64);
                        if bits == 128 {
                            b[16..].fill(0);
                        }
                        Scalar::from_bytes_mod_order_wide(&b)
                    })
                    .collect();
                let q = EdwardsPoint::vartime_multiscalar_mul(&scalars, &points);
                let mut table = vec![msm::IDENTITY_ROW];
                let mut terms = Vec::new();
                for (p, s) in points.iter().zip(&scalars) {
                    table.push(row_of(p));
                    terms.push(Term {
                        scalar: s.to_bytes(),
                        row: table.len() as u32 - 1,
                        bits,
                    });
                }
                table.push(row_of(&q));
                terms.push(Term {
                    scalar: (-Scalar::ONE).to_bytes(),
                    row: table.len() as u32 - 1,
                    bits: 253,
                });
                // A torsion point with coefficient 8: invisible to the cofactored check.
                table.push(row_of(&EIGHT_TORSION[3]));
                terms.push(Term {
                    scalar: Scalar::from(8u8).to_bytes(),
                    row: table.len() as u32 - 1,
                    bits: 253,
                });
                // SAFETY: the CPU runs this backend (checked by `skip`).
                assert!(
                    unsafe { msm::is_identity_times_8(&terms, &table) },
                    "{n} terms"
                );
                terms[0].scalar =
                    (Scalar::from_bytes_mod_order(terms[0].scalar) + Scalar::ONE).to_bytes();
                // SAFETY: as above.
                assert!(
                    !unsafe { msm::is_identity_times_8(&terms, &table) },
                    "{n} terms, one off"
                );
            }
        }

        #[test]
        fn eight_lane_sha512_matches_sha2() {
            if skip() {
                return;
            }
            for round in 0..20u64 {
                let messages: [[u8; 96]; 8] = core::array::from_fn(|l| {
                    let mut m = [0u8; 96];
                    m[..64].copy_from_slice(&bytes(round * 8 + l as u64));
                    m[64..].copy_from_slice(&bytes(7777 + round * 8 + l as u64)[..32]);
                    if round == 0 {
                        m = [(l as u8).wrapping_mul(0x55); 96]; // all-equal bytes, 0x00 and 0xff among them
                    }
                    m
                });
                // SAFETY: the CPU runs this backend (checked by `skip`).
                let digests = unsafe { super::sha512::sha512_96(&messages) };
                for (m, d) in messages.iter().zip(digests) {
                    assert_eq!(d, <[u8; 64]>::from(Sha512::digest(m)));
                }
            }
        }
    };
}
