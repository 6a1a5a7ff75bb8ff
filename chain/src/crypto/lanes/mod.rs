//! ZIP-215 batch verification with a different signature in each 64-bit lane: eight lanes a
//! register on AVX-512F ([`avx512`], and [`avx512ifma`] where the CPU has IFMA's 52-bit
//! multiplier), or the same code on AVX2 ([`avx2`]), where each eight-lane register is a pair
//! of four-lane ones.
//!
//! Same rules and same batch equation as [`super::zip215`] (which stays the reference and
//! the fallback), computed with its own arithmetic: curve25519-dalek's vector backends work
//! on the four coordinates of one point (AVX2 or AVX-512 IFMA), while this puts a different
//! point in each lane, which AVX-512F (or AVX2) multiplies a lane at a time, 32×32→64 bits
//! ([`avx512`], [`avx2`]) or, with IFMA, 52×52→104 ([`avx512ifma`]):
//! - the `R` of eight signatures (and keys missing from the cache) are decompressed at once;
//! - the multiscalar multiplication has each lane sum a different Pippenger bucket.
//!
//! Single verification, for the few signatures a failed batch is narrowed down to, is
//! [`super::zip215::verify_one`]: one definition of validity.
//!
//! # One source, three instruction sets
//! The code is written once, with AVX-512F's intrinsics (`_mm512_*`, `__m512i`, `__mmask8`),
//! and compiled three times. Each file (`field`, `point`, `msm`, `sha512`, `batch`, `tests`)
//! is a macro that writes its items with the `#[target_feature]` it is given, and `backend!`
//! writes them all out in a module that also has a `simd` module in scope:
//! - [`avx512`]: `core::arch`'s intrinsics, every function `target_feature(enable =
//!   "avx512f")`; with the `emulated-avx512` feature, a scalar stand-in (`emulated`) and no
//!   target feature, so that its logic runs on any CPU (the differential fuzzer, tests);
//! - [`avx2`]: the same names on AVX2 (`on_avx2`: each intrinsic on two `__m256i`), every
//!   function `target_feature(enable = "avx2")`, so it never executes an AVX-512
//!   instruction. The `emulated-avx512` feature leaves it as it is;
//! - [`avx512ifma`]: as [`avx512`], every function `target_feature(enable =
//!   "avx512f,avx512ifma")`, but with the field of `field_ifma` (five limbs in radix 2⁵¹,
//!   multiplied by `vpmadd52luq`/`vpmadd52huq`) in place of `field`'s ten limbs. Both field
//!   layouts have the same `F8` operations, exchange elements in the ten-limb layout
//!   (`from_lanes`, `to_lanes`, table rows), and share `field_common`. It runs on IFMA
//!   hardware only: there is no scalar stand-in for it.

// With `emulated-avx512` the AVX-512 backend's functions lose `#[target_feature]` and the
// intrinsics their `unsafe`, so the `unsafe` blocks around calls to them have nothing left
// to allow.
#![cfg_attr(feature = "emulated-avx512", allow(unused_unsafe, unused_mut))]

#[cfg(feature = "emulated-avx512")]
mod emulated;
mod on_avx2;

// Each defines the macro of its name (and `field` the limb helpers the others use).
#[macro_use]
mod field;
#[macro_use]
mod field_ifma;
#[macro_use]
mod point;
#[macro_use]
mod msm;
#[macro_use]
mod sha512;
#[macro_use]
mod batch;
#[cfg(test)]
#[macro_use]
mod tests;

/// A table row: an affine point as an addend, (y + x, y − x, 2dxy), each element's ten
/// reduced limbs packed two to a word (even limb low, odd limb high), so a lane loads a point
/// with 15 gathers. Aligned to cache lines, so that a row is two lines, not three. Every
/// backend lays rows out alike (the IFMA one pairs the limbs as it gathers them), so the key
/// cache ([`super::Keys`]) serves any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C, align(64))]
pub struct Row(pub [u64; 15]);

/// The row of the identity: y + x = 1, y − x = 1, 2dxy = 0. Row 0 of every table: lanes
/// with no bucket left add it.
pub const IDENTITY_ROW: Row = Row([1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]);

/// The whole backend, each function compiled with `#[$feature]`, in the module this is
/// written in, which must have a `simd` module (the intrinsics, and `opaque` where the field
/// uses it: the ten-limb one does), `NAME` and `available()`. `$field` names the field
/// layout's macro: `field` (ten limbs) unless given.
macro_rules! backend {
    ($feature:meta) => {
        backend!($feature, field);
    };
    ($feature:meta, $field:ident) => {
        #[allow(clippy::needless_range_loop)] // limb loops index several arrays in step
        mod field {
            $field!($feature);
        }
        #[allow(non_snake_case)] // X, Y, Z, T: the coordinates' names in the formulas
        mod point {
            point!($feature);
        }
        mod msm {
            msm!($feature);
        }
        mod sha512 {
            sha512!($feature);
        }
        batch!($feature);
        #[cfg(test)]
        #[allow(non_snake_case)]
        mod tests {
            lanes_tests!($feature);
        }
    };
}

pub mod avx512 {
    //! The backend on AVX-512F: eight lanes a `zmm` register.

    /// The name `TALLY_VERIFY_BACKEND` knows this backend by.
    const NAME: &str = "avx512";

    /// The intrinsics: the CPU's, or with the `emulated-avx512` feature a scalar stand-in
    /// (`emulated`) that runs anywhere.
    mod simd {
        #[cfg(not(feature = "emulated-avx512"))]
        pub use core::arch::x86_64::*;

        #[cfg(feature = "emulated-avx512")]
        pub use super::super::emulated::*;

        /// `v`, hidden from the optimiser. A product of `vpmuludq` whose only use is as
        /// another `vpmuludq` operand has only its low 32 bits "demanded", and LLVM then
        /// drops the masking that made it a 32×32-bit product and emulates a full 64×64-bit
        /// multiply instead (three multiplications). The empty `asm!` costs nothing and keeps
        /// the single instruction.
        #[inline]
        #[cfg_attr(not(feature = "emulated-avx512"), target_feature(enable = "avx512f"))]
        pub fn opaque(mut v: __m512i) -> __m512i {
            // SAFETY: the assembly is empty: it reads and writes nothing but the register it
            // is given, which it leaves unchanged.
            #[cfg(not(feature = "emulated-avx512"))]
            unsafe {
                core::arch::asm!("/* {0} */", inout(zmm_reg) v, options(pure, nomem, nostack))
            };
            v
        }
    }

    /// Whether this CPU runs this backend: it has AVX-512F, or the build emulates it.
    pub fn available() -> bool {
        cfg!(feature = "emulated-avx512") || std::arch::is_x86_feature_detected!("avx512f")
    }

    backend!(cfg_attr(
        not(feature = "emulated-avx512"),
        target_feature(enable = "avx512f")
    ));
}

pub mod avx512ifma {
    //! The backend on AVX-512F with IFMA: the AVX-512F backend's code with the field
    //! arithmetic of [`field_ifma`](super::field_ifma) (five limbs in radix 2⁵¹ and the 52-bit
    //! multiplier) in place of ten limbs and `vpmuludq`.

    /// The name `TALLY_VERIFY_BACKEND` knows this backend by.
    const NAME: &str = "avx512ifma";

    /// The intrinsics: the CPU's (there is no scalar stand-in for IFMA's).
    mod simd {
        pub use core::arch::x86_64::*;
    }

    /// Whether this CPU runs this backend: it has AVX-512F and AVX-512 IFMA.
    pub fn available() -> bool {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512ifma")
    }

    backend!(target_feature(enable = "avx512f,avx512ifma"), field_ifma);
}

pub mod avx2 {
    //! The backend on AVX2: each eight-lane register a pair of `ymm` registers
    //! (`on_avx2`).

    /// The name `TALLY_VERIFY_BACKEND` knows this backend by.
    const NAME: &str = "avx2";

    /// AVX-512F's intrinsics, each on two AVX2 registers.
    mod simd {
        pub use super::super::on_avx2::*;
    }

    /// Whether this CPU runs this backend: it has AVX2.
    pub fn available() -> bool {
        std::arch::is_x86_feature_detected!("avx2")
    }

    backend!(target_feature(enable = "avx2"));
}
