//! Deterministic randomness for workloads: SplitMix64 and the Zipf-Mandelbrot sampler of the
//! Vryx test. `tally bench`'s workload and `tally storebench`'s share them; the tests below pin
//! their streams, because a seed must keep meaning the same workload for both.

/// SplitMix64: tiny, fast and fully specified, so a seed means the same workload on every
/// platform and version.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in `[0, n)`.
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// Normal with `mean` and `std` (Box-Muller), rounded and clipped to `[min, max]`.
    pub fn normal(&mut self, mean: f64, std: f64, min: u64, max: u64) -> u64 {
        let u1 = self.next_f64().max(f64::MIN_POSITIVE);
        let u2 = self.next_f64();
        let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
        (mean + std * z).round().clamp(min as f64, max as f64) as u64
    }

    /// Replaces `out` with `n` pseudo-random bytes.
    pub fn fill(&mut self, out: &mut Vec<u8>, n: usize) {
        out.clear();
        while out.len() < n {
            out.extend_from_slice(&self.next_u64().to_le_bytes());
        }
        out.truncate(n);
    }
}

/// How benchmark accounts are picked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Distribution {
    /// Every account equally likely.
    Uniform,
    /// Zipf-Mandelbrot with s = 1.0001, v = 2.7, as in the Vryx test: a few accounts are very
    /// hot, most are cold.
    Zipf,
}

impl Distribution {
    /// Its command-line label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Uniform => "uniform",
            Self::Zipf => "zipf",
        }
    }
}

/// Samples ranks `0..n` from Zipf-Mandelbrot, P(k) ∝ (k + v)^-s for k = 1..n, by
/// rejection-inversion (Hörmann & Derflinger 1996): O(1) memory and time per sample, so ten
/// million accounts need no table.
#[derive(Debug, Clone)]
pub struct ZipfMandelbrot {
    n: f64,
    s: f64,
    v: f64,
    h_x1: f64,
    h_n: f64,
    threshold: f64,
}

impl ZipfMandelbrot {
    /// The Vryx parameters: s = 1.0001, v = 2.7.
    pub fn vryx(n: u64) -> Self {
        Self::new(n, 1.0001, 2.7)
    }

    /// A sampler over `n` ranks with exponent `s` (> 0, ≠ 1 is fine and so is 1) and shift `v`.
    pub fn new(n: u64, s: f64, v: f64) -> Self {
        let mut z = Self {
            n: n as f64,
            s,
            v,
            h_x1: 0.0,
            h_n: 0.0,
            threshold: 0.0,
        };
        z.h_x1 = z.big_h(1.5) - z.h(1.0);
        z.h_n = z.big_h(z.n + 0.5);
        z.threshold = 2.0 - z.big_h_inv(z.big_h(2.5) - z.h(2.0));
        z
    }

    fn h(&self, x: f64) -> f64 {
        (-self.s * (x + self.v).ln()).exp()
    }

    /// An antiderivative of `h`: ((x+v)^(1-s) - 1) / (1-s), computed stably near s = 1.
    fn big_h(&self, x: f64) -> f64 {
        let log_x = (x + self.v).ln();
        helper2((1.0 - self.s) * log_x) * log_x
    }

    fn big_h_inv(&self, y: f64) -> f64 {
        let t = (y * (1.0 - self.s)).max(-1.0);
        (helper1(t) * y).exp() - self.v
    }

    /// A rank in `0..n` (0 is the hottest).
    pub fn sample(&self, rng: &mut Rng) -> u64 {
        loop {
            let u = self.h_n + rng.next_f64() * (self.h_x1 - self.h_n);
            let x = self.big_h_inv(u);
            let k = x.round().clamp(1.0, self.n);
            if k - x <= self.threshold || u >= self.big_h(k + 0.5) - self.h(k) {
                return k as u64 - 1;
            }
        }
    }
}

/// log1p(x) / x, stable near 0.
fn helper1(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))
    }
}

/// expm1(x) / x, stable near 0.
fn helper2(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x * 0.5 * (1.0 + x * (1.0 / 3.0) * (1.0 + 0.25 * x))
    }
}

/// Picks accounts for transfers.
#[derive(Debug, Clone)]
pub enum Sampler {
    /// Uniform over `0..n`.
    Uniform(u64),
    /// Zipf-Mandelbrot.
    Zipf(ZipfMandelbrot),
}

impl Sampler {
    /// A sampler over `accounts` accounts.
    pub fn new(dist: Distribution, accounts: u64) -> Self {
        match dist {
            Distribution::Uniform => Self::Uniform(accounts),
            Distribution::Zipf => Self::Zipf(ZipfMandelbrot::vryx(accounts)),
        }
    }

    /// An account index.
    pub fn sample(&self, rng: &mut Rng) -> u64 {
        match self {
            Self::Uniform(n) => rng.below(*n),
            Self::Zipf(z) => z.sample(rng),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PINNED_WORDS: [u64; 3] = [
        7958955049054603978,
        16462000697783136304,
        15847914186252977247,
    ];
    const PINNED_BYTES: [u8; 11] = [158, 248, 243, 38, 12, 235, 228, 125, 185, 202, 120];
    const PINNED_NORMALS: [u64; 4] = [59, 58, 57, 54];
    const PINNED_RANKS: [u64; 6] = [378, 26, 65, 1122, 797754, 110];

    // The streams as they were when `tally storebench` kept its own copy of this code
    // (src/commands/storebench_workload.rs): a change here changes both workloads.
    #[test]
    fn a_seed_gives_the_same_streams_as_before() {
        let mut rng = Rng::new(4);
        let words: Vec<u64> = (0..3).map(|_| rng.next_u64()).collect();
        assert_eq!(words, PINNED_WORDS);
        let mut bytes = Vec::new();
        rng.fill(&mut bytes, 11);
        assert_eq!(bytes, PINNED_BYTES);
        let normals: Vec<u64> = (0..4).map(|_| rng.normal(56.0, 3.0, 4, 1024)).collect();
        assert_eq!(normals, PINNED_NORMALS);
        let zipf = ZipfMandelbrot::vryx(10_000_000);
        let ranks: Vec<u64> = (0..6).map(|_| zipf.sample(&mut rng)).collect();
        assert_eq!(ranks, PINNED_RANKS);
    }
}
