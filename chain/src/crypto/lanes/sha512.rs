//! SHA-512 of eight 96-byte messages at once, one per 64-bit lane: the challenge hash
//! `SHA-512(R ‖ A ‖ M)` of eight signatures over 32-byte messages (transaction ids), which
//! fits one padded block. SHA-512 works on 64-bit words, so AVX-512F's rotates and
//! three-input logic (`vprorq`, `vpternlogq`) do a round for eight messages in about the
//! instructions one scalar round takes (on AVX2, which has neither, a rotate is two shifts
//! and an OR, and each three-input function two or three instructions, on two registers).

/// This module's items, each function compiled with `$feature` (`#[target_feature]`):
/// see [`super`] for where they are written out.
macro_rules! sha512 {
    ($feature:meta) => {
        use super::simd::*;

        /// The round constants (FIPS 180-4, 4.2.3).
        const K: [u64; 80] = [
            0x428a2f98d728ae22,
            0x7137449123ef65cd,
            0xb5c0fbcfec4d3b2f,
            0xe9b5dba58189dbbc,
            0x3956c25bf348b538,
            0x59f111f1b605d019,
            0x923f82a4af194f9b,
            0xab1c5ed5da6d8118,
            0xd807aa98a3030242,
            0x12835b0145706fbe,
            0x243185be4ee4b28c,
            0x550c7dc3d5ffb4e2,
            0x72be5d74f27b896f,
            0x80deb1fe3b1696b1,
            0x9bdc06a725c71235,
            0xc19bf174cf692694,
            0xe49b69c19ef14ad2,
            0xefbe4786384f25e3,
            0x0fc19dc68b8cd5b5,
            0x240ca1cc77ac9c65,
            0x2de92c6f592b0275,
            0x4a7484aa6ea6e483,
            0x5cb0a9dcbd41fbd4,
            0x76f988da831153b5,
            0x983e5152ee66dfab,
            0xa831c66d2db43210,
            0xb00327c898fb213f,
            0xbf597fc7beef0ee4,
            0xc6e00bf33da88fc2,
            0xd5a79147930aa725,
            0x06ca6351e003826f,
            0x142929670a0e6e70,
            0x27b70a8546d22ffc,
            0x2e1b21385c26c926,
            0x4d2c6dfc5ac42aed,
            0x53380d139d95b3df,
            0x650a73548baf63de,
            0x766a0abb3c77b2a8,
            0x81c2c92e47edaee6,
            0x92722c851482353b,
            0xa2bfe8a14cf10364,
            0xa81a664bbc423001,
            0xc24b8b70d0f89791,
            0xc76c51a30654be30,
            0xd192e819d6ef5218,
            0xd69906245565a910,
            0xf40e35855771202a,
            0x106aa07032bbd1b8,
            0x19a4c116b8d2d0c8,
            0x1e376c085141ab53,
            0x2748774cdf8eeb99,
            0x34b0bcb5e19b48a8,
            0x391c0cb3c5c95a63,
            0x4ed8aa4ae3418acb,
            0x5b9cca4f7763e373,
            0x682e6ff3d6b2b8a3,
            0x748f82ee5defb2fc,
            0x78a5636f43172f60,
            0x84c87814a1f0ab72,
            0x8cc702081a6439ec,
            0x90befffa23631e28,
            0xa4506cebde82bde9,
            0xbef9a3f7b2c67915,
            0xc67178f2e372532b,
            0xca273eceea26619c,
            0xd186b8c721c0c207,
            0xeada7dd6cde0eb1e,
            0xf57d4f7fee6ed178,
            0x06f067aa72176fba,
            0x0a637dc5a2c898a6,
            0x113f9804bef90dae,
            0x1b710b35131c471b,
            0x28db77f523047d84,
            0x32caab7b40c72493,
            0x3c9ebe0a15c9bebc,
            0x431d67c49c100d4c,
            0x4cc5d4becb3e42b6,
            0x597f299cfc657e2a,
            0x5fcb6fab3ad6faec,
            0x6c44198c4a475817,
        ];

        /// The initial hash value (FIPS 180-4, 5.3.5).
        const H0: [u64; 8] = [
            0x6a09e667f3bcc908,
            0xbb67ae8584caa73b,
            0x3c6ef372fe94f82b,
            0xa54ff53a5f1d36f1,
            0x510e527fade682d1,
            0x9b05688c2b3e6c1f,
            0x1f83d9abfb41bd6b,
            0x5be0cd19137e2179,
        ];

        /// The SHA-512 digest of each of eight 96-byte messages.
        #[$feature]
        pub fn sha512_96(messages: &[[u8; 96]; 8]) -> [[u8; 64]; 8] {
            // The one block: 12 message words, the 1 bit, zeros, and the length (768 bits).
            let mut w = [_mm512_setzero_si512(); 16];
            for (t, word) in w.iter_mut().enumerate().take(12) {
                let lanes: [u64; 8] = core::array::from_fn(|l| {
                    u64::from_be_bytes(messages[l][8 * t..8 * t + 8].try_into().expect("8 bytes"))
                });
                // SAFETY: `lanes` is 64 readable bytes; the load has no alignment requirement.
                *word = unsafe { _mm512_loadu_si512(lanes.as_ptr().cast()) };
            }
            w[12] = _mm512_set1_epi64(1 << 63);
            w[15] = _mm512_set1_epi64(96 * 8);

            let mut s: [__m512i; 8] = [_mm512_setzero_si512(); 8];
            for (v, h) in s.iter_mut().zip(H0) {
                *v = _mm512_set1_epi64(h as i64);
            }
            let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut h] = s;
            for t in 0..80 {
                let wt = if t < 16 {
                    w[t]
                } else {
                    // σ1(w[t−2]) + w[t−7] + σ0(w[t−15]) + w[t−16], in a ring of 16.
                    let w2 = w[(t - 2) % 16];
                    let w15 = w[(t - 15) % 16];
                    let (sigma1, sigma0) = (small_sigma1(w2), small_sigma0(w15));
                    let next = _mm512_add_epi64(
                        _mm512_add_epi64(sigma1, w[(t - 7) % 16]),
                        _mm512_add_epi64(sigma0, w[t % 16]),
                    );
                    w[t % 16] = next;
                    next
                };
                let sigma1_e = big_sigma1(e);
                // Ch(e, f, g) = (e ∧ f) ⊕ (¬e ∧ g): truth table 0xCA.
                let ch = _mm512_ternarylogic_epi64::<0xCA>(e, f, g);
                let t1 = _mm512_add_epi64(
                    _mm512_add_epi64(h, sigma1_e),
                    _mm512_add_epi64(_mm512_add_epi64(ch, _mm512_set1_epi64(K[t] as i64)), wt),
                );
                let sigma0_a = big_sigma0(a);
                // Maj(a, b, c): truth table 0xE8.
                let maj = _mm512_ternarylogic_epi64::<0xE8>(a, b, c);
                let t2 = _mm512_add_epi64(sigma0_a, maj);
                h = g;
                g = f;
                f = e;
                e = _mm512_add_epi64(d, t1);
                d = c;
                c = b;
                b = a;
                a = _mm512_add_epi64(t1, t2);
            }
            let out = [a, b, c, d, e, f, g, h];
            let mut words = [[0u64; 8]; 8];
            for (i, (v, h0)) in out.iter().zip(H0).enumerate() {
                let sum = _mm512_add_epi64(*v, _mm512_set1_epi64(h0 as i64));
                // SAFETY: `words[i]` is 64 writable bytes; no alignment requirement.
                unsafe { _mm512_storeu_si512(words[i].as_mut_ptr().cast(), sum) };
            }
            core::array::from_fn(|lane| {
                let mut digest = [0u8; 64];
                for (i, chunk) in digest.chunks_mut(8).enumerate() {
                    chunk.copy_from_slice(&words[i][lane].to_be_bytes());
                }
                digest
            })
        }

        // The four functions of FIPS 180-4, 4.1.3, on eight words at once: each the XOR of three
        // rotations or shifts (`vpternlogq` truth table 0x96 is a ⊕ b ⊕ c).

        /// Σ0(x) = ROTR²⁸(x) ⊕ ROTR³⁴(x) ⊕ ROTR³⁹(x), of the round's `a`.
        #[inline]
        #[$feature]
        fn big_sigma0(x: __m512i) -> __m512i {
            _mm512_ternarylogic_epi64::<0x96>(
                _mm512_ror_epi64::<28>(x),
                _mm512_ror_epi64::<34>(x),
                _mm512_ror_epi64::<39>(x),
            )
        }

        /// Σ1(x) = ROTR¹⁴(x) ⊕ ROTR¹⁸(x) ⊕ ROTR⁴¹(x), of the round's `e`.
        #[inline]
        #[$feature]
        fn big_sigma1(x: __m512i) -> __m512i {
            _mm512_ternarylogic_epi64::<0x96>(
                _mm512_ror_epi64::<14>(x),
                _mm512_ror_epi64::<18>(x),
                _mm512_ror_epi64::<41>(x),
            )
        }

        /// σ0(x) = ROTR¹(x) ⊕ ROTR⁸(x) ⊕ SHR⁷(x), of the message schedule's w[t − 15].
        #[inline]
        #[$feature]
        fn small_sigma0(x: __m512i) -> __m512i {
            _mm512_ternarylogic_epi64::<0x96>(
                _mm512_ror_epi64::<1>(x),
                _mm512_ror_epi64::<8>(x),
                _mm512_srli_epi64::<7>(x),
            )
        }

        /// σ1(x) = ROTR¹⁹(x) ⊕ ROTR⁶¹(x) ⊕ SHR⁶(x), of the message schedule's w[t − 2].
        #[inline]
        #[$feature]
        fn small_sigma1(x: __m512i) -> __m512i {
            _mm512_ternarylogic_epi64::<0x96>(
                _mm512_ror_epi64::<19>(x),
                _mm512_ror_epi64::<61>(x),
                _mm512_srli_epi64::<6>(x),
            )
        }
    };
}
