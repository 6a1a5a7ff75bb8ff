//! The AVX-512F intrinsics this backend uses, on AVX2: an eight-lane `__m512i` is a pair of
//! `__m256i` (lanes 0-3, then 4-7) and an `__mmask8` a plain `u8`, so the backend's one
//! source (`field`, `point`, `msm`, `sha512`) compiles unchanged for CPUs without AVX-512F,
//! each instruction becoming two (or, for the few AVX2 lacks, a short sequence).
//!
//! Every function is `#[target_feature(enable = "avx2")]` and `#[inline]`, like
//! `core::arch`'s own, so that it folds into the backend's AVX2 functions; none executes an
//! AVX-512 instruction. Each follows Intel's definition of the AVX-512 instruction it stands
//! for, lane by lane, as `emulated` does in scalar code; the test below holds each to that
//! definition.

#![allow(non_camel_case_types)] // the intrinsics' own names

use core::arch::x86_64::*;

pub use core::arch::x86_64::{
    __m256i, _MM_HINT_T0, _mm_prefetch, _mm256_loadu_si256, _mm256_mullo_epi32, _mm256_set1_epi32,
};

/// Eight 64-bit lanes: lanes 0-3 in the first register, 4-7 in the second.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct __m512i(__m256i, __m256i);

/// A bit per lane, lane 0 the lowest.
pub type __mmask8 = u8;

/// `op` on each half.
macro_rules! halves {
    ($op:ident($($arg:ident),*)) => {
        __m512i($op($($arg.0),*), $op($($arg.1),*))
    };
}

/// `vpaddq`, on each half.
#[inline]
#[target_feature(enable = "avx2")]
pub fn _mm512_add_epi64(a: __m512i, b: __m512i) -> __m512i {
    halves!(_mm256_add_epi64(a, b))
}

/// `vpsubq`, on each half.
#[inline]
#[target_feature(enable = "avx2")]
pub fn _mm512_sub_epi64(a: __m512i, b: __m512i) -> __m512i {
    halves!(_mm256_sub_epi64(a, b))
}

/// `vpmuludq`, on each half.
#[inline]
#[target_feature(enable = "avx2")]
pub fn _mm512_mul_epu32(a: __m512i, b: __m512i) -> __m512i {
    halves!(_mm256_mul_epu32(a, b))
}

/// `vpand`, on each half.
#[inline]
#[target_feature(enable = "avx2")]
pub fn _mm512_and_si512(a: __m512i, b: __m512i) -> __m512i {
    halves!(_mm256_and_si256(a, b))
}

/// `vpor`, on each half.
#[inline]
#[target_feature(enable = "avx2")]
pub fn _mm512_or_si512(a: __m512i, b: __m512i) -> __m512i {
    halves!(_mm256_or_si256(a, b))
}

/// A shift count for `vpsrlq`/`vpsllq`'s register form. Constant wherever the backend shifts,
/// so LLVM emits the immediate form (the AVX2 intrinsics' immediates are `i32` and these are
/// `u32`, which a const generic cannot convert).
#[inline]
#[target_feature(enable = "avx2")]
fn count(bits: u32) -> __m128i {
    _mm_cvtsi64_si128(bits as i64)
}

/// `vpsrlq`: shift right; a count of 64 or more gives 0, as with AVX-512's.
#[inline]
#[target_feature(enable = "avx2")]
pub fn _mm512_srli_epi64<const IMM8: u32>(a: __m512i) -> __m512i {
    let n = count(IMM8);
    __m512i(_mm256_srl_epi64(a.0, n), _mm256_srl_epi64(a.1, n))
}

/// `vpsllq`: shift left; a count of 64 or more gives 0, as with AVX-512's.
#[inline]
#[target_feature(enable = "avx2")]
pub fn _mm512_slli_epi64<const IMM8: u32>(a: __m512i) -> __m512i {
    let n = count(IMM8);
    __m512i(_mm256_sll_epi64(a.0, n), _mm256_sll_epi64(a.1, n))
}

/// `vprorq`, which AVX2 lacks: two shifts and an OR.
#[inline]
#[target_feature(enable = "avx2")]
pub fn _mm512_ror_epi64<const IMM8: i32>(a: __m512i) -> __m512i {
    let r = IMM8.rem_euclid(64) as u32;
    let (right, left) = (count(r), count(64 - r));
    let ror = |x: __m256i| _mm256_or_si256(_mm256_srl_epi64(x, right), _mm256_sll_epi64(x, left));
    __m512i(ror(a.0), ror(a.1))
}

/// `vpbroadcastq`.
#[inline]
#[target_feature(enable = "avx2")]
pub fn _mm512_set1_epi64(a: i64) -> __m512i {
    let v = _mm256_set1_epi64x(a);
    __m512i(v, v)
}

/// All zero bits.
#[inline]
#[target_feature(enable = "avx2")]
pub fn _mm512_setzero_si512() -> __m512i {
    __m512i(_mm256_setzero_si256(), _mm256_setzero_si256())
}

/// `vpternlogq`, which AVX2 lacks: each result bit is bit `4a + 2b + c` of `IMM8`. The three
/// tables the backend uses (0x96 a ⊕ b ⊕ c, 0xCA a ? b : c, 0xE8 majority) take two or three
/// instructions; any other is the OR of its minterms.
#[inline]
#[target_feature(enable = "avx2")]
pub fn _mm512_ternarylogic_epi64<const IMM8: i32>(a: __m512i, b: __m512i, c: __m512i) -> __m512i {
    let f = |a: __m256i, b: __m256i, c: __m256i| match IMM8 & 0xff {
        0x96 => _mm256_xor_si256(_mm256_xor_si256(a, b), c),
        // c ⊕ (a ∧ (b ⊕ c)): b where a is set, c elsewhere.
        0xCA => _mm256_xor_si256(c, _mm256_and_si256(a, _mm256_xor_si256(b, c))),
        // (a ∧ b) ∨ (c ∧ (a ∨ b)).
        0xE8 => _mm256_or_si256(
            _mm256_and_si256(a, b),
            _mm256_and_si256(c, _mm256_or_si256(a, b)),
        ),
        table => {
            let ones = _mm256_set1_epi64x(-1);
            let mut out = _mm256_setzero_si256();
            for index in 0..8 {
                if (table >> index) & 1 == 1 {
                    // The bits where (a, b, c) spell `index`.
                    let pick = |x: __m256i, bit: i32| {
                        if (index >> bit) & 1 == 1 {
                            x
                        } else {
                            _mm256_xor_si256(x, ones)
                        }
                    };
                    let term =
                        _mm256_and_si256(pick(a, 2), _mm256_and_si256(pick(b, 1), pick(c, 0)));
                    out = _mm256_or_si256(out, term);
                }
            }
            out
        }
    };
    __m512i(f(a.0, b.0, c.0), f(a.1, b.1, c.1))
}

/// The lanes whose 64-bit mask `m` (all ones or all zeros per lane) is set, as bits.
#[inline]
#[target_feature(enable = "avx2")]
fn movemask(m: __m512i) -> __mmask8 {
    let low = _mm256_movemask_pd(_mm256_castsi256_pd(m.0)) as u8;
    let high = _mm256_movemask_pd(_mm256_castsi256_pd(m.1)) as u8;
    low | (high << 4)
}

/// `vpcmpeqq` into a mask: lanes where `a` equals `b`.
#[inline]
#[target_feature(enable = "avx2")]
pub fn _mm512_cmpeq_epi64_mask(a: __m512i, b: __m512i) -> __mmask8 {
    movemask(halves!(_mm256_cmpeq_epi64(a, b)))
}

/// `vptestmq`: lanes where `a & b` is not zero.
#[inline]
#[target_feature(enable = "avx2")]
pub fn _mm512_test_epi64_mask(a: __m512i, b: __m512i) -> __mmask8 {
    !_mm512_cmpeq_epi64_mask(_mm512_and_si512(a, b), _mm512_setzero_si512())
}

/// `vpblendmq`: `b`'s lane where `k` is set, `a`'s elsewhere. The mask bits become lane masks
/// (a broadcast, an AND and a compare, shared by every blend with the same `k`), then
/// `vblendvpd` picks.
#[inline]
#[target_feature(enable = "avx2")]
pub fn _mm512_mask_blend_epi64(k: __mmask8, a: __m512i, b: __m512i) -> __m512i {
    let k = _mm256_set1_epi64x(k as i64);
    let lane_bit = |first: i64| {
        let bits = _mm256_setr_epi64x(first, first << 1, first << 2, first << 3);
        _mm256_cmpeq_epi64(_mm256_and_si256(k, bits), bits)
    };
    let blend = |a: __m256i, b: __m256i, m: __m256i| {
        _mm256_castpd_si256(_mm256_blendv_pd(
            _mm256_castsi256_pd(a),
            _mm256_castsi256_pd(b),
            _mm256_castsi256_pd(m),
        ))
    };
    __m512i(
        blend(a.0, b.0, lane_bit(1)),
        blend(a.1, b.1, lane_bit(1 << 4)),
    )
}

/// A 64-byte load as two 32-byte ones.
///
/// # Safety
/// `p` must be readable for 64 bytes.
#[inline]
#[target_feature(enable = "avx2")]
pub unsafe fn _mm512_loadu_si512(p: *const __m512i) -> __m512i {
    let p = p.cast::<__m256i>();
    // SAFETY: the caller's contract; the loads have no alignment requirement.
    unsafe { __m512i(_mm256_loadu_si256(p), _mm256_loadu_si256(p.add(1))) }
}

/// A 64-byte store as two 32-byte ones.
///
/// # Safety
/// `p` must be writable for 64 bytes.
#[inline]
#[target_feature(enable = "avx2")]
pub unsafe fn _mm512_storeu_si512(p: *mut __m512i, a: __m512i) {
    let p = p.cast::<__m256i>();
    // SAFETY: the caller's contract; the stores have no alignment requirement.
    unsafe {
        _mm256_storeu_si256(p, a.0);
        _mm256_storeu_si256(p.add(1), a.1);
    }
}

/// `vpgatherdq` of eight lanes as two of four: lane `l` reads the 8 bytes at
/// `base + offsets[l]·SCALE` bytes (the offsets signed).
///
/// # Safety
/// Every such address must be readable for 8 bytes.
#[inline]
#[target_feature(enable = "avx2")]
pub unsafe fn _mm512_i32gather_epi64<const SCALE: i32>(
    offsets: __m256i,
    base: *const i64,
) -> __m512i {
    // SAFETY: the caller's contract.
    unsafe {
        __m512i(
            _mm256_i32gather_epi64::<SCALE>(base, _mm256_castsi256_si128(offsets)),
            _mm256_i32gather_epi64::<SCALE>(base, _mm256_extracti128_si256::<1>(offsets)),
        )
    }
}

/// `v`, hidden from the optimiser (see `field`'s multiplication): an empty `asm!` on each
/// half.
#[inline]
#[target_feature(enable = "avx2")]
pub fn opaque(mut v: __m512i) -> __m512i {
    // SAFETY: the assembly is empty: it reads and writes nothing but the registers it is
    // given, which it leaves unchanged.
    unsafe {
        core::arch::asm!(
            "/* {0} {1} */",
            inout(ymm_reg) v.0,
            inout(ymm_reg) v.1,
            options(pure, nomem, nostack)
        )
    };
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Eight lanes of varied bits: all ones, zero, high bit alone, and pseudo-random words.
    fn lanes(seed: u64) -> [u64; 8] {
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        core::array::from_fn(|l| match l {
            0 => !0,
            1 => 0,
            2 => 1 << 63,
            _ => {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            }
        })
    }

    #[target_feature(enable = "avx2")]
    fn load(v: &[u64; 8]) -> __m512i {
        // SAFETY: `v` is 64 readable bytes.
        unsafe { _mm512_loadu_si512(v.as_ptr().cast()) }
    }

    #[target_feature(enable = "avx2")]
    fn store(v: __m512i) -> [u64; 8] {
        let mut out = [0u64; 8];
        // SAFETY: `out` is 64 writable bytes.
        unsafe { _mm512_storeu_si512(out.as_mut_ptr().cast(), v) };
        out
    }

    /// Each function against its instruction's definition, lane by lane (as `emulated`
    /// states them).
    #[target_feature(enable = "avx2")]
    fn check(seed: u64) {
        let (a, b, c) = (lanes(seed), lanes(seed + 1), lanes(seed + 2));
        let (va, vb, vc) = (load(&a), load(&b), load(&c));
        let each = |f: &dyn Fn(usize) -> u64| -> [u64; 8] { core::array::from_fn(f) };
        let mask = |f: &dyn Fn(usize) -> bool| (0..8).fold(0u8, |m, l| m | ((f(l) as u8) << l));
        assert_eq!(store(va), a);
        assert_eq!(
            store(_mm512_add_epi64(va, vb)),
            each(&|l| a[l].wrapping_add(b[l]))
        );
        assert_eq!(
            store(_mm512_sub_epi64(va, vb)),
            each(&|l| a[l].wrapping_sub(b[l]))
        );
        assert_eq!(
            store(_mm512_mul_epu32(va, vb)),
            each(&|l| (a[l] & 0xffff_ffff) * (b[l] & 0xffff_ffff))
        );
        assert_eq!(store(_mm512_and_si512(va, vb)), each(&|l| a[l] & b[l]));
        assert_eq!(store(_mm512_or_si512(va, vb)), each(&|l| a[l] | b[l]));
        assert_eq!(store(_mm512_srli_epi64::<25>(va)), each(&|l| a[l] >> 25));
        assert_eq!(store(_mm512_srli_epi64::<64>(va)), [0; 8]);
        assert_eq!(store(_mm512_slli_epi64::<4>(va)), each(&|l| a[l] << 4));
        assert_eq!(store(_mm512_slli_epi64::<70>(va)), [0; 8]);
        assert_eq!(store(opaque(va)), a);
        macro_rules! ror {
            ($($n:literal)*) => {$(
                assert_eq!(
                    store(_mm512_ror_epi64::<$n>(va)),
                    each(&|l| a[l].rotate_right($n % 64)),
                    "ror {}", $n
                );
            )*};
        }
        ror!(0 1 6 8 14 18 19 28 34 39 41 61 63 64);
        macro_rules! ternary {
            ($($imm:literal)*) => {$(
                let want = each(&|l| {
                    (0..64).fold(0u64, |out, bit| {
                        let index = ((a[l] >> bit & 1) << 2) | ((b[l] >> bit & 1) << 1) | (c[l] >> bit & 1);
                        out | ((($imm as u64) >> index & 1) << bit)
                    })
                });
                assert_eq!(store(_mm512_ternarylogic_epi64::<$imm>(va, vb, vc)), want, "{:#x}", $imm);
            )*};
        }
        ternary!(0x96 0xCA 0xE8 0x00 0xFF 0x01 0x80 0x5A 0x3C);
        assert_eq!(store(_mm512_set1_epi64(-2)), [!1; 8]);
        assert_eq!(store(_mm512_setzero_si512()), [0; 8]);
        let shifted = load(&each(&|l| a[l] >> (l % 3)));
        assert_eq!(
            _mm512_cmpeq_epi64_mask(va, shifted),
            mask(&|l| a[l] == a[l] >> (l % 3))
        );
        assert_eq!(_mm512_test_epi64_mask(va, vb), mask(&|l| a[l] & b[l] != 0));
        for k in [0u8, 0xff, 0x0f, 0xf0, 0xa5, 0x5a, 1, 0x80] {
            assert_eq!(
                store(_mm512_mask_blend_epi64(k, va, vb)),
                each(&|l| if k >> l & 1 == 1 { b[l] } else { a[l] }),
                "blend {k:#x}"
            );
        }
        // A gather from a table of 40 words, offsets in words (scale 8), one negative.
        let table: Vec<u64> = (0..40).map(|i| lanes(seed + 3)[i % 8] ^ i as u64).collect();
        let offsets: [i32; 8] = [0, 39, 7, 8, 15, 16, 3, 20];
        let base = table[10..].as_ptr().cast::<i64>();
        let relative: [i32; 8] = offsets.map(|o| o - 10);
        // SAFETY: `relative` is 32 readable bytes, and every lane reads a word of `table`.
        let got = unsafe {
            let index = _mm256_loadu_si256(relative.as_ptr().cast());
            _mm512_i32gather_epi64::<8>(index, base)
        };
        assert_eq!(store(got), each(&|l| table[offsets[l] as usize]));
    }

    #[test]
    fn each_intrinsic_does_what_its_avx512_instruction_does() {
        if !std::arch::is_x86_feature_detected!("avx2") {
            eprintln!("no AVX2 on this CPU: the AVX2 intrinsics' test does not run");
            return;
        }
        for seed in 0..50 {
            // SAFETY: the CPU has AVX2, checked above.
            unsafe { check(seed) };
        }
    }
}
