//! A scalar stand-in for the AVX-512F intrinsics this backend uses, lane by lane as Intel's
//! Intrinsics Guide defines each, compiled in place of `core::arch::x86_64`'s with the
//! `emulated-avx512` feature.
//!
//! It lets the backend's own logic (the limb bounds and carries of `field`, decompression,
//! the 8-lane SHA-512, Pippenger's buckets, bisection) run on a CPU without AVX-512F, so the
//! differential fuzzer (`fuzz/fuzz_targets/verify_differential.rs`) and the tests can check
//! it against curve25519-dalek there, as CI's machines lack AVX-512F. It cannot find a
//! difference between this emulation and the silicon: the tests that run with real AVX-512F
//! (the same tests, without the feature) cover that. Roughly ten times slower than the
//! real instructions; never for a node.

#![allow(non_camel_case_types)] // the intrinsics' own names

use core::ptr::{read_unaligned, write_unaligned};

pub use core::arch::x86_64::{__mmask8, _MM_HINT_T0};

/// Eight 64-bit lanes.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
pub struct __m512i([u64; 8]);

/// Eight 32-bit lanes.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(32))]
pub struct __m256i([u32; 8]);

#[inline(always)]
fn each(f: impl Fn(usize) -> u64) -> __m512i {
    __m512i(core::array::from_fn(f))
}

#[inline(always)]
fn mask(f: impl Fn(usize) -> bool) -> __mmask8 {
    (0..8).fold(0, |m, l| m | ((f(l) as u8) << l))
}

/// `prefetcht0`: a hint with no effect on any result, so nothing.
#[inline(always)]
pub fn _mm_prefetch<const STRATEGY: i32>(_p: *const i8) {}

/// `vpaddq`: lane sums, wrapping.
#[inline(always)]
pub fn _mm512_add_epi64(a: __m512i, b: __m512i) -> __m512i {
    each(|l| a.0[l].wrapping_add(b.0[l]))
}

/// `vpsubq`: lane differences, wrapping.
#[inline(always)]
pub fn _mm512_sub_epi64(a: __m512i, b: __m512i) -> __m512i {
    each(|l| a.0[l].wrapping_sub(b.0[l]))
}

/// `vpmuludq`: the low 32 bits of each lane, multiplied into 64.
#[inline(always)]
pub fn _mm512_mul_epu32(a: __m512i, b: __m512i) -> __m512i {
    each(|l| (a.0[l] & 0xffff_ffff) * (b.0[l] & 0xffff_ffff))
}

/// `vprorq`: rotate right by the count mod 64.
#[inline(always)]
pub fn _mm512_ror_epi64<const IMM8: i32>(a: __m512i) -> __m512i {
    each(|l| a.0[l].rotate_right(IMM8 as u32 % 64))
}

/// `vpsrlq`: shift right; a count of 64 or more gives 0.
#[inline(always)]
pub fn _mm512_srli_epi64<const IMM8: u32>(a: __m512i) -> __m512i {
    each(|l| a.0[l].checked_shr(IMM8).unwrap_or(0))
}

/// `vpsllq`: shift left; a count of 64 or more gives 0.
#[inline(always)]
pub fn _mm512_slli_epi64<const IMM8: u32>(a: __m512i) -> __m512i {
    each(|l| a.0[l].checked_shl(IMM8).unwrap_or(0))
}

/// `vpbroadcastq`.
#[inline(always)]
pub fn _mm512_set1_epi64(a: i64) -> __m512i {
    __m512i([a as u64; 8])
}

/// All zero bits.
#[inline(always)]
pub fn _mm512_setzero_si512() -> __m512i {
    __m512i([0; 8])
}

/// `vpandq`.
#[inline(always)]
pub fn _mm512_and_si512(a: __m512i, b: __m512i) -> __m512i {
    each(|l| a.0[l] & b.0[l])
}

/// `vporq`.
#[inline(always)]
pub fn _mm512_or_si512(a: __m512i, b: __m512i) -> __m512i {
    each(|l| a.0[l] | b.0[l])
}

/// `vpternlogq`: each result bit is bit `4a + 2b + c` of `IMM8`, for the bits of `a`, `b`
/// and `c` in that position.
#[inline(always)]
pub fn _mm512_ternarylogic_epi64<const IMM8: i32>(a: __m512i, b: __m512i, c: __m512i) -> __m512i {
    each(|l| {
        (0..8).fold(0u64, |out, index| {
            if (IMM8 >> index) & 1 == 0 {
                return out;
            }
            // The bits where (a, b, c) spell `index`.
            let pick = |x: u64, bit: i32| if (index >> bit) & 1 == 1 { x } else { !x };
            out | (pick(a.0[l], 2) & pick(b.0[l], 1) & pick(c.0[l], 0))
        })
    })
}

/// `vptestmq`: lanes where `a & b` is not zero.
#[inline(always)]
pub fn _mm512_test_epi64_mask(a: __m512i, b: __m512i) -> __mmask8 {
    mask(|l| a.0[l] & b.0[l] != 0)
}

/// `vpcmpeqq`: lanes where `a` equals `b`.
#[inline(always)]
pub fn _mm512_cmpeq_epi64_mask(a: __m512i, b: __m512i) -> __mmask8 {
    mask(|l| a.0[l] == b.0[l])
}

/// `vpblendmq`: `b`'s lane where `k` is set, `a`'s elsewhere.
#[inline(always)]
pub fn _mm512_mask_blend_epi64(k: __mmask8, a: __m512i, b: __m512i) -> __m512i {
    each(|l| if (k >> l) & 1 == 1 { b.0[l] } else { a.0[l] })
}

/// `vmovdqu64` load.
///
/// # Safety
/// `p` must be readable for 64 bytes.
#[inline(always)]
pub unsafe fn _mm512_loadu_si512(p: *const __m512i) -> __m512i {
    // SAFETY: the caller's contract.
    unsafe { read_unaligned(p) }
}

/// `vmovdqu64` store.
///
/// # Safety
/// `p` must be writable for 64 bytes.
#[inline(always)]
pub unsafe fn _mm512_storeu_si512(p: *mut __m512i, a: __m512i) {
    // SAFETY: the caller's contract.
    unsafe { write_unaligned(p, a) }
}

/// `vpgatherdq`: lane `l` reads the 8 bytes at `base + offsets[l]·SCALE` bytes (the offsets
/// signed).
///
/// # Safety
/// Every such address must be readable for 8 bytes.
#[inline(always)]
pub unsafe fn _mm512_i32gather_epi64<const SCALE: i32>(
    offsets: __m256i,
    base: *const i64,
) -> __m512i {
    each(|l| {
        let bytes = offsets.0[l] as i32 as isize * SCALE as isize;
        // SAFETY: the caller's contract.
        unsafe { read_unaligned(base.cast::<u8>().wrapping_offset(bytes).cast::<u64>()) }
    })
}

/// `vmovdqu` load of 32 bytes.
///
/// # Safety
/// `p` must be readable for 32 bytes.
#[inline(always)]
pub unsafe fn _mm256_loadu_si256(p: *const __m256i) -> __m256i {
    // SAFETY: the caller's contract.
    unsafe { read_unaligned(p) }
}

/// `vpbroadcastd`.
#[inline(always)]
pub fn _mm256_set1_epi32(a: i32) -> __m256i {
    __m256i([a as u32; 8])
}

/// `vpmulld`: the low 32 bits of each lane's product.
#[inline(always)]
pub fn _mm256_mullo_epi32(a: __m256i, b: __m256i) -> __m256i {
    __m256i(core::array::from_fn(|l| a.0[l].wrapping_mul(b.0[l])))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The truth tables the SHA-512 code relies on: 0x96 is a ⊕ b ⊕ c, 0xCA is
    /// "a ? b : c" (choose), 0xE8 is the majority.
    #[test]
    fn ternary_logic_follows_its_truth_table() {
        let (a, b, c) = (
            __m512i([0xf0f0, 0, !0, 0x1234, 5, 6, 7, 8]),
            __m512i([0xcccc, !0, 0, 0x00ff, 9, 10, 11, 12]),
            __m512i([0xaaaa, 0x5555, !0, 0xffff, 13, 14, 15, 16]),
        );
        let xor = _mm512_ternarylogic_epi64::<0x96>(a, b, c);
        let choose = _mm512_ternarylogic_epi64::<0xCA>(a, b, c);
        let majority = _mm512_ternarylogic_epi64::<0xE8>(a, b, c);
        for l in 0..8 {
            let (a, b, c) = (a.0[l], b.0[l], c.0[l]);
            assert_eq!(xor.0[l], a ^ b ^ c);
            assert_eq!(choose.0[l], (a & b) | (!a & c));
            assert_eq!(majority.0[l], (a & b) | (a & c) | (b & c));
        }
    }
}
